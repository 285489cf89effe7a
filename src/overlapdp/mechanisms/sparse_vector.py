"""The sparse vector technique with one noisy threshold (Lyu, Su, Li, "Understanding the Sparse Vector
Technique for Differential Privacy", PVLDB 2017, Algorithm 1 and its monotonic variant; MATH.md
4.1).

One threshold noise ``rho ~ Lap(Delta/epsilon_1)`` is drawn once. Query ``i`` gets fresh noise
``nu_i ~ Lap(2 c Delta/epsilon_2)`` (``c Delta/epsilon_2`` when every query moves in the same direction
between neighbours, e.g. counts under add/remove) and the answer is "above" iff
``q_i(D) + nu_i >= T_i + rho``. After ``c`` "above" answers the mechanism stops: further queries get an
"exhausted" answer, read no data and spend nothing. The whole interaction is
``(epsilon_1 + epsilon_2)``-DP. Optionally each "above" answer also releases ``q_i(D) + Lap(c Delta /
epsilon_3)`` with FRESH noise (never ``nu_i``, which would break privacy, Lyu et al. Section 4), for
``(epsilon_1 + epsilon_2 + epsilon_3)``-DP in total.

Noise is the exact discrete Laplace: the proof of Lyu et al. shifts ``rho`` by ``Delta`` and ``nu_i`` by
``2 Delta`` (``Delta``), which are integer shifts when the sensitivity ``Delta`` is an integer, and the
discrete Laplace of scale ``t`` changes by at most ``e^{k/t}`` under a shift by ``k``, so the same
argument holds; noise scales are rounded up (more noise), so the declared guarantee holds.

The comparison is exact (MATH.md 4.3; :func:`overlapdp.mechanisms.svt_core.crosses`, shared with
Guess-and-Check): counts and noise are integers, so "below" is decided as
``q_i(D) + nu_i - rho < ceil(T_i)`` with ``T_i`` the exact rational value of the given threshold (a
float exactly as stored). Evaluating ``T_i + rho`` in floating point would round differently for
different ``rho`` (``1e-17 + rho`` is ``rho`` unless ``rho = 0``), so shifting ``rho`` by ``Delta`` would
no longer shift the comparison by ``Delta`` and the proof would not apply.

:meth:`SparseVector.state` and :meth:`SparseVector.restore` save and resume the secret state
(:class:`overlapdp.mechanisms.svt_core.ThresholdState`), e.g. across a service restart.

The default split minimises the variance of ``nu_i - rho``: ``epsilon_1 : epsilon_2 = 1 : (2c)^{2/3}``
(``1 : c^{2/3}`` monotonic), Lyu et al. Section 4.2.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Literal

from overlapdp.exact import float_up
from overlapdp.mechanisms._noisy_counts import NoisyAnswer
from overlapdp.mechanisms.calibration import check_sensitivity
from overlapdp.mechanisms.counting import Counter, DataLike
from overlapdp.mechanisms.errors import MechanismError, SnapshotError
from overlapdp.mechanisms.interactive import WHOLE_DOMAIN, Coverage, check_coverage, require_within
from overlapdp.mechanisms.noise import DiscreteLaplaceNoise
from overlapdp.mechanisms.randomness import RngLike, resolve_source
from overlapdp.mechanisms.rationals import RationalLike, round_up
from overlapdp.mechanisms.svt_core import ThresholdState, check_c, crosses, exact_finite, optimal_split
from overlapdp.privacy.definitions import PureDP
from overlapdp.query import PredicateQuery
from overlapdp.validation import check_level, check_positive

Outcome = Literal["above", "below", "exhausted"]

# Defined in svt_core (shared with GuessAndCheck); importable from here as before.
__all__ = ["Outcome", "SVTAnswer", "SparseVector", "check_c", "exact_finite", "optimal_split"]


@dataclass(frozen=True)
class SVTAnswer:
    """One sparse-vector answer: "above" / "below" the noisy threshold, or "exhausted" (nothing read,
    nothing spent). ``released`` holds the fresh noisy count on "above" when release is on."""

    outcome: Outcome
    index: int
    positives_left: int
    released: NoisyAnswer | None = None

    @property
    def above(self) -> bool:
        return self.outcome == "above"


class SparseVector:
    """An interactive sparse vector mechanism over predicate counting queries (see the module doc).

    ``epsilon`` is the SVT's budget ``epsilon_1 + epsilon_2``; ``release_epsilon`` (``epsilon_3``) is spent
    on top when "above" answers also release a noisy count. ``threshold`` is the default ``T_i``.
    ``max_positives`` is ``c`` of the papers (the service's session parameter has the same name).
    """

    def __init__(
        self,
        data: DataLike,
        *,
        epsilon: float,
        max_positives: int = 1,
        threshold: RationalLike | None = None,
        monotonic: bool = False,
        threshold_epsilon: float | None = None,
        release_epsilon: float | None = None,
        sensitivity: int = 1,
        coverage: Coverage = WHOLE_DOMAIN,
        level: float = 0.95,
        rng: RngLike = None,
        served: bool = False,
    ) -> None:
        self._c = check_c(max_positives)
        eps = check_positive(epsilon, "epsilon")
        sensitivity = check_sensitivity(sensitivity)
        if threshold_epsilon is None:
            eps1, eps2 = optimal_split(eps, self._c, monotonic=monotonic)
        else:
            eps1 = check_positive(threshold_epsilon, "threshold_epsilon")
            if eps1 >= eps:
                raise MechanismError("threshold_epsilon must be smaller than epsilon")
            eps2 = eps - eps1
        self._eps3 = None if release_epsilon is None else check_positive(release_epsilon, "release_epsilon")
        self._threshold = None if threshold is None else exact_finite("threshold", threshold)
        self._coverage = check_coverage(coverage)
        self._level = check_level(level)
        self._source = resolve_source(rng, served=served)
        self._counter = Counter.of(data)
        self.monotonic = monotonic
        scales = _svt_noise(eps1, eps2, self._c, monotonic, sensitivity, self._eps3, eps)
        self.threshold_noise, self.query_noise, self.release_noise, self._guarantee = scales
        self._rho = self.threshold_noise.sample(self._source)
        self._positives = 0
        self._asked = 0

    # -- the protocol ---------------------------------------------------------------------------------
    @property
    def guarantee(self) -> PureDP:
        """``epsilon_1 + epsilon_2 (+ epsilon_3)``-DP (Lyu, Su, Li 2017; MATH.md 4.1)."""
        return self._guarantee

    @property
    def coverage(self) -> Coverage:
        return self._coverage

    @property
    def exhausted(self) -> bool:
        return self._positives >= self._c

    @property
    def max_positives(self) -> int:
        """``c`` of Lyu et al.: the mechanism stops after this many "above" answers."""
        return self._c

    @property
    def positives_left(self) -> int:
        return self._c - self._positives

    # -- the secret state ----------------------------------------------------------------------------
    def state(self) -> ThresholdState:
        """A JSON-able snapshot of the secret state (threshold noise, positives and queries so far) from
        which :meth:`restore` resumes a mechanism built with the same parameters (MATH.md 4).

        It holds the threshold noise ``rho``: whoever sees it can read the data from the answers, so it
        must be kept as secret as the data."""
        return ThresholdState(
            mechanism="sparse_vector",
            threshold_noise=self._rho,
            positives=self._positives,
            queries=self._asked,
            c=self._c,
            threshold_scale=self.threshold_noise.scale,
            query_scale=self.query_noise.scale,
        )

    def restore(self, state: ThresholdState) -> None:
        """Resume from ``state``: the next answers are those the mechanism it was taken from would give
        with the same noise. Only on a mechanism that has answered nothing yet, and only from a sparse
        vector with the same ``c`` and noise scales (:class:`SnapshotError` otherwise).

        Restoring rewinds: a caller that restores an OLDER snapshot than its last released answer lets
        the same ``rho`` answer more than ``c`` positives, beyond the declared guarantee. Persist each
        new state before its answer leaves (as the service's ledger does)."""
        if not isinstance(state, ThresholdState):
            raise SnapshotError(f"restore takes a ThresholdState, got {type(state).__name__}")
        state.check_fits("sparse_vector", self._c, self.threshold_noise.scale, self.query_noise.scale)
        if self._asked:
            raise SnapshotError(
                "restore resumes a fresh sparse vector; this one has already answered queries"
            )
        self._rho = state.threshold_noise
        self._positives = state.positives
        self._asked = state.queries

    def query(self, request: PredicateQuery | tuple[PredicateQuery, RationalLike]) -> SVTAnswer:
        """Compare ``q(D)`` with the (noisy) threshold; ``request`` is a query or ``(query, T_i)``."""
        if isinstance(request, tuple):
            query, threshold = request
            return self.ask(query, threshold)
        return self.ask(request)

    def ask(self, query: PredicateQuery, threshold: RationalLike | None = None) -> SVTAnswer:
        index = self._asked
        require_within(query, self._coverage, "this sparse vector")
        t = self._threshold if threshold is None else exact_finite("threshold", threshold)
        if t is None:
            raise MechanismError("no threshold: pass one to SparseVector(...) or with the query")
        if self.exhausted:
            return SVTAnswer("exhausted", index, 0)
        self._asked += 1
        value = self._counter.count(query)
        return self._compare(value, t, index)

    def _compare(self, value: int, threshold: Fraction, index: int) -> SVTAnswer:
        """Answer "below" iff ``value + nu < T + rho``, evaluated exactly (:func:`svt_core.crosses`)."""
        nu = self.query_noise.sample(self._source)
        if not crosses(value, threshold, nu, self._rho):
            return SVTAnswer("below", index, self.positives_left)
        self._positives += 1
        released = None
        if self.release_noise is not None:
            v = value + self.release_noise.sample(self._source)
            w = self.release_noise.half_width(self._level)
            released = NoisyAnswer(v, v - w, v + w, self._level, self.release_noise, self._guarantee)
        return SVTAnswer("above", index, self.positives_left, released)


@lru_cache(maxsize=256)
def _svt_noise(
    eps1: float, eps2: float, c: int, monotonic: bool, sensitivity: int, eps3: float | None, eps: float
) -> tuple[DiscreteLaplaceNoise, DiscreteLaplaceNoise, DiscreteLaplaceNoise | None, PureDP]:
    """Noise scales (rounded up) and the declared guarantee; cached, mechanisms are spawned often."""
    spread = c if monotonic else 2 * c
    threshold_noise = DiscreteLaplaceNoise(round_up(Fraction(sensitivity) / Fraction(eps1)))
    query_noise = DiscreteLaplaceNoise(round_up(Fraction(spread * sensitivity) / Fraction(eps2)))
    release_noise = (
        None if eps3 is None else DiscreteLaplaceNoise(round_up(Fraction(c * sensitivity) / Fraction(eps3)))
    )
    requested = Fraction(eps) + (Fraction(eps3) if eps3 is not None else 0)
    # eps2 = eps - eps1 in floats can round UP, so the noise may be worth more than the requested eps:
    # declare the larger of the request and the exact epsilon of the scales used (MATH.md 4.1).
    used = Fraction(sensitivity) / threshold_noise.scale + Fraction(spread * sensitivity) / query_noise.scale
    if release_noise is not None:
        used += Fraction(c * sensitivity) / release_noise.scale
    total = max(requested, used)
    return threshold_noise, query_noise, release_noise, PureDP(float_up(total))
