"""Privacy definitions as small immutable values (MATH.md 2, 5).

Each value is the guarantee of one mechanism (or of a composition). The constructors validate: every
parameter must be a finite number in its range, or :class:`BudgetError` is raised. Each value knows its
own sequential composition (``a + b`` or ``Cls.compose(values)``) and its conversion to (epsilon, delta)
(``epsilon_at(delta)``, ``delta_at(epsilon)``) by the best known SAFE formula of MATH.md 5.8;
mechanism costs live in :mod:`overlapdp.privacy.mechanisms`, tight (epsilon, delta) composition in
:mod:`overlapdp.privacy.optimal` and :mod:`overlapdp.privacy.pld`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol, runtime_checkable

from overlapdp import display
from overlapdp.errors import BudgetError as BudgetError
from overlapdp.exact import float_up, sum_up
from overlapdp.privacy import conversions as conv
from overlapdp.privacy.neighbouring import Neighbouring as Neighbouring  # (MATH.md 1.2)
from overlapdp.validation import check_positive, check_probability


def check_neighbouring(value: str, error: type[Exception] = BudgetError) -> Neighbouring:
    """``value`` as a :data:`Neighbouring`, or ``error`` (a :class:`BudgetError`) naming the choices."""
    if value not in ("add_remove", "replace"):
        raise error(f"neighbouring must be 'add_remove' or 'replace', got {value!r}")
    return "replace" if value == "replace" else "add_remove"


#: The Rényi filter's rules over several orders (MATH.md 2.7.2).
RDP_RULES = ("every", "some")


def check_rdp_rule(value: str, error: type[Exception] = BudgetError) -> str:
    """``value`` as a Rényi rule (``"every"`` or ``"some"``), or ``error`` naming the choices."""
    if value not in RDP_RULES:
        raise error(f"the Rényi rule must be 'every' or 'some' (order), got {str(value)[:40]!r}")
    return str(value)


def _half_square_up(x: float) -> float:
    """x^2 / 2 rounded UP from the exact value (a float square can round down or underflow to 0)."""
    return float_up(Fraction(x) ** 2 / 2)


def _shown(name: str, **fields: float | tuple[float, ...]) -> str:
    """``Name(field=value, ...)`` for people: losses, deltas and orders as short decimals rounded to the
    safe side (:mod:`overlapdp.display`: a computed ``0.1 + 0.2`` is ``0.300001``, never ``0.3``, and no
    ``0.30000000000000004``; a figure typed as a short decimal prints as typed); ``omega`` rounded down (a smaller omega is a weaker guarantee)."""

    def one(key: str, v: float) -> str:
        if key == "orders":  # not a privacy figure: the nearest short decimal
            return display.decimal(v)
        return display.remaining(v) if key == "omega" else display.spent(v)

    parts = []
    for key, value in fields.items():
        text = (
            "(" + ", ".join(one(key, v) for v in value) + ")" if isinstance(value, tuple) else one(key, value)
        )
        parts.append(f"{key}={text}")
    return f"{name}({', '.join(parts)})"


@runtime_checkable
class Guarantee(Protocol):
    """Anything that can state its privacy profile: epsilon at a delta and delta at an epsilon (safe)."""

    def epsilon_at(self, delta: float) -> float: ...

    def delta_at(self, epsilon: float) -> float: ...


def check_delta(delta: float) -> float:
    """A target delta must lie in (0, 1) (:class:`BudgetError` naming ``delta`` otherwise)."""
    return check_probability(delta, "delta")


@dataclass(frozen=True)
class PureDP:
    """epsilon-DP."""

    def __repr__(self) -> str:
        return _shown("PureDP", epsilon=self.epsilon)

    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_positive(self.epsilon, "epsilon", allow_zero=True))

    @staticmethod
    def compose(items: Iterable[PureDP]) -> PureDP:
        """Basic composition: epsilons add (Dwork et al. 2006; MATH.md 2.4)."""
        return PureDP(sum_up(p.epsilon for p in items))

    def __add__(self, other: PureDP) -> PureDP:
        return PureDP.compose((self, other))

    def epsilon_at(self, delta: float) -> float:
        """epsilon-DP is (epsilon, delta)-DP for every delta; for delta > 0 a smaller epsilon may hold
        (the profile of the randomized-response pair, which dominates every epsilon-DP mechanism)."""
        return ApproxDP(self.epsilon, 0.0).epsilon_at(delta)

    def delta_at(self, epsilon: float) -> float:
        return conv.approx_delta(self.epsilon, 0.0, epsilon)

    def to_zcdp(self) -> ZCDP:
        """epsilon-DP implies (epsilon^2/2)-zCDP (Bun-Steinke 2016, Prop. 3.3; MATH.md 5.8)."""
        return ZCDP(_half_square_up(self.epsilon))

    def to_tcdp(self) -> TCDP:
        """epsilon-DP is (epsilon^2/2)-zCDP (Bun-Steinke 2016, Prop. 3.3), so (epsilon^2/2, inf)-tCDP;
        rho rounded up from the exact square (MATH.md 5.9)."""
        return TCDP(_half_square_up(self.epsilon), math.inf)

    def to_rdp(self, orders: Sequence[float] = conv.DEFAULT_ORDERS) -> RDP:
        """RDP curve min(eps, alpha eps^2/2) (Mironov 2017 Prop. 3; Bun-Steinke 2016)."""
        return RDP(tuple(orders), conv.pure_rdp(self.epsilon, orders))


@dataclass(frozen=True)
class ApproxDP:
    """(epsilon, delta)-DP."""

    def __repr__(self) -> str:
        return _shown("ApproxDP", epsilon=self.epsilon, delta=self.delta)

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_positive(self.epsilon, "epsilon", allow_zero=True))
        object.__setattr__(self, "delta", check_probability(self.delta, "delta", allow_zero=True))

    @staticmethod
    def compose(items: Iterable[ApproxDP]) -> ApproxDP:
        """Basic composition (epsilons and deltas add). For the tight optimal composition use
        :func:`overlapdp.privacy.optimal.compose_approx` (MATH.md 5)."""
        xs = list(items)
        return ApproxDP(sum_up(p.epsilon for p in xs), sum_up(p.delta for p in xs))

    def __add__(self, other: ApproxDP) -> ApproxDP:
        return ApproxDP.compose((self, other))

    def delta_at(self, epsilon: float) -> float:
        """Profile of the (epsilon, delta) dominating pair (Kairouz-Oh-Viswanath 2015; MATH.md 5.4)."""
        return conv.approx_delta(self.epsilon, self.delta, epsilon)

    def epsilon_at(self, delta: float) -> float:
        """Smallest epsilon' with delta_at(epsilon') <= delta; infinite when delta < self.delta."""
        if delta < self.delta:
            return math.inf
        return conv.invert_decreasing(self.delta_at, delta, 0.0, self.epsilon)


@dataclass(frozen=True)
class ZCDP:
    """rho-zero-concentrated DP (Bun and Steinke 2016)."""

    def __repr__(self) -> str:
        return _shown("ZCDP", rho=self.rho)

    rho: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "rho", check_positive(self.rho, "rho", allow_zero=True))

    @staticmethod
    def compose(items: Iterable[ZCDP]) -> ZCDP:
        """rho adds (Bun-Steinke 2016 Lemma 2.3; concurrently too, Lyu 2022 Cor. 1; MATH.md 2.4, 3.4)."""
        return ZCDP(sum_up(p.rho for p in items))

    def __add__(self, other: ZCDP) -> ZCDP:
        return ZCDP.compose((self, other))

    def epsilon_at(self, delta: float) -> float:
        """Canonne-Kamath-Steinke 2020 conversion, minimised over alpha (MATH.md 5.8)."""
        return conv.zcdp_epsilon(self.rho, check_delta(delta))

    def delta_at(self, epsilon: float) -> float:
        return conv.zcdp_delta(self.rho, epsilon)

    def to_rdp(self, orders: Sequence[float] = conv.DEFAULT_ORDERS) -> RDP:
        """rho-zCDP is (alpha, alpha rho)-RDP for every alpha > 1 (Bun-Steinke 2016, Def. 1.1)."""
        return RDP(tuple(orders), tuple(sum_up((Fraction(a) * Fraction(self.rho),)) for a in orders))

    def to_tcdp(self) -> TCDP:
        """rho-zCDP is (rho, inf)-tCDP: the same Rényi bound at every order (Bun, Dwork, Rothblum,
        Steinke 2018, Def. 1; MATH.md 5.9)."""
        return TCDP(self.rho, math.inf)


@dataclass(frozen=True)
class GDP:
    """mu-Gaussian DP (Dong, Roth, Su 2022)."""

    def __repr__(self) -> str:
        return _shown("GDP", mu=self.mu)

    mu: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "mu", check_positive(self.mu, "mu", allow_zero=True))

    @staticmethod
    def compose(items: Iterable[GDP]) -> GDP:
        r"""mu composes in l2: $\sqrt{\sum\mu_i^2}$ (Dong-Roth-Su 2022 Cor. 3.3; MATH.md 2.4)."""
        return GDP(math.nextafter(math.sqrt(sum_up(Fraction(p.mu) ** 2 for p in items)), math.inf))

    def __add__(self, other: GDP) -> GDP:
        return GDP.compose((self, other))

    def delta_at(self, epsilon: float) -> float:
        """Exact GDP profile (MATH.md 5.8)."""
        return conv.gdp_delta(self.mu, epsilon)

    def epsilon_at(self, delta: float) -> float:
        return conv.gdp_epsilon(self.mu, check_delta(delta))

    def to_zcdp(self) -> ZCDP:
        """mu-GDP implies (mu^2/2)-zCDP: a mu-GDP pair is a post-processing of N(0,1) vs N(mu,1), whose
        Rényi divergence of order alpha is alpha mu^2/2 (Dong-Roth-Su 2022, Prop. 2.10 with data
        processing for Rényi divergences)."""
        return ZCDP(_half_square_up(self.mu))

    def to_tcdp(self) -> TCDP:
        """mu-GDP is (mu^2/2)-zCDP (see :meth:`to_zcdp`), so (mu^2/2, inf)-tCDP; rho rounded up."""
        return TCDP(_half_square_up(self.mu), math.inf)


@dataclass(frozen=True)
class RDP:
    """Rényi DP: epsilon(alpha) at each order of a fixed grid (orders > 1)."""

    def __repr__(self) -> str:
        return _shown("RDP", orders=self.orders, epsilons=self.epsilons)

    orders: tuple[float, ...]
    epsilons: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.orders:
            raise BudgetError("an RDP order grid must not be empty")
        if len(self.orders) != len(self.epsilons):
            raise BudgetError("RDP needs one epsilon per order")
        orders = tuple(check_positive(a, "RDP order", allow_zero=True) for a in self.orders)
        if any(a <= 1 for a in orders):
            raise BudgetError("RDP orders must be > 1")
        object.__setattr__(self, "orders", orders)
        object.__setattr__(
            self, "epsilons", tuple(check_positive(e, "RDP epsilon", allow_zero=True) for e in self.epsilons)
        )

    @staticmethod
    def compose(items: Iterable[RDP]) -> RDP:
        """Epsilons add order by order (Mironov 2017 Prop. 1; concurrently too, Lyu 2022 Thm. 2)."""
        xs = list(items)
        if not xs:
            raise BudgetError("cannot compose an empty list of RDP guarantees")
        orders = xs[0].orders
        if any(x.orders != orders for x in xs):
            raise BudgetError("RDP guarantees on different order grids cannot be composed")
        return RDP(orders, tuple(sum_up(col) for col in zip(*(x.epsilons for x in xs), strict=True)))

    def __add__(self, other: RDP) -> RDP:
        return RDP.compose((self, other))

    def epsilon_at(self, delta: float, rule: str = "every") -> float:
        """Improved conversion (Balle et al. 2020 Thm. 21), minimised over the orders (MATH.md 5.8): the
        curve holds at every order at once. ``rule="some"``: the guarantee of a Rényi filter that admits
        while SOME order fits this budget curve, a union bound over the orders (MATH.md 2.7.2)."""
        if check_rdp_rule(rule) == "some":
            return conv.rdp_some_epsilon(self.orders, self.epsilons, check_delta(delta))
        return conv.rdp_epsilon(self.orders, self.epsilons, check_delta(delta))

    def delta_at(self, epsilon: float, rule: str = "every") -> float:
        """The inverse of :meth:`epsilon_at` (``rule`` as there)."""
        if check_rdp_rule(rule) == "some":
            return conv.rdp_some_delta(self.orders, self.epsilons, epsilon)
        return conv.rdp_delta(self.orders, self.epsilons, epsilon)

    @staticmethod
    def target(
        epsilon: float, delta: float, orders: Sequence[float] = conv.DEFAULT_ORDERS, rule: str = "some"
    ) -> RDP:
        """The budget curve of a Rényi filter whose run is to be (``epsilon``, ``delta``)-DP (MATH.md
        2.7.2): per order the budget at which that order alone converts to ``epsilon`` (rounded down),
        at ``delta / |orders|`` for ``rule="some"`` (the union bound over the orders, which keeps only
        the orders whose budget is positive and recomputes at delta over their number) and at
        ``delta`` for ``rule="every"`` (orders with no positive budget dropped). Give the filter the
        same rule (``PrivacyFilter(..., rdp_rule=rule)``); :meth:`epsilon_at` with it then gives
        ``epsilon`` back (up to its bisection's 1e-9, on the safe side)."""
        check_positive(epsilon, "epsilon")
        d = check_delta(delta)
        if d == 0:
            raise BudgetError("an RDP target needs delta > 0")
        kept = tuple(RDP(tuple(orders), tuple(0.0 for _ in orders)).orders)
        while True:
            share = d / len(kept) if check_rdp_rule(rule) == "some" else d
            curve = conv.rdp_target(kept, epsilon, share)
            pos = tuple(a for a, b in zip(kept, curve, strict=True) if b > 0)
            if not pos:
                raise BudgetError(
                    f"no order of the grid has a positive budget for epsilon = {epsilon!r} at delta = "
                    f"{delta!r}; give larger orders or a larger epsilon"
                )
            if len(pos) == len(kept):
                return RDP(kept, curve)
            kept = pos


def _omega(value: Any) -> float:
    """A tCDP truncation order: a number > 1, infinity allowed (zCDP is omega = inf)."""
    if isinstance(value, bool):
        raise BudgetError(f"omega must be a number > 1 (infinity allowed), got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise BudgetError(f"omega must be a number > 1 (infinity allowed), got {value!r}") from None
    if math.isnan(v) or v <= 1:
        raise BudgetError(f"omega must be a number > 1 (infinity allowed), got {value!r}")
    return v


@dataclass(frozen=True)
class TCDP:
    """(rho, omega)-truncated concentrated DP (Bun, Dwork, Rothblum, Steinke, "Composable and versatile
    privacy via truncated CDP", STOC 2018, Def. 1): $D_\\alpha(M(x)\\|M(x'))\\le\\rho\\alpha$ for every order
    $1<\\alpha<\\omega$ and neighbours x, x', hence also at $\\alpha=\\omega$ (MATH.md 5.9).

    ``rho`` >= 0 finite, ``omega`` > 1 (``math.inf`` is rho-zCDP). Larger rho or smaller omega is a
    weaker guarantee."""

    def __repr__(self) -> str:
        return _shown("TCDP", rho=self.rho, omega=self.omega)

    rho: float
    omega: float

    def __post_init__(self) -> None:
        if isinstance(self.rho, bool):
            raise BudgetError(f"rho must be a non-negative finite number, got {self.rho!r}")
        object.__setattr__(self, "rho", check_positive(self.rho, "rho", allow_zero=True))
        object.__setattr__(self, "omega", _omega(self.omega))

    @staticmethod
    def compose(items: Iterable[TCDP]) -> TCDP:
        """rhos add and omega is the smallest (Bun et al. 2018, composition of tCDP: Rényi divergences
        of independent products add at each order $\\alpha$, which every member bounds up to its own
        omega; concurrently too, Lyu 2022 Cor. 1; MATH.md 3.4, 5.9); rho rounded up from the exact sum."""
        xs = list(items)
        if not xs:
            raise BudgetError("cannot compose an empty list of tCDP guarantees")
        return TCDP(sum_up(p.rho for p in xs), min(p.omega for p in xs))

    def __add__(self, other: TCDP) -> TCDP:
        return TCDP.compose((self, other))

    def epsilon_at(self, delta: float) -> float:
        """The RDP conversion of Canonne-Kamath-Steinke 2020 Prop. 12 (Balle et al. 2020 Thm. 21) at
        $\\varepsilon(\\alpha)=\\alpha\\rho$, minimised over $1<\\alpha\\le\\omega$ only (MATH.md 5.9); at most
        Bun et al. 2018's closed-form conversion, whose per-order formula is looser at the same orders."""
        return conv.zcdp_epsilon(self.rho, check_delta(delta), max_order=self.omega)

    def delta_at(self, epsilon: float) -> float:
        """delta at epsilon by the same conversion over $1<\\alpha\\le\\omega$ (MATH.md 5.9)."""
        return conv.zcdp_delta(self.rho, epsilon, max_order=self.omega)

    def to_rdp(self, orders: Sequence[float] = conv.DEFAULT_ORDERS) -> RDP:
        """(alpha, alpha rho)-RDP at the orders of ``orders`` that are <= omega (the others have no
        bound); :class:`BudgetError` when none is."""
        kept = tuple(a for a in orders if a <= self.omega)
        if not kept:
            raise BudgetError(f"no RDP order of the grid is <= omega = {self.omega!r}")
        return RDP(kept, tuple(sum_up((Fraction(a) * Fraction(self.rho),)) for a in kept))
