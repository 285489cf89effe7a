"""The sparse-vector audit battery: neighbour pairs chosen to expose the slips of
:mod:`overlapdp.audit.broken_svt`, with the number of runs and the confidence fixed so that one audit
separates a broken variant from the correct mechanism on the operating system's random source.

- ``shifted``: 40 queries all shifted by +1 on the neighbour. With one threshold noise the "below"
  answers cost ``epsilon_1`` once; with a fresh threshold noise per query each "below" leaks again, and
  the loss grows with the run of "below" answers (``fresh_threshold_noise``: exact loss about 34 at
  ``epsilon = 4``; the correct mechanism about 1.5).
- ``opposite``: 10 queries moving down, then one moving up. The "below" answers pin the threshold and
  the "above" answer then costs ``2 / (query scale)``: ``epsilon_2`` on the correct scale
  ``2c/epsilon_2`` but ``2 epsilon_2`` on the monotonic scale ``c/epsilon_2`` (``monotonic_noise``, or
  ``SparseVector(monotonic=True)`` on such queries: exact loss ``1.5 epsilon = 6``; the correct
  mechanism reaches its bound, 4, so the attack is tight).

The battery runs at ``epsilon = 4`` with ``c = 1``: the excess loss of both slips grows with epsilon
while the Clopper-Pearson slack does not, so a fixed number of runs at confidence ``1 - 1e-6`` separates
them (a mechanism that keeps its declaration is flagged with probability at most ``1e-6`` per audit,
:mod:`overlapdp.audit.empirical`). Thresholds are integers, so the outcome does not depend on how the
mechanism compares a noisy answer with a noisy threshold.

``python -m overlapdp.audit.battery`` prints the lower bounds of the correct mechanism and of each slip
(about a minute: the correct mechanism runs query by query).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from overlapdp.audit.broken_svt import Variant, run_variant_many
from overlapdp.audit.empirical import AuditResult, Sampler, audit_epsilon
from overlapdp.mechanisms.randomness import RandomSource, system_source
from overlapdp.mechanisms.sparse_vector import SparseVector
from overlapdp.query import PredicateQuery
from overlapdp.schema import IndexSet, Schema
from overlapdp.schema.attributes import IntAttribute

EPSILON = 4.0
C = 1
THRESHOLD = 1
CONFIDENCE = 1 - 1e-6


@dataclass(frozen=True)
class Attack:
    """Exact answers of the queries on two neighbours (each moves by at most 1) and the fixed number
    of runs per neighbour for one audit."""

    name: str
    answers: tuple[tuple[int, ...], tuple[int, ...]]
    runs: int


# SHIFTED needs more runs: the events that expose fresh threshold noise are rare (probability ~1e-3 on
# the neighbour), so their held-out counts are small.
SHIFTED = Attack("shifted", ((0,) * 40, (1,) * 40), 200_000)
OPPOSITE = Attack("opposite", ((0,) * 10 + (1,), (1,) * 10 + (0,)), 100_000)
ATTACKS: tuple[Attack, ...] = (SHIFTED, OPPOSITE)
#: The slips the battery must flag, each with the attack that exposes it.
SLIPS: tuple[tuple[Variant, Attack], ...] = (
    ("fresh_threshold_noise", SHIFTED),
    ("monotonic_noise", OPPOSITE),
)

_SCHEMA = Schema((IntAttribute("k", 0, 63),))
_QUERIES = [PredicateQuery.from_coverages(_SCHEMA, {"k": IndexSet.interval(i, i + 1)}) for i in range(64)]


def broken_sampler(variant: Variant, attack: Attack) -> Sampler:
    """``n`` runs of a broken variant on ``attack`` (vectorised)."""

    def sampler(which: int, n: int, source: RandomSource) -> list[tuple[object, ...]]:
        return run_variant_many(
            variant, attack.answers[which], THRESHOLD, epsilon=EPSILON, c=C, n=n, source=source
        )

    return sampler


def svt_sampler(attack: Attack, *, monotonic: bool = False) -> Sampler:
    """``n`` runs of the project's :class:`SparseVector` on ``attack``, one query at a time; the output
    is the tuple of answers up to exhaustion."""

    def run(values: Sequence[int], source: RandomSource) -> tuple[str, ...]:
        def count(q: PredicateQuery) -> int:
            return values[q.constraints[0][1].intervals[0][0]]

        svt = SparseVector(
            count, epsilon=EPSILON, max_positives=C, threshold=THRESHOLD, monotonic=monotonic, rng=source
        )
        out: list[str] = []
        for k in range(len(values)):
            ans = svt.ask(_QUERIES[k])
            if ans.outcome == "exhausted":
                break
            out.append(ans.outcome)
        return tuple(out)

    def sampler(which: int, n: int, source: RandomSource) -> list[tuple[str, ...]]:
        return [run(attack.answers[which], source) for _ in range(n)]

    return sampler


def audit(sampler: Sampler, attack: Attack, source: RandomSource | None = None) -> AuditResult:
    """One audit of ``sampler`` on ``attack`` at the battery's runs and confidence (OS source default)."""
    return audit_epsilon(
        sampler,
        runs=attack.runs,
        confidence=CONFIDENCE,
        rng=source if source is not None else system_source(),
    )


def main() -> None:
    rows: list[tuple[str, Sampler, Attack]] = [("SparseVector", svt_sampler(a), a) for a in ATTACKS]
    rows.append(("SparseVector(monotonic=True)", svt_sampler(OPPOSITE, monotonic=True), OPPOSITE))
    rows += [(variant, broken_sampler(variant, attack), attack) for variant, attack in SLIPS]
    print(f"declared epsilon {EPSILON}, confidence {CONFIDENCE}, OS random source")
    for name, sampler, attack in rows:
        start = time.perf_counter()
        result = audit(sampler, attack)
        verdict = "FLAGGED" if result.flags(EPSILON) else "passes"
        print(
            f"{name:30s} {attack.name:9s} runs {attack.runs:>7d}  lower bound {result.epsilon_lower:.3f}  "
            f"{verdict}  ({time.perf_counter() - start:.1f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
