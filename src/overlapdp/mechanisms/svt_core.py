"""The sparse-vector core that :class:`~overlapdp.mechanisms.SparseVector` and
:class:`~overlapdp.mechanisms.GuessAndCheck` share (MATH.md 4.2): the exact noisy-threshold
comparison, the checks on their common parameters, and the snapshot of their secret state.

Both mechanisms are a sparse vector with ONE threshold noise ``rho`` drawn when they are built and a
fresh query noise ``nu_i`` per query; a query "crosses" the noisy threshold iff
``score_i + nu_i >= T_i + rho``, and the mechanism stops after ``c`` crossings (Lyu, Su, Li 2017,
Algorithm 1). Sparse vector's score is the count ``q_i(D)`` against the threshold ``T_i``;
Guess-and-Check's is the error ``|q_i(D) - g_i|`` of the guess against the tolerance ``E`` (a crossing
is a wrong guess). :func:`crosses` decides this EXACTLY: ``nu_i`` and ``rho`` are integers (discrete
Laplace noise), so the test is ``nu_i - rho >= ceil(T_i - score_i)`` on exact rationals (floats exactly
as stored). The proof shifts ``rho`` by ``Delta`` and needs every comparison to move exactly with the
shift; a floating-point ``T_i + rho`` or ``|q - g|`` rounds differently for different values and breaks
it (MATH.md 4.3 gives the measured losses).

:class:`ThresholdState` is everything such a mechanism needs to resume after a restart: ``rho``, the
number of crossings and of queries answered so far, and the identity of the mechanism that drew them
(its kind, ``c`` and noise scales, so that a snapshot cannot be restored into a mechanism whose declared
guarantee assumes other noise). The data, the randomness source and the public parameters are not part
of it: the mechanism is rebuilt from its parameters and then restored.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any, Literal, cast, get_args

from overlapdp.mechanisms.errors import MechanismError, SnapshotError
from overlapdp.validation import check_int, check_positive

MechanismKind = Literal["sparse_vector", "guess_and_check"]
_KINDS: tuple[str, ...] = get_args(MechanismKind)


def check_c(c: int, name: str = "max_positives") -> int:
    """``c`` of the papers, the number of crossings before the mechanism stops: the most "above"
    answers (``max_positives``) or failed guesses (``max_failures``, Guess-and-Check); ``name`` is the
    parameter named in the error (:func:`overlapdp.validation.check_int`)."""
    return check_int(c, name, what=" (c, the number of positive answers)")


def optimal_split(epsilon: float, c: int, *, monotonic: bool = False) -> tuple[float, float]:
    """``(epsilon_1, epsilon_2)`` with ``epsilon_1 : epsilon_2 = 1 : (2c)^{2/3}`` (``1 : c^{2/3}``
    monotonic), the split that minimises the variance of the comparison noise (Lyu et al. 4.2)."""
    eps = check_positive(epsilon, "epsilon")
    ratio = float(check_c(c) if monotonic else 2 * c) ** (2.0 / 3.0)
    eps1 = eps / (1.0 + ratio)
    return eps1, eps - eps1


def exact_finite(name: str, value: object) -> Fraction:
    """``value`` as an exact rational: integers and rationals exactly, floats exactly as stored, other
    numbers (Decimal, numpy floats, numeric strings) as their nearest float; a MechanismError naming
    ``name`` when it is not a finite number."""
    if isinstance(value, bool):
        raise MechanismError(f"{name} must be a finite number, got {value!r}")
    if isinstance(value, numbers.Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    try:
        v = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise MechanismError(f"{name} must be a finite number, got {value!r}") from None
    if not math.isfinite(v):
        raise MechanismError(f"{name} must be a finite number, got {value!r}")
    return Fraction(v)


def crosses(score: int | Fraction, threshold: int | Fraction, nu: int, rho: int) -> bool:
    """True iff ``score + nu >= threshold + rho`` in real arithmetic (MATH.md 4.3).

    ``nu - rho`` is an integer, and an integer is at least the rational ``threshold - score`` iff it is
    at least its ceiling, so the test is exact for any finite rationals however large or small."""
    return nu - rho >= math.ceil(threshold - score)


@dataclass(frozen=True)
class ThresholdState:
    """The secret state of a sparse vector or guess-and-check (see the module doc), JSON-able.

    ``positives`` counts the crossings so far: "above" answers of a sparse vector, wrong guesses of a
    guess-and-check; ``queries`` counts the queries answered (the next answer's index). The mechanism is
    exhausted (halted) iff ``positives == c``. Construction checks every field; :meth:`from_json` reads
    the form :meth:`to_json` writes and raises :class:`SnapshotError` naming the field on anything else.
    """

    mechanism: MechanismKind
    threshold_noise: int
    positives: int
    queries: int
    c: int
    threshold_scale: Fraction
    query_scale: Fraction

    def __post_init__(self) -> None:
        if self.mechanism not in _KINDS:
            raise SnapshotError(f"mechanism must be one of {', '.join(_KINDS)}, got {self.mechanism!r}")
        for name in ("threshold_noise", "positives", "queries", "c"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise SnapshotError(f"{name} must be an integer, got {value!r}")
        if self.c < 1:
            raise SnapshotError(f"c must be >= 1, got {self.c}")
        if not 0 <= self.positives <= self.c:
            raise SnapshotError(f"positives must lie in [0, c = {self.c}], got {self.positives}")
        if self.queries < self.positives:
            raise SnapshotError(
                f"queries ({self.queries}) cannot be fewer than positives ({self.positives}): "
                "every positive answer is an answered query"
            )
        for name in ("threshold_scale", "query_scale"):
            value = getattr(self, name)
            if not isinstance(value, Fraction) or value <= 0:
                raise SnapshotError(f"{name} must be a positive Fraction, got {value!r}")

    @property
    def exhausted(self) -> bool:
        """True once the mechanism has answered ``c`` positives and answers only "exhausted"."""
        return self.positives >= self.c

    def to_json(self) -> dict[str, Any]:
        """Plain JSON types only: integers, strings (the scales as exact ``"p/q"`` rationals)."""
        return {
            "mechanism": self.mechanism,
            "threshold_noise": self.threshold_noise,
            "positives": self.positives,
            "queries": self.queries,
            "c": self.c,
            "threshold_scale": str(self.threshold_scale),
            "query_scale": str(self.query_scale),
        }

    @classmethod
    def from_json(cls, data: object) -> ThresholdState:
        """The snapshot :meth:`to_json` wrote; :class:`SnapshotError` naming the field when ``data`` is
        not one (missing or unknown keys, wrong types, values out of range)."""
        if not isinstance(data, Mapping):
            raise SnapshotError(f"a mechanism state must be a JSON object, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in data]
        if missing:
            raise SnapshotError(f"the mechanism state lacks {', '.join(missing)}")
        unknown = sorted(str(k) for k in data if k not in names)
        if unknown:
            raise SnapshotError(f"the mechanism state has unknown fields: {', '.join(unknown)}")
        return cls(
            mechanism=cast(MechanismKind, data["mechanism"]),
            threshold_noise=data["threshold_noise"],
            positives=data["positives"],
            queries=data["queries"],
            c=data["c"],
            threshold_scale=_scale("threshold_scale", data["threshold_scale"]),
            query_scale=_scale("query_scale", data["query_scale"]),
        )

    def check_fits(
        self, mechanism: MechanismKind, c: int, threshold_scale: Fraction, query_scale: Fraction
    ) -> None:
        """Raise :class:`SnapshotError` unless this snapshot was taken from a mechanism of this kind,
        ``c`` and noise scales: ``rho`` drawn at another scale (or a count against another ``c``) would
        make the restored mechanism's declared guarantee false."""
        if self.mechanism != mechanism:
            raise SnapshotError(f"this state is a {self.mechanism} snapshot; it cannot restore a {mechanism}")
        mine = {"c": c, "threshold_scale": threshold_scale, "query_scale": query_scale}
        for name, value in mine.items():
            if getattr(self, name) != value:
                raise SnapshotError(
                    f"this {mechanism} snapshot has {name} = {getattr(self, name)}, the mechanism {value}: "
                    "it was taken from another mechanism"
                )


def _scale(name: str, value: object) -> Fraction:
    if not isinstance(value, str):
        raise SnapshotError(f"{name} must be a rational written as a string such as '7/2', got {value!r}")
    try:
        return Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise SnapshotError(f"{name} must be a rational such as '7/2', got {value!r}") from None
