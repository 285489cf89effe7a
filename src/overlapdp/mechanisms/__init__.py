"""Mechanisms that spend the budget (DESIGN.md data flow, step 6; MATH.md 3, 4, 6).

Exact integer noise (:mod:`.samplers`, :mod:`.noise`) from the operating system's CSPRNG
(:mod:`.randomness`), noisy counts with error bars (:func:`noisy_counts`; a whole workload planned and
answered by :func:`answer_workload`, :mod:`.answering`), and interactive mechanisms
(:mod:`.interactive`): :class:`SparseVector`, :class:`GuessAndCheck`, :class:`NoisyCounts`, composed
concurrently by :class:`ConcurrentComposition`.
"""

from typing import TYPE_CHECKING

from overlapdp._lazy import lazy_exports

if TYPE_CHECKING:
    from overlapdp.mechanisms._noisy_counts import (
        CountAnswers,
        NoisyAnswer,
        add_noise,
        noisy_count,
        noisy_counts,
    )
    from overlapdp.mechanisms.answering import answer_workload, plan_answers
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
    from overlapdp.mechanisms.noise import DiscreteGaussianNoise, DiscreteLaplaceNoise
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

# Public name -> submodule that defines it, imported on first use (overlapdp/_lazy.py).
_EXPORTS = {
    "CountAnswers": "_noisy_counts",
    "NoisyAnswer": "_noisy_counts",
    "add_noise": "_noisy_counts",
    "noisy_count": "_noisy_counts",
    "noisy_counts": "_noisy_counts",
    "answer_workload": "answering",
    "plan_answers": "answering",
    "declared_guarantee": "calibration",
    "gaussian_for_mu": "calibration",
    "gaussian_for_rho": "calibration",
    "guarantee_of": "calibration",
    "laplace_for": "calibration",
    "noise_for": "calibration",
    "Child": "concurrent",
    "ConcurrentComposition": "concurrent",
    "Counter": "counting",
    "BudgetExceededError": "errors",
    "CoverageError": "errors",
    "InsecureRandomnessError": "errors",
    "MechanismError": "errors",
    "SnapshotError": "errors",
    "GuessAndCheck": "guess_and_check",
    "GuessAnswer": "guess_and_check",
    "WHOLE_DOMAIN": "interactive",
    "Coverage": "interactive",
    "InteractiveMechanism": "interactive",
    "DiscreteGaussianNoise": "noise",
    "DiscreteLaplaceNoise": "noise",
    "NoisyCounts": "noisy_session",
    "RandomSource": "randomness",
    "SeededRandomSource": "randomness",
    "SystemRandomSource": "randomness",
    "resolve_source": "randomness",
    "system_source": "randomness",
    "SparseVector": "sparse_vector",
    "SVTAnswer": "sparse_vector",
    "optimal_split": "sparse_vector",
    "ThresholdState": "svt_core",
}

if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "WHOLE_DOMAIN",
    "BudgetExceededError",
    "Child",
    "ConcurrentComposition",
    "CountAnswers",
    "Counter",
    "Coverage",
    "CoverageError",
    "DiscreteGaussianNoise",
    "DiscreteLaplaceNoise",
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
    "answer_workload",
    "declared_guarantee",
    "gaussian_for_mu",
    "gaussian_for_rho",
    "guarantee_of",
    "laplace_for",
    "noise_for",
    "noisy_count",
    "noisy_counts",
    "optimal_split",
    "plan_answers",
    "resolve_source",
    "system_source",
]
