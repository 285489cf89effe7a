"""Guess-and-Check (Lyu, "Composition Theorems for Interactive Differential Privacy", NeurIPS 2022,
Appendix B; MATH.md 4.2).

The analyst sends ``(query, guess)``. A sparse vector with one noisy threshold tests whether
``|q(D) - g|`` exceeds the tolerance ``E``: threshold noise ``rho ~ Lap(s_1)``, query noise
``nu_i ~ Lap(s_2)``, "wrong" iff ``|q_i(D) - g_i| + nu_i >= E + rho``. A guess within tolerance is
"confirmed" and costs nothing more; a wrong one gets a FRESH noisy estimate ``q_i(D) + Lap(b)``, at
most ``c`` of them; after ``c`` wrong guesses the mechanism answers "exhausted".

The test is decided exactly (MATH.md 4.3; :func:`overlapdp.mechanisms.svt_core.crosses`, shared
with :class:`~overlapdp.mechanisms.SparseVector`): "wrong" iff ``nu_i - rho >= ceil(E - |q_i(D) - g_i|)``
with ``g_i`` and ``E`` exact rationals (floats exactly as stored). In floating point ``|q - g|`` and
``E + rho`` round (near ``2^52`` a count step of 1 can move ``|q - g|`` by 2, and ``E + rho`` rounds
differently for different ``rho``), which breaks the SVT proof.

Privacy, by concurrent composition of the two parts each analysed alone (Lyu 2022, Theorem 1 for pure
DP; Vadhan and Wang 2021): the SVT part is ``Delta/s_1 + 2 c Delta/s_2``-DP (Lyu, Su, Li 2017,
Algorithm 1 with ``epsilon_1 = Delta/s_1``, ``epsilon_2 = 2c Delta/s_2``; ``|q - g|`` is not monotonic
between neighbours, hence the ``2c``), the Laplace part answers at most ``c`` queries and is
``c Delta/b``-DP; together ``epsilon_SVT + c Delta/b``. The guarantee is computed from the noise scales
(the constructor's parameters); :meth:`GuessAndCheck.from_budget` picks scales for a total epsilon
and declares that epsilon (the scales, rounded up, give at most it).
:meth:`GuessAndCheck.state` and :meth:`GuessAndCheck.restore` save and resume the secret state.
All noise is the exact discrete Laplace (see :mod:`overlapdp.mechanisms.sparse_vector` for why the
SVT proof carries over).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
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

GuessOutcome = Literal["confirmed", "estimate", "exhausted"]


@dataclass(frozen=True)
class GuessAnswer:
    """``confirmed`` (the guess is within tolerance, as far as the noisy test can tell), ``estimate``
    (the guess failed: ``estimate`` holds a fresh noisy count with its error bar) or ``exhausted``."""

    outcome: GuessOutcome
    index: int
    estimates_left: int
    estimate: NoisyAnswer | None = None


class GuessAndCheck:
    """Interactive Guess-and-Check over predicate counting queries (see the module doc).

    ``max_failures`` is ``c`` of Lyu 2022 (the service's session parameter has the same name).
    """

    def __init__(
        self,
        data: DataLike,
        *,
        tolerance: RationalLike,
        max_failures: int,
        threshold_scale: RationalLike,
        query_scale: RationalLike,
        estimate_scale: RationalLike,
        sensitivity: int = 1,
        coverage: Coverage = WHOLE_DOMAIN,
        level: float = 0.95,
        rng: RngLike = None,
        served: bool = False,
    ) -> None:
        tol = exact_finite("tolerance", tolerance)
        if tol <= 0:
            raise MechanismError(f"tolerance E must be positive, got {tolerance!r}")
        #: The tolerance ``E``, exactly (a float exactly as stored).
        self.tolerance: Fraction = tol
        self._c = check_c(max_failures, "max_failures")
        self._delta = check_sensitivity(sensitivity)
        self.threshold_noise = DiscreteLaplaceNoise(round_up(threshold_scale, name="threshold_scale"))
        self.query_noise = DiscreteLaplaceNoise(round_up(query_scale, name="query_scale"))
        self.estimate_noise = DiscreteLaplaceNoise(round_up(estimate_scale, name="estimate_scale"))
        self._coverage = check_coverage(coverage)
        self._level = check_level(level)
        self._source = resolve_source(rng, served=served)
        self._counter = Counter.of(data)
        self._guarantee = PureDP(float_up(self.epsilon_exact))
        self._rho = self.threshold_noise.sample(self._source)
        self._failures = 0
        self._asked = 0

    @classmethod
    def from_budget(
        cls,
        data: DataLike,
        *,
        epsilon: float,
        tolerance: RationalLike,
        max_failures: int,
        estimate_fraction: float = 0.5,
        sensitivity: int = 1,
        coverage: Coverage = WHOLE_DOMAIN,
        level: float = 0.95,
        rng: RngLike = None,
        served: bool = False,
    ) -> GuessAndCheck:
        """Scales for a total ``epsilon``: ``estimate_fraction`` of it to the estimates
        (``b = c Delta/epsilon_est``), the rest to the SVT with the variance-optimal split."""
        eps = check_positive(epsilon, "epsilon")
        if not 0 < estimate_fraction < 1:
            raise MechanismError(f"estimate_fraction must lie in (0, 1), got {estimate_fraction!r}")
        sensitivity = check_sensitivity(sensitivity)
        cc = check_c(max_failures, "max_failures")
        eps_est = eps * estimate_fraction
        eps1, eps2 = optimal_split(eps - eps_est, cc)
        mech = cls(
            data,
            tolerance=tolerance,
            max_failures=cc,
            threshold_scale=Fraction(sensitivity) / Fraction(eps1),
            query_scale=Fraction(2 * cc * sensitivity) / Fraction(eps2),
            estimate_scale=Fraction(cc * sensitivity) / Fraction(eps_est),
            sensitivity=sensitivity,
            coverage=coverage,
            level=level,
            rng=rng,
            served=served,
        )
        # The scales were rounded UP (more noise), so the guarantee they give is a hair below the
        # epsilon asked (0.4999999969689454 for 0.5); declare and charge what was asked, never less than
        # the scales' own guarantee (float splits may round either way), as calibration.declared_guarantee
        # does for a count.
        mech._guarantee = PureDP(max(eps, float_up(mech.epsilon_exact)))
        return mech

    # -- privacy ----------------------------------------------------------------------------------------
    @property
    def svt_epsilon_exact(self) -> Fraction:
        """``Delta/s_1 + 2 c Delta/s_2`` (Lyu, Su, Li 2017, Algorithm 1)."""
        d = self._delta
        return d / self.threshold_noise.scale + 2 * self._c * d / self.query_noise.scale

    @property
    def estimate_epsilon_exact(self) -> Fraction:
        """``c Delta/b``: at most ``c`` Laplace estimates of scale ``b``."""
        return self._c * self._delta / self.estimate_noise.scale

    @property
    def epsilon_exact(self) -> Fraction:
        """``epsilon_SVT + c Delta/b`` by concurrent composition (Lyu 2022, Theorem 1 and App. B)."""
        return self.svt_epsilon_exact + self.estimate_epsilon_exact

    @property
    def guarantee(self) -> PureDP:
        return self._guarantee

    @property
    def coverage(self) -> Coverage:
        return self._coverage

    @property
    def exhausted(self) -> bool:
        return self._failures >= self._c

    @property
    def estimates_left(self) -> int:
        return self._c - self._failures

    # -- the secret state ----------------------------------------------------------------------------
    def state(self) -> ThresholdState:
        """A JSON-able snapshot of the secret state (threshold noise, wrong guesses so far as
        ``positives``, queries so far) from which :meth:`restore` resumes a guess-and-check built with
        the same parameters. It holds ``rho``: keep it as secret as the data."""
        return ThresholdState(
            mechanism="guess_and_check",
            threshold_noise=self._rho,
            positives=self._failures,
            queries=self._asked,
            c=self._c,
            threshold_scale=self.threshold_noise.scale,
            query_scale=self.query_noise.scale,
        )

    def restore(self, state: ThresholdState) -> None:
        """Resume from ``state`` (see :meth:`SparseVector.restore`, whose rules and warning about
        rewinding apply here too): only on a fresh mechanism, only from a guess-and-check with the same
        ``c`` and SVT noise scales (:class:`SnapshotError` otherwise)."""
        if not isinstance(state, ThresholdState):
            raise SnapshotError(f"restore takes a ThresholdState, got {type(state).__name__}")
        state.check_fits("guess_and_check", self._c, self.threshold_noise.scale, self.query_noise.scale)
        if self._asked:
            raise SnapshotError(
                "restore resumes a fresh guess-and-check; this one has already answered queries"
            )
        self._rho = state.threshold_noise
        self._failures = state.positives
        self._asked = state.queries

    def query(self, request: tuple[PredicateQuery, RationalLike]) -> GuessAnswer:
        query, guess = request
        return self.check(query, guess)

    def check(self, query: PredicateQuery, guess: RationalLike) -> GuessAnswer:
        index = self._asked
        g = exact_finite("guess", guess)
        require_within(query, self._coverage, "this guess-and-check")
        if self.exhausted:
            return GuessAnswer("exhausted", index, 0)
        self._asked += 1
        value = self._counter.count(query)
        nu = self.query_noise.sample(self._source)
        # Wrong iff |value - g| + nu >= E + rho, decided exactly (svt_core.crosses).
        if not crosses(abs(value - g), self.tolerance, nu, self._rho):
            return GuessAnswer("confirmed", index, self.estimates_left)
        self._failures += 1
        v = value + self.estimate_noise.sample(self._source)
        w = self.estimate_noise.half_width(self._level)
        est = NoisyAnswer(v, v - w, v + w, self._level, self.estimate_noise, self._guarantee, query.id)
        return GuessAnswer("estimate", index, self.estimates_left, est)
