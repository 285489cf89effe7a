"""Mechanisms that spend the budget (DESIGN.md data flow, step 5; MATH.md sections 3, 4 and 6).

Exact integer noise (:mod:`.samplers`, :mod:`.noise`) from the operating system's CSPRNG
(:mod:`.randomness`), noisy counts with error bars (:mod:`.noisy_counts`), and interactive mechanisms
(:mod:`.interactive`): :class:`SparseVector`, :class:`GuessAndCheck`, :class:`NoisyCounts`, composed
concurrently by :class:`ConcurrentComposition`.
"""

from overlapdp.mechanisms.calibration import (
    declared_guarantee,
    gaussian_for_mu,
    gaussian_for_rho,
    guarantee_of,
    laplace_for,
    noise_for,
)
from overlapdp.mechanisms.concurrent import Child, ConcurrentComposition
from overlapdp.mechanisms.counting import Counter
from overlapdp.mechanisms.errors import (
    BudgetExceededError,
    CoverageError,
    InsecureRandomnessError,
    MechanismError,
    SnapshotError,
)
from overlapdp.mechanisms.guess_and_check import GuessAndCheck, GuessAnswer
from overlapdp.mechanisms.interactive import WHOLE_DOMAIN, Coverage, InteractiveMechanism
from overlapdp.mechanisms.noise import DiscreteGaussian, DiscreteLaplace
from overlapdp.mechanisms.noisy_counts import NoisyAnswer, add_noise, noisy_count, noisy_counts
from overlapdp.mechanisms.noisy_session import NoisyCounts
from overlapdp.mechanisms.randomness import (
    RandomSource,
    SeededRandomSource,
    SystemRandomSource,
    resolve_source,
    system_source,
)
from overlapdp.mechanisms.sparse_vector import SparseVector, SVTAnswer, optimal_split
from overlapdp.mechanisms.svt_core import ThresholdState

__all__ = [
    "WHOLE_DOMAIN",
    "BudgetExceededError",
    "Child",
    "ConcurrentComposition",
    "Counter",
    "Coverage",
    "CoverageError",
    "DiscreteGaussian",
    "DiscreteLaplace",
    "GuessAndCheck",
    "GuessAnswer",
    "InsecureRandomnessError",
    "InteractiveMechanism",
    "MechanismError",
    "NoisyAnswer",
    "NoisyCounts",
    "RandomSource",
    "SVTAnswer",
    "SeededRandomSource",
    "SnapshotError",
    "SparseVector",
    "SystemRandomSource",
    "ThresholdState",
    "add_noise",
    "declared_guarantee",
    "gaussian_for_mu",
    "gaussian_for_rho",
    "guarantee_of",
    "laplace_for",
    "noise_for",
    "noisy_count",
    "noisy_counts",
    "optimal_split",
    "resolve_source",
    "system_source",
]
