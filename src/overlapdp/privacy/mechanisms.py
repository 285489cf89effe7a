"""The privacy cost of the common mechanisms under every definition (MATH.md 2, 5, 6).

Each mechanism is an immutable, validated description (not a sampler; samplers live in
``overlapdp.mechanisms``). It states its cost as pure DP, zCDP, GDP and RDP where such a guarantee exists,
its exact privacy profile ``delta_at(epsilon)`` under add/remove neighbours, its trade-off function and a
pessimistic PLD for tight numerical composition. All noise mechanisms here are symmetric (the two
neighbouring directions have the same PLD), so their PLDs carry a single direction.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, TypeVar

import numpy as np

from overlapdp.exact import float_up
from overlapdp.privacy import conversions as conv
from overlapdp.privacy.definitions import GDP, RDP, TCDP, ZCDP, ApproxDP, BudgetError, PureDP, check_delta
from overlapdp.privacy.fdp import GaussianTradeOff, LaplaceTradeOff, ProfileTradeOff, TradeOff
from overlapdp.privacy.pld import DEFAULT_H, PLD
from overlapdp.privacy.profile import PrivacyProfile, approx_pair_atoms, gaussian_profile, laplace_profile
from overlapdp.validation import check_positive


def _half_square(x: float) -> ZCDP | None:
    """``ZCDP(x**2 / 2)`` with rho rounded UP from the exact value: in floats the square underflows to
    0 below about 1e-162 (a zero cost) and raises OverflowError above 1e154. None when rho exceeds the
    largest float (no finite zCDP guarantee: a zCDP filter then refuses the mechanism by name)."""
    rho = float_up(Fraction(x) ** 2 / 2)
    return ZCDP(rho) if math.isfinite(rho) else None


@functools.lru_cache(maxsize=4096)  # (a service's stream repeats a few parameters; exact division is slow)
def _ratio_up(num: float, den: float) -> float:
    """``num / den`` rounded UP from the exact quotient of the two floats (a float division rounds to
    nearest, one ulp below the cost of the described mechanism about half the time: 1/3 rounds below
    1/Fraction(3.0)); inf beyond the float range. Every declared cost derived from a mechanism's
    parameters is rounded up so (MATH.md 7.8)."""
    return float_up(Fraction(num) / Fraction(den))


def _times_up(a: float, x: float) -> float:
    """``a * x`` rounded UP from the exact product (an RDP order times rho, MATH.md 7.8); inf for inf."""
    return float_up(Fraction(a) * Fraction(x)) if math.isfinite(x) else math.inf


def _finite_cost(value: float, what: str) -> None:
    """A mechanism whose cost is beyond the largest float states no guarantee: refused when built."""
    if not math.isfinite(value):
        raise BudgetError(f"{what} exceeds the largest float: no finite privacy guarantee to state")


def _pos_int(name: str, value: float) -> int:
    # A whole float (2.0) is taken: these are parameters of a privacy statement, not of a sampler.
    v = check_positive(value, name)
    if v != int(v):
        raise BudgetError(f"{name} must be a positive integer for a discrete mechanism, got {value!r}")
    return int(v)


_M = TypeVar("_M", bound=type)
_T = TypeVar("_T")

# Classes whose privacy cost is a function of their fields' values alone (see costed_by_fields).
_FIELD_COSTED: set[type] = set()
# serials of mechanisms no key can merge (Mechanism.key)
_SERIALS = itertools.count()


def costed_by_fields(cls: _M) -> _M:
    """Declare that a frozen dataclass mechanism's cost is a function of its fields' values alone
    (nothing set apart from them, no class attribute that changes): a filter may then keep the cost
    it computed for one instance and reuse it for another of exactly this class with the same field
    values (:func:`cost_key`). Subclasses are not covered: they must declare it themselves."""
    if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):  # type: ignore[attr-defined]
        raise TypeError(f"{cls.__name__} must be a frozen dataclass to be costed by its fields")
    _FIELD_COSTED.add(cls)
    return cls


def cost_key(m: Any) -> tuple[Any, ...] | None:
    """A key that two mechanisms share only when their costs are the same: exactly the same class,
    declared :func:`costed_by_fields`, and the same field values, bit for bit (floats by their hex
    form: -0.0 is not 0.0, 1.0 is not 1) and of plain types only; None for any other mechanism."""
    cls = type(m)
    if cls not in _FIELD_COSTED:
        return None
    parts: list[Any] = [cls]
    for f in dataclasses.fields(m):
        k = _plain_key(getattr(m, f.name))
        if k is None:
            return None
        parts.append(k)
    return tuple(parts)


def kept_by_cost(
    table: dict[tuple[Any, ...], Any],
    m: Any,
    compute: Callable[[Any], _T],
    limit: int,
    keep: Callable[[_T], bool] = lambda _: True,
) -> _T:
    """``compute(m)``, kept in ``table`` under :func:`cost_key` (emptied when it holds ``limit``) for
    the mechanisms that have one and values ``keep`` accepts; computed afresh for any other."""
    key = cost_key(m)
    if key is None:
        return compute(m)
    got = table.get(key, table)
    if got is table:
        got = compute(m)
        if keep(got):
            if len(table) >= limit:
                table.clear()
            table[key] = got
    return got  # type: ignore[no-any-return]


def _plain_key(v: Any) -> Any:
    t = type(v)
    if t is float:
        return (float, v.hex())
    if t in (int, bool, str, Fraction, type(None)):
        return (t, v)
    if t is tuple:
        inner = tuple(_plain_key(x) for x in v)
        return None if any(x is None for x in inner) else (tuple, inner)
    return None


class Mechanism(PrivacyProfile):
    """A mechanism's privacy cost. Subclasses are frozen dataclasses with validated parameters; one whose
    cost is a function of its fields alone may say so with :func:`costed_by_fields`, so that filters
    and compositions keep and group its costs (any other is never grouped with another mechanism)."""

    name: str = "mechanism"
    #: Whether :meth:`pld` gives a dominating PLD, so that (epsilon, delta) accounting can compose it
    #: (False for a mechanism known only through a bound on its profile, such as :class:`OpaqueTCDP`).
    pld_composable: ClassVar[bool] = True

    def pure(self) -> PureDP | None:
        """Its pure-DP guarantee, or None when it has none."""
        return None

    def zcdp(self) -> ZCDP | None:
        """Its zCDP guarantee, or None when it has none."""
        return None

    def gdp(self) -> GDP | None:
        """Its Gaussian-DP guarantee (exact for Gaussian noise), or None."""
        return None

    def tcdp(self) -> TCDP | None:
        """Its truncated-CDP guarantee, or None: rho-zCDP (pure epsilon-DP enters as epsilon^2/2) is
        (rho, inf)-tCDP (Bun, Dwork, Rothblum, Steinke 2018, Def. 1; MATH.md 5.9)."""
        z = self.zcdp()
        return None if z is None else z.to_tcdp()

    def rdp(self, orders: Sequence[float] = conv.DEFAULT_ORDERS) -> RDP | None:
        """Its Rényi-DP curve on ``orders``, or None when it has none (approximate DP)."""
        z = self.zcdp()
        p = self.pure()
        if z is None and p is None:
            return None
        eps = [math.inf] * len(orders)
        if z is not None:
            eps = [min(e, _times_up(a, z.rho)) for e, a in zip(eps, orders, strict=True)]
        if p is not None:
            eps = [min(e, r) for e, r in zip(eps, conv.pure_rdp(p.epsilon, orders), strict=True)]
        return RDP(tuple(orders), tuple(eps))

    def approx(self, delta: float) -> ApproxDP:
        """The (epsilon, delta)-DP guarantee at a target delta."""
        return ApproxDP(self.epsilon_at(delta), delta)

    def pld(self, h: float = DEFAULT_H) -> PLD:
        """A pessimistic PLD (connect-the-dots from the exact profile)."""
        lo, hi = self.loss_range()
        return PLD.from_profile(self.profile, lo, hi, h)

    def tradeoff(self) -> TradeOff:
        """Its trade-off function (f-DP)."""
        return ProfileTradeOff.from_mechanism(self)

    @property
    def key(self) -> tuple[object, ...]:
        """Mechanisms with the same key have the same privacy cost, and compositions group them (their
        repr too: its caches are keyed by it). A class costed by its fields: its :func:`cost_key`, with
        the class named by its qualified name and identity; any other mechanism: its own serial, never
        shared (its cost may hang on anything, and an address can be reused)."""
        k = cost_key(self)
        if k is not None:
            cls = k[0]
            return (f"{cls.__module__}.{cls.__qualname__}", id(cls), *k[1:])
        serial = self.__dict__.get("_overlapdp_serial") if hasattr(self, "__dict__") else None
        if serial is None:
            serial = next(_SERIALS)
            # (no instance dictionary: a new serial each time, never merged)
            with contextlib.suppress(AttributeError):
                object.__setattr__(self, "_overlapdp_serial", serial)
        return (type(self).__qualname__, "unshared", serial)


# Absolute round-off margin (times 1 / (alpha - 1)) on the exact Laplace RDP formula's log-sum-exp.
_LAPLACE_RDP_MARGIN = 1e-14
# and a relative one (about 45 ulps)
_LAPLACE_RDP_REL = 1e-14


@costed_by_fields
@dataclass(frozen=True)
class Laplace(Mechanism):
    """Laplace noise of scale b on a query of L1 sensitivity Delta: (Delta/b)-DP (Dwork et al. 2006)."""

    scale: float
    sensitivity: float = 1.0
    name = "laplace"

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_positive(self.scale, "Laplace scale"))
        object.__setattr__(self, "sensitivity", check_positive(self.sensitivity, "sensitivity"))
        _finite_cost(self.eps0, f"epsilon = sensitivity / scale = {self.sensitivity!r} / {self.scale!r}")

    @property
    def eps0(self) -> float:
        """Delta / b, rounded up from the exact quotient (never below the mechanism's cost)."""
        return _ratio_up(self.sensitivity, self.scale)

    def pure(self) -> PureDP:
        return PureDP(self.eps0)

    def zcdp(self) -> ZCDP | None:
        return _half_square(self.eps0)  # of the rounded-up epsilon: PureDP(eps0).to_zcdp() agrees

    def rdp(self, orders: Sequence[float] = conv.DEFAULT_ORDERS) -> RDP:
        """Exact Laplace RDP (Mironov 2017, Table II):
        $\\frac{1}{\\alpha-1}\\ln(\\frac{\\alpha}{2\\alpha-1}e^{(\\alpha-1)\\varepsilon_0}+\\frac{\\alpha-1}{2\\alpha-1}e^{-\\alpha\\varepsilon_0})$."""
        e = self.eps0
        # The log-sum-exp cancels to ~1e-16 absolute (even below 0) while the true value is about
        # alpha e^2 / 2: it gets a margin above its round-off, and the zCDP bound alpha rho (pure e-DP is
        # e^2/2-zCDP, Bun-Steinke 2016) takes over for small e, where it is tight.
        z = _half_square(e)
        rho = math.inf if z is None else z.rho
        out = []
        for a in orders:
            la = math.log(a / (2 * a - 1)) + (a - 1) * e
            lb = math.log((a - 1) / (2 * a - 1)) - a * e
            m = max(la, lb)
            exact = (m + math.log(math.exp(la - m) + math.exp(lb - m))) / (a - 1)
            # la and lb are of size (alpha - 1) e: their round-off, divided by alpha - 1, is a few ulps of
            # e, relative to the result; hence the relative margin beside the absolute one
            up = exact + abs(exact) * _LAPLACE_RDP_REL + _LAPLACE_RDP_MARGIN / (a - 1)
            out.append(min(e, _times_up(a, rho), up))
        return RDP(tuple(orders), tuple(out))

    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        """$1-e^{(\\varepsilon-\\varepsilon_0)/2}$ on $[-\\varepsilon_0,\\varepsilon_0]$, 0 above, $1-e^\\varepsilon$ below
        (integrating the loss of Lap(0,b) against Lap(Delta,b))."""
        return laplace_profile(self.eps0, epsilons)

    def loss_range(self) -> tuple[float, float]:
        return (-self.eps0, self.eps0)

    def tradeoff(self) -> TradeOff:
        return LaplaceTradeOff(self.eps0)


@costed_by_fields
@dataclass(frozen=True)
class Gaussian(Mechanism):
    """Gaussian noise N(0, sigma^2) on a query of L2 sensitivity Delta: exactly (Delta/sigma)-GDP
    (Dong-Roth-Su 2022 Thm. 2.7) and Delta^2/(2 sigma^2)-zCDP (Bun-Steinke 2016)."""

    sigma: float
    sensitivity: float = 1.0
    name = "gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", check_positive(self.sigma, "Gaussian sigma"))
        object.__setattr__(self, "sensitivity", check_positive(self.sensitivity, "sensitivity"))
        _finite_cost(self.mu, f"mu = sensitivity / sigma = {self.sensitivity!r} / {self.sigma!r}")

    @property
    def mu(self) -> float:
        """Delta / sigma, rounded up from the exact quotient (never below the mechanism's cost)."""
        return _ratio_up(self.sensitivity, self.sigma)

    def gdp(self) -> GDP:
        return GDP(self.mu)

    def zcdp(self) -> ZCDP | None:
        return _half_square(self.mu)  # of the rounded-up mu: GDP(mu).to_zcdp() agrees

    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        return gaussian_profile(self.mu, epsilons)

    def delta_at(self, epsilon: float) -> float:
        return conv.gdp_delta(self.mu, epsilon)

    def epsilon_at(self, delta: float) -> float:
        return conv.gdp_epsilon(self.mu, check_delta(delta))

    def loss_range(self) -> tuple[float, float]:
        # loss ~ N(mu^2/2, mu^2) under P; beyond 9 sd the mass (< 1.2e-19) is handled safely by the PLD
        mu = self.mu
        return (mu * mu / 2 - 9 * mu, mu * mu / 2 + 9 * mu)

    def tradeoff(self) -> TradeOff:
        return GaussianTradeOff(self.mu)


class _Atomic(Mechanism):
    """A mechanism whose privacy loss takes finitely many values (known exactly)."""

    def atoms(self) -> tuple[np.ndarray, np.ndarray, float]:
        """(losses, probabilities under P, mass at +infinity), one direction (symmetric mechanisms)."""
        raise NotImplementedError

    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        ls, ps, inf = self.atoms()
        e = np.asarray(epsilons, dtype=float)[:, None]
        vals = np.where(ls[None, :] > e, ps[None, :] * -np.expm1(np.minimum(e - ls[None, :], 0.0)), 0.0)
        return np.asarray(np.minimum(1.0, inf + vals.sum(axis=1)))

    def delta_at(self, epsilon: float) -> float:
        ls, ps, inf = self.atoms()
        sel = ls > epsilon
        return min(1.0, inf + float(np.sum(ps[sel] * -np.expm1(epsilon - ls[sel]))))

    def loss_range(self) -> tuple[float, float]:
        ls, _, _ = self.atoms()
        return (float(ls.min()), float(ls.max()))

    def pld(self, h: float = DEFAULT_H) -> PLD:
        """Atoms rounded UP to the grid (pessimistic)."""
        ls, ps, inf = self.atoms()
        return PLD.from_atoms(ls, ps, inf, h)


@costed_by_fields
@dataclass(frozen=True)
class RandomizedResponse(_Atomic):
    """k-ary randomized response with parameter epsilon: report the true value with probability
    $e^\\varepsilon/(e^\\varepsilon+k-1)$, else a uniformly random other value (Warner 1965); epsilon-DP,
    and for k = 2 exactly the dominating pair of every epsilon-DP mechanism (Kairouz-Oh-Viswanath 2015)."""

    epsilon: float
    categories: int = 2
    name = "randomized_response"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_positive(self.epsilon, "epsilon"))
        k = _pos_int("categories", self.categories)
        if k < 2:
            raise BudgetError("randomized response needs at least 2 categories")
        object.__setattr__(self, "categories", k)

    def pure(self) -> PureDP:
        return PureDP(self.epsilon)

    def zcdp(self) -> ZCDP | None:
        return _half_square(self.epsilon)

    def atoms(self) -> tuple[np.ndarray, np.ndarray, float]:
        e, k = self.epsilon, self.categories
        # divided through by e^eps, which overflows past eps ~ 709: e^eps / (e^eps + k - 1) etc.
        r = math.exp(-e)
        z = 1 + (k - 1) * r
        losses = [e, -e] + ([0.0] if k > 2 else [])
        probs = [1 / z, r / z] + ([(k - 2) * r / z] if k > 2 else [])
        return np.array(losses), np.array(probs), 0.0


@costed_by_fields
@dataclass(frozen=True)
class OpaqueApproxDP(_Atomic):
    """A mechanism known only to be (epsilon, delta)-DP: charged as its dominating pair (MATH.md 5.4:
    mass delta at +infinity, $(1-\\delta)\\frac{e^\\varepsilon}{1+e^\\varepsilon}$ at epsilon, the rest at -epsilon)."""

    epsilon: float
    delta: float = 0.0
    name = "approx"

    def __post_init__(self) -> None:
        g = ApproxDP(self.epsilon, self.delta)
        object.__setattr__(self, "epsilon", g.epsilon)
        object.__setattr__(self, "delta", g.delta)

    def pure(self) -> PureDP | None:
        return PureDP(self.epsilon) if self.delta == 0 else None

    def zcdp(self) -> ZCDP | None:
        return _half_square(self.epsilon) if self.delta == 0 else None

    def guarantee(self) -> ApproxDP:
        return ApproxDP(self.epsilon, self.delta)

    def atoms(self) -> tuple[np.ndarray, np.ndarray, float]:
        return approx_pair_atoms(self.epsilon, self.delta)


@costed_by_fields
@dataclass(frozen=True)
class DiscreteLaplace(_Atomic):
    """Discrete Laplace of scale t on an integer query of sensitivity Delta: pmf $\\propto e^{-|x|/t}$,
    (Delta/t)-DP (Canonne-Kamath-Steinke 2020; MATH.md 6.2). Its loss takes the values (Delta-2x)/t."""

    scale: float
    sensitivity: int = 1
    name = "discrete_laplace"

    def __post_init__(self) -> None:
        object.__setattr__(self, "scale", check_positive(self.scale, "discrete Laplace scale"))
        object.__setattr__(self, "sensitivity", _pos_int("sensitivity", self.sensitivity))
        _finite_cost(
            _ratio_up(self.sensitivity, self.scale), f"epsilon = {self.sensitivity!r} / {self.scale!r}"
        )

    def pure(self) -> PureDP:
        return PureDP(_ratio_up(self.sensitivity, self.scale))

    def zcdp(self) -> ZCDP | None:
        return _half_square(self.pure().epsilon)

    def atoms(self) -> tuple[np.ndarray, np.ndarray, float]:
        t, d = self.scale, self.sensitivity
        r = math.exp(-1 / t)
        c = (1 - r) / (1 + r)
        xs = np.arange(1, d)  # the outputs strictly between 0 and Delta
        losses = np.concatenate([[d / t], (d - 2 * xs) / t, [-d / t]])
        probs = np.concatenate([[1 / (1 + r)], c * np.exp(-xs / t), [r**d / (1 + r)]])
        return losses, probs, 0.0


@costed_by_fields
@dataclass(frozen=True)
class DiscreteGaussian(_Atomic):
    """Discrete Gaussian N_Z(0, sigma^2) on an integer query of sensitivity Delta: Delta^2/(2 sigma^2)-zCDP
    with the exact delta of MATH.md 6.2, $\\Pr[Y>\\frac{\\varepsilon\\sigma^2}{\\Delta}-\\frac\\Delta2]-e^\\varepsilon\\Pr[Y>\\frac{\\varepsilon\\sigma^2}{\\Delta}+\\frac\\Delta2]$
    (Canonne-Kamath-Steinke 2020, Thm. 7), here as the loss atoms $(\\Delta^2-2y\\Delta)/(2\\sigma^2)$ of each
    output y. The pmf is summed over $|y|\\le 12\\sigma+\\Delta$; the mass beyond (< 1e-32) is charged to
    the infinity atom."""

    sigma: float
    sensitivity: int = 1
    name = "discrete_gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", check_positive(self.sigma, "discrete Gaussian sigma"))
        object.__setattr__(self, "sensitivity", _pos_int("sensitivity", self.sensitivity))
        if self.sigma > 1e5:
            raise BudgetError("discrete Gaussian sigma above 1e5 is not supported by the exact accountant")

    def zcdp(self) -> ZCDP:
        """Delta^2 / (2 sigma^2), rounded up from the exact value (sigma <= 1e5 keeps it finite)."""
        return ZCDP(float_up(Fraction(self.sensitivity) ** 2 / (2 * Fraction(self.sigma) ** 2)))

    def atoms(self) -> tuple[np.ndarray, np.ndarray, float]:
        s, d = self.sigma, self.sensitivity
        k = math.ceil(12 * s) + d
        ys = np.arange(-k, k + 1, dtype=float)
        w = np.exp(-(ys * ys) / (2 * s * s))
        z = float(w.sum())  # a lower bound on the normaliser: the pmf below is over-estimated (safe)
        # scipy.special takes ~0.2 s to import: imported where used (DESIGN.md)
        from scipy.special import log_ndtr

        # tail beyond k on either side: sum_{y>k} e^{-y^2/2s^2} <= s sqrt(2 pi) Phi(-k/s)
        tail = s * math.sqrt(2 * math.pi) * math.exp(float(log_ndtr(-k / s))) / z
        losses = (d * d - 2 * ys * d) / (2 * s * s)
        return losses, w / z, min(1.0, 2 * tail)


@costed_by_fields
@dataclass(frozen=True)
class OpaqueTCDP(Mechanism):
    """A mechanism known only to be (rho, omega)-truncated CDP (Bun, Dwork, Rothblum, Steinke 2018,
    Def. 1; MATH.md 5.9), e.g. their sinh-normal mechanism, or a subsampled one analysed in tCDP.

    It has no pure, zCDP or Gaussian-DP guarantee (a finite omega bounds no Rényi divergence above
    omega), and no Rényi curve on a grid reaching above omega; its privacy profile is the safe tCDP
    conversion (an upper bound, not a dominating pair), so it is not composed by PLD
    (``pld_composable`` is False): the odometer reports it under tCDP, and an (epsilon, delta) filter
    charges it as ``approx(delta)`` when given ``per_mechanism_delta``."""

    rho: float
    omega: float
    name = "tcdp"
    pld_composable: ClassVar[bool] = False

    def __post_init__(self) -> None:
        g = TCDP(self.rho, self.omega)
        object.__setattr__(self, "rho", g.rho)
        object.__setattr__(self, "omega", g.omega)

    def tcdp(self) -> TCDP:
        return TCDP(self.rho, self.omega)

    def zcdp(self) -> ZCDP | None:
        return ZCDP(self.rho) if math.isinf(self.omega) else None

    def rdp(self, orders: Sequence[float] = conv.DEFAULT_ORDERS) -> RDP | None:
        """(alpha, alpha rho)-RDP when every order of the grid is <= omega, else None (the grid's
        higher orders have no bound)."""
        if all(a <= self.omega for a in orders):
            return self.tcdp().to_rdp(orders)
        return None

    def profile(self, epsilons: np.ndarray) -> np.ndarray:
        """delta(epsilon) of the tCDP conversion at each epsilon (an upper bound of the true profile)."""
        g = self.tcdp()
        return np.array([g.delta_at(float(e)) for e in np.ravel(np.asarray(epsilons, dtype=float))])

    def delta_at(self, epsilon: float) -> float:
        return self.tcdp().delta_at(epsilon)

    def epsilon_at(self, delta: float) -> float:
        return self.tcdp().epsilon_at(delta)

    def loss_range(self) -> tuple[float, float]:
        return (-math.inf, math.inf)  # the privacy loss of a tCDP mechanism need not be bounded

    def pld(self, h: float = DEFAULT_H) -> PLD:
        raise BudgetError(
            f"{self.name} is known only as ({self.rho}, {self.omega})-tCDP: it has no dominating PLD; "
            "account it under tCDP (or as (epsilon, delta) at a chosen delta)"
        )

    def tradeoff(self) -> TradeOff:
        raise BudgetError(
            f"{self.name} is known only as ({self.rho}, {self.omega})-tCDP: it has no trade-off function here"
        )
