"""Budget allocation benchmark (issue 25): weighted total variance at the same guarantee under four
accountings, on Adult workloads.

Run from the repository root (one command; a few minutes):

    .venv/bin/python benchmarks/allocation.py [--budget 1] [--definition pure]

Per workload, the same total budget B (pure DP epsilon by default) spread four ways:

- sequential: every query pays, each gets B / t (every peer's default);
- partitions: queries grouped into families of pairwise disjoint queries (a greedy colouring of the
  overlap graph: what a Tumult Analytics or OpenDP user declares as partitioned queries, at its best),
  each family charged once: B / (number of families);
- even overlap: B / gamma, gamma the maximum overlap (overlapdp's even plan);
- optimal overlap: overlapdp's allocation (MATH.md 2.10), minimising the total variance.

The table gives the total variance of Laplace noise (sensitivity 1: 2 / e^2 per query) of each, the
ratios to the optimal plan's, the planning time, and the optimal plan's guarantee checked by the
odometer (the exact overlap-aware epsilon of Laplace charges at the planned shares, <= B).

Then the planning-time rows (issue 25: 1 000 mixed queries on Adult in < 5 s): per generator of
tests/support/generators.py (``--kinds``), the plan's CPU and wall time at ``--big-effort`` seconds,
its rounds and rows, its gain over even shares (at the planner's gamma, and at the engine's gamma
found with more time), the proven gap, whether it fell back to even shares, how it was certified, and
the odometer's pure epsilon of the plan (a safe bound when its search does not end within
``--odometer-effort``; "not settled" when that bound is over B: the row is then not checked).

Then the same 1 000 queries per generator with ``objective="relative"`` (the largest weighted variance,
MATH.md 2.10: one weighted overlap search) and importance weights drawn from [0.25, 4] log-uniformly:
the plan's time, its largest weighted variance against even shares', and the odometer's epsilon
(``--no-relative`` skips these rows, ``--relative-only`` runs them alone).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from benchmarks.overlap import cpu_now  # noqa: E402
from overlapdp.cli.demo import marginal_workload, range_workload  # noqa: E402
from overlapdp.errors import SearchGaveUp  # noqa: E402
from overlapdp.mechanisms.allocation import allocate  # noqa: E402
from overlapdp.mechanisms.planning import partition_families  # noqa: E402
from overlapdp.overlap import max_overlap  # noqa: E402
from overlapdp.overlap.cover import Cover  # noqa: E402
from overlapdp.privacy import Laplace, Odometer  # noqa: E402
from overlapdp.query import PredicateQuery, parse_where  # noqa: E402
from overlapdp.schema import IndexSet  # noqa: E402
from support.generators import ADULT, KINDS, mixed  # noqa: E402


def parsed(texts: list[str]) -> list[PredicateQuery]:
    return [parse_where(ADULT, t, id=f"q{i}") for i, t in enumerate(texts)]


def workloads(seed: int) -> dict[str, list[PredicateQuery]]:
    rng = np.random.default_rng(seed)
    names = [a.name for a in ADULT.attributes]
    out: dict[str, list[PredicateQuery]] = {}
    out["demo (ranges and marginals)"] = parsed(range_workload(ADULT) + marginal_workload(ADULT))
    # 2-way marginals of sex x race and relationship x income, plus 20 random age ranges
    twoway: list[PredicateQuery] = []
    for a, b in (("sex", "race"), ("relationship", "income>50K")):
        for i in range(ADULT.attribute(a).size):
            for j in range(ADULT.attribute(b).size):
                covs = {a: IndexSet.interval(i, i + 1), b: IndexSet.interval(j, j + 1)}
                twoway.append(PredicateQuery.from_coverages(ADULT, covs, id=f"m{len(twoway)}"))
    for k in range(20):
        lo, hi = sorted(rng.integers(0, 85, 2).tolist())
        twoway.append(
            PredicateQuery.from_coverages(ADULT, {"age": IndexSet.interval(lo, hi + 1)}, id=f"r{k}")
        )
    out["2-way marginals + 20 age ranges"] = twoway
    # an age hierarchy: the whole range, halves, quarters, ... down to single years (85 leaves)
    hier: list[PredicateQuery] = []
    spans = [(0, 85)]
    while spans:
        lo, hi = spans.pop()
        hier.append(
            PredicateQuery.from_coverages(ADULT, {"age": IndexSet.interval(lo, hi)}, id=f"h{len(hier)}")
        )
        if hi - lo > 1:
            mid = (lo + hi) // 2
            spans += [(lo, mid), (mid, hi)]
    out["age hierarchy (binary, to single years)"] = hier
    out["60 random boxes (Adult-like)"] = mixed("adult", 60, seed)
    # one query over the whole table and 100 pairwise disjoint ranges (single fnlwgt buckets): gamma 2
    big = [PredicateQuery.from_coverages(ADULT, {}, id="all")]
    big += [
        PredicateQuery.from_coverages(ADULT, {"fnlwgt": IndexSet.interval(i, i + 1)}, id=f"f{i}")
        for i in range(100)
    ]
    out["one big query + 100 disjoint ranges"] = big
    del names
    return out


def table_head(columns: str, *, blank: bool = False) -> None:
    """A markdown table's header and rule for ``columns`` ("a | b | c"), after a blank line if asked."""
    print(("\n" if blank else "") + f"| {columns} |")
    print("|" + "---|" * (columns.count("|") + 1))


def variance(shares: np.ndarray) -> float:
    return float(np.sum(2.0 / shares**2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--big", type=int, nargs="*", default=[1000], help="mixed queries of the planning-time rows"
    )
    ap.add_argument("--effort", type=float, default=60.0, help="seconds per plan on the Adult workloads")
    ap.add_argument(
        "--big-effort", type=float, default=4.5, help="seconds per plan on the planning-time rows"
    )
    ap.add_argument("--kinds", nargs="*", default=list(KINDS), help="generators of the planning-time rows")
    ap.add_argument("--gamma-effort", type=float, default=20.0, help="the engine's gamma, for comparison")
    ap.add_argument("--odometer-effort", type=float, default=60.0, help="the odometer's search per row")
    ap.add_argument("--no-relative", action="store_true", help="skip the objective='relative' rows")
    ap.add_argument("--relative-only", action="store_true", help="only the objective='relative' rows")
    args = ap.parse_args()
    if args.relative_only:
        # the other tables load SciPy, HiGHS and the engine before these rows: so does a small plan here
        allocate(mixed("adult", 20, args.seed), args.budget, "pure", effort=1.0)
        relative_rows(args)
        return
    b = args.budget
    print(f"pure DP, total epsilon {b:g}, Laplace noise at sensitivity 1 (variance 2 / e^2 per query)\n")
    table_head(
        "workload | t | gamma | families | sequential | partitions | even overlap | optimal overlap "
        "| optimal vs even | gap to optimum | how certified | plan s | odometer epsilon"
    )
    for name, qs in workloads(args.seed).items():
        t = len(qs)
        gamma = int(max_overlap(qs, comp="count").value)
        fam = partition_families(qs)
        t0 = time.perf_counter()
        plan = allocate(qs, b, "pure", effort=args.effort)
        took = time.perf_counter() - t0
        shares = np.array(plan.shares)
        odo = Odometer(ADULT)
        # the pure-DP measure alone (the report's approximate-DP PLDs take ~40 s on 63 distinct charges)
        odo.measures = tuple(m for m in odo.measures if m.name == "pure")
        for q, e in zip(qs, shares, strict=True):
            odo.charge(Laplace(1.0 / e), q)
        eps = odo.report(1e-9).definitions["pure"].overlap
        assert float(eps) <= b, (name, eps)
        seq, part, even, opt = (
            variance(np.full(t, b / t)),
            variance(np.full(t, b / fam)),
            variance(np.full(t, b / gamma)),
            variance(shares),
        )
        print(
            f"| {name} | {t} | {gamma} | {fam} | {seq:.4g} | {part:.4g} | {even:.4g} | {opt:.4g} "
            f"| {even / opt:.2f}x | <= {plan.gap:.2%} | {plan.method} | {took:.2f} | {float(eps):.6f} |",
            flush=True,
        )
    print(
        f"\n(planning-time rows: {', '.join(str(n) for n in args.big)} mixed queries per generator, "
        f"effort {args.big_effort:g} s a plan; CPU seconds of the plan, its toulbar2 children's included; gamma: the "
        f"planner's certified count bound, and the engine's within {args.gamma_effort:g} s; odometer: "
        f"pure epsilon of Laplace charges at the shares, effort {args.odometer_effort:g} s)"
    )
    table_head(
        "generator | queries | CPU s | wall s | rounds | rows | gamma (planner / engine) | gain over even "
        "| gain over even at the engine's gamma | gap | fell back | how certified | odometer epsilon",
        blank=True,
    )
    for kind in args.kinds:
        for n in args.big:
            qs = mixed(kind, n, args.seed + 1)
            plan, cpu, took = timed_plan(qs, b, effort=args.big_effort)
            # the even plan the planner compared with: B / gamma (unit weights, p = 2)
            gamma_plan = round(math.sqrt(plan.even_objective / n) * b)
            g = max_overlap(qs, comp="count", effort=args.gamma_effort)
            gamma_best = min(gamma_plan, math.floor(float(g.value if g.exact else g.upper) + 1e-9))
            exact = "exact" if g.exact else "bound"
            checked = checked_epsilon(qs, np.array(plan.shares), b, args.odometer_effort, plan.cover)
            fell = "yes" if plan.method.startswith("even shares") else "no"
            gain_best = plan.gain * (gamma_best / gamma_plan) ** 2
            print(
                f"| {kind} | {n} | {cpu:.2f} | {took:.2f} | {plan.rounds} | {plan.rows} "
                f"| {gamma_plan} / {gamma_best} ({exact}) | {plan.gain:.2f}x | {gain_best:.2f}x "
                f"| <= {plan.gap:.0%} | {fell} | {plan.method} | {checked} |",
                flush=True,
            )
    if not args.no_relative:
        relative_rows(args)


def timed_plan(qs: list[PredicateQuery], b: float, **options: Any) -> tuple[Any, float, float]:
    """A pure-DP plan of ``qs`` within ``b``, its CPU seconds (toulbar2 children included) and wall seconds."""
    c0, t0 = cpu_now(), time.perf_counter()
    plan = allocate(qs, b, "pure", **options)
    return plan, cpu_now() - c0, time.perf_counter() - t0


def checked_epsilon(
    qs: list[PredicateQuery], shares: np.ndarray, b: float, effort: float, cover: Cover | None = None
) -> str:
    """The odometer's pure epsilon of Laplace charges at ``shares`` (asserted <= b when settled; "not
    settled" when its search did not settle the plan's worst row within its effort), weighing the
    plan's ``cover`` where its search is cut (MATH.md 7.11; "cover" when that gave the figure)."""
    odo = Odometer(ADULT, effort=effort)
    odo.measures = tuple(m for m in odo.measures if m.name == "pure")
    for q, e in zip(qs, shares, strict=True):
        odo.charge(Laplace(1.0 / float(e)), q)
    pure = odo.report(1e-9, cover=cover).definitions["pure"]
    eps = float(pure.overlap)
    how = "" if pure.exact else (" (cover)" if "cover" in pure.method else " (bound)")
    if pure.exact or eps <= b:
        assert eps <= b, eps
        return f"{eps:.6f}" + how
    # the decision "is some row over b?" (Odometer.exceeds, MATH.md 7.9) where the maximum is not settled
    try:
        over = odo.exceeds(b, effort=effort)
    except SearchGaveUp:
        return f"not settled: bound {eps:.4f}"
    assert over is None, f"a row over the budget: {len(over)} charges"
    return f"<= {b:g} (decision; search bound {eps:.4f})"


def relative_rows(args: argparse.Namespace) -> None:
    b = args.budget
    print(
        f"\n(objective 'relative': the largest w_q / e_q^2, importance weights "
        f"log-uniform on [0.25, 4], effort {args.big_effort:g} s a plan)"
    )
    table_head(
        "generator | queries | CPU s | wall s | how certified | largest w / e^2: even shares "
        "| relative plan | gain | odometer epsilon",
        blank=True,
    )
    for kind in args.kinds:
        for n in args.big:
            qs = mixed(kind, n, args.seed + 1)
            w = np.exp(np.random.default_rng(args.seed + 7).uniform(math.log(0.25), math.log(4.0), n))
            plan, cpu, took = timed_plan(
                qs, b, weights=w.tolist(), objective="relative", effort=args.big_effort
            )
            shares = np.array(plan.shares)
            print(
                f"| {kind} | {n} | {cpu:.2f} | {took:.2f} | {plan.method} | {plan.even_objective:.4g} "
                f"| {plan.objective:.4g} | {plan.gain:.2f}x "
                f"| {checked_epsilon(qs, shares, b, args.odometer_effort, plan.cover)} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
