"""The story `overlapdp demo` tells: a custodian serves a table to several analysts over HTTP, and
overlap-aware accounting answers far more of their queries than sequential accounting would.

Everything runs on this machine: a synthetic table with UCI Adult's labels (or a given CSV), the query
service on loopback with a SQLite ledger in the output folder, three analysts with interleaved
workloads (range counts, marginals, a sparse-vector and a guess-and-check session), and a closing
summary computed from the service's own ledger, three numbers on one basis, pure epsilon (every charge
is pure DP): sequential spend (the sum of charges), partition-based parallel composition (each declared
partition, a family of pairwise disjoint queries such as a marginal, charged once at its largest charge,
as Tumult Analytics and OpenDP charge a group-by) and overlap-aware spend (the worst row's load, MATH.md
2.4).
"""

from __future__ import annotations

import html
import json
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pandas as pd

from overlapdp.display import spent
from overlapdp.errors import DataError
from overlapdp.overlap import max_overlap
from overlapdp.privacy.mechanisms import OpaqueApproxDP
from overlapdp.report import build_report
from overlapdp.report.ledger import LedgerEntry, check_partitions, partition_charge
from overlapdp.samples import adult_raw_schema, adult_schema, synthetic_adult_labelled
from overlapdp.schema import Schema, read_table
from overlapdp.service.client import AdminClient, Client, QuotaExceeded, ServiceRefused
from overlapdp.service.embedded import embedded_service
from overlapdp.service.recorded import recorded_query
from overlapdp.validation import check_int

DATASET = "adult"
GLOBAL_BUDGET = 6.0  # pure-DP epsilon for the whole table, all analysts together
QUOTA = 2.0  # each analyst's own epsilon quota
EPS_PER_QUERY = 0.25
BASIS = "pure ε"  # every number the demo reports: pure-DP epsilon (the service charges pure DP only)

Progress = Callable[[str, int], None]


@dataclass
class AnalystSummary:
    name: str
    role: str
    quota: float
    submitted: int = 0
    answered: int = 0
    refused: int = 0
    overlap_spent: float = 0.0
    sequential_spent: float = 0.0
    partition_spent: float = 0.0
    sequential_would_answer: int = 0
    partition_would_answer: int = 0


@dataclass
class DemoSummary:
    out: Path
    rows: int
    source: str
    global_budget: float
    global_overlap_spent: float
    global_sequential_spent: float
    global_partition_spent: float
    global_guarantee: dict[str, Any]
    analysts: list[AnalystSummary]
    worst_row: dict[str, Any]
    worst_row_load: float
    worst_row_queries: int
    files: dict[str, str] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)
    #: alice's and bob's count queries planned ahead at one analyst's quota (pure DP): the total noise
    #: variance under each accounting at that same guarantee (MATH.md 2.10), and how the plan was proven
    planning: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "rows": self.rows,
            "source": self.source,
            "basis": BASIS,
            "global": {
                "budget": self.global_budget,
                "sequential_spent": self.global_sequential_spent,
                "partition_spent": self.global_partition_spent,
                "overlap_spent": self.global_overlap_spent,
                "guarantee": self.global_guarantee,
            },
            "analysts": [a.__dict__ for a in self.analysts],
            "worst_row": {
                "row": self.worst_row,
                "load": self.worst_row_load,
                "queries": self.worst_row_queries,
            },
            "files": self.files,
            "examples": self.examples,
            "planning": self.planning,
        }


# -- workloads ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Family:
    """Queries an analyst sends together. ``partition``: they are pairwise disjoint (the cells of a
    marginal or a grid), so a user of Tumult Analytics or OpenDP would declare them one partitioned
    query, charged once by parallel composition."""

    name: str
    queries: tuple[str, ...]
    partition: bool


def _coded(schema: Schema) -> bool:
    """True for the integer-coded schema (age codes 0..84), False for UCI's labels (ages in years)."""
    return schema.attribute("age").size == 85


def range_families(schema: Schema) -> list[Family]:
    """Range counts: age bands by sex and hours bands by income (two grids of disjoint cells), then
    overlapping wide age ranges, which no partition covers."""
    coded = _coded(schema)
    # Years 20-29, ..., 80-89 on UCI's labels; the coded schema keeps its own 0-9, ..., 60-69.
    starts = range(0, 70, 10) if coded else range(20, 90, 10)
    grid = [f"age BETWEEN {a} AND {a + 9} AND sex = {sex}" for a in starts for sex in _sex_values(schema)]
    hours = '"hours-per-week"' if coded else "hours_per_week"
    income = '"income>50K"' if coded else "income"
    inc_values = ["0", "1"] if coded else ["'<=50K'", "'>50K'"]
    bands = [(0 if coded else 1, 19), (20, 34), (35, 44), (45, 59), (60, 98 if coded else 99)]
    hours_grid = [
        f"{hours} BETWEEN {lo} AND {hi} AND {income} = {inc}" for lo, hi in bands for inc in inc_values
    ]
    # Overlapping wide ranges at the end: these are the ones that eventually hit the quota.
    wide = [f"age BETWEEN {a} AND {a + 14}" for a in range(starts[0], starts[0] + 50, 5)]
    return [
        Family("age band × sex", tuple(grid), True),
        Family("hours band × income", tuple(hours_grid), True),
        Family("wide age ranges", tuple(wide), False),
    ]


def marginal_families(schema: Schema) -> list[Family]:
    """One-way marginals: every value of race, sex, relationship and education (each a partition)."""
    out = []
    for name in ("race", "sex", "relationship", "education-num" if _coded(schema) else "education_num"):
        attr = schema.attribute(name)
        quoted = f'"{name}"' if not name.isidentifier() else name
        cells = []
        for i in range(attr.size):
            v = attr.value_at(i)
            cells.append(f"{quoted} = {v!r}" if isinstance(v, str) else f"{quoted} = {v}")
        out.append(Family(f"{name} marginal", tuple(cells), True))
    return out


def range_workload(schema: Schema) -> list[str]:
    """:func:`range_families`' queries in the order alice sends them."""
    return [q for f in range_families(schema) for q in f.queries]


def marginal_workload(schema: Schema) -> list[str]:
    """:func:`marginal_families`' queries in the order bob sends them."""
    return [q for f in marginal_families(schema) for q in f.queries]


def svt_queries(schema: Schema) -> list[str]:
    """carol's sparse-vector hunt: ten-year age bands."""
    starts = range(0, 70, 10) if _coded(schema) else range(20, 90, 10)
    return [f"age BETWEEN {a} AND {a + 9}" for a in starts]


def _sex_values(schema: Schema) -> list[str]:
    sex = schema.attribute("sex")
    return [repr(v) if isinstance(v, str) else str(v) for v in (sex.value_at(i) for i in range(sex.size))]


# -- the story -----------------------------------------------------------------------------------------
def run_demo(
    out: Path,
    *,
    data: Path | None = None,
    rows: int = 48_842,
    seed: int | None = 0,
    progress: Progress | None = None,
) -> DemoSummary:
    """Run the whole story and write the ledger, data, summary and report under ``out``."""
    check_int(rows, "rows (--rows)", error=DataError)
    step = progress or (lambda _msg, _n: None)
    out.mkdir(parents=True, exist_ok=True)
    step("preparing data", 0)
    if data is None:
        # Sampled on Adult's integer codes, served with UCI's labels so that queries, the worst row and
        # the heat map read as they do on the real file (`--data adult.csv`).
        schema = adult_raw_schema()
        frame = synthetic_adult_labelled(rows, seed=seed)
        data_path = out / "adult-synthetic.csv"
        frame.to_csv(data_path, index=False)
        source = "synthetic, with UCI Adult's labels"
    else:
        frame = read_table(data)
        schema = adult_raw_schema() if set(adult_raw_schema().names) <= set(frame.columns) else adult_schema()
        data_path = data.resolve()
        source = str(data)
    ledger = out / "ledger.sqlite"
    for stale in out.glob("ledger.sqlite*"):
        stale.unlink()
    (out / "schema.json").write_text(json.dumps(schema.to_json(), indent=2) + "\n", encoding="utf-8")

    step("starting the service", 1)
    with embedded_service(ledger) as (url, admin_token):
        admin = AdminClient(url, admin_token)
        admin.register_dataset(
            DATASET, str(data_path), schema.to_json(), budget=GLOBAL_BUDGET, definition="pure"
        )
        roles = {"alice": "range counts", "bob": "marginals", "carol": "sparse vector + guess-and-check"}
        clients = {name: Client(url, admin.create_analyst(name, {DATASET: QUOTA})) for name in roles}
        summaries = {name: AnalystSummary(name, role, QUOTA) for name, role in roles.items()}
        examples: list[dict[str, Any]] = []

        step("analysts querying", 2)
        families = {"alice": range_families(schema), "bob": marginal_families(schema)}
        tasks = {
            "alice": iter(
                _count_steps(clients["alice"], range_workload(schema), summaries["alice"], examples)
            ),
            "bob": iter(_count_steps(clients["bob"], marginal_workload(schema), summaries["bob"], examples)),
            "carol": iter(_session_steps(clients["carol"], schema, summaries["carol"], examples)),
        }
        # Interleave the analysts one request at a time, as concurrent users would.
        done = object()
        while tasks:
            for name in list(tasks):
                if next(tasks[name], done) is done:
                    del tasks[name]

        step("closing report", 3)
        status = admin.status(DATASET)
        analysts = admin.analysts()
        full = admin.full_ledger(DATASET)
        for c in clients.values():
            c.close()
        admin.close()

    entries = _ledger_entries(schema, full)
    partitions = check_partitions(entries, declared_partitions(full, families))
    groups = [partitions.get(e.id) for e in entries]
    costs_all = [_epsilon_of(c) for c in full["cost"]]
    for name, s in summaries.items():
        row = analysts[(analysts["analyst"] == name) & (analysts["dataset"] == DATASET)]
        s.overlap_spent = float(row["spent"].iloc[0]) if len(row) else 0.0
        mine = [i for i, a in enumerate(full["analyst"]) if a == name]
        costs = [costs_all[i] for i in mine]
        mine_groups = [groups[i] for i in mine]
        s.sequential_spent = float(sum(costs))
        s.partition_spent = partition_charge(costs, mine_groups)
        s.sequential_would_answer = _prefix_within(costs, s.quota)
        s.partition_would_answer = _prefix_within(costs, s.quota, mine_groups)
    worst = _worst_row(schema, full)
    step("planning ahead", 3)
    planning = plan_ahead(schema)
    summary = DemoSummary(
        out=out,
        rows=len(frame),
        source=source,
        global_budget=GLOBAL_BUDGET,
        global_overlap_spent=float(status["spent"]),
        global_sequential_spent=float(sum(costs_all)),
        global_partition_spent=partition_charge(costs_all, groups),
        global_guarantee=dict(status.get("guarantee") or {}),
        analysts=list(summaries.values()),
        worst_row=worst[0],
        worst_row_load=worst[1],
        worst_row_queries=worst[2],
        examples=examples[:12],
        planning=planning,
    )
    _json_cells(full).to_csv(out / "ledger.csv", index=False)
    summary.files = {"ledger": str(ledger), "ledger_csv": str(out / "ledger.csv"), "data": str(data_path)}
    summary.files.update(_write_report(summary, schema, entries, partitions))
    (out / "summary.json").write_text(
        json.dumps(summary.to_json(), indent=2, default=str) + "\n", encoding="utf-8"
    )
    summary.files["summary"] = str(out / "summary.json")
    return summary


def plan_ahead(schema: Schema, budget: float = QUOTA, effort: float = 10.0) -> dict[str, Any]:
    """The demo's count queries (alice's ranges and bob's marginals) planned before any data is read, at
    ``budget`` (pure epsilon): each accounting's total noise variance at that same guarantee, sequential,
    partition-based parallel composition (what Tumult Analytics or OpenDP users get), even overlap shares
    and the optimal overlap-aware allocation (:func:`overlapdp.mechanisms.planning.plan_release`)."""
    from overlapdp.mechanisms.planning import plan_release
    from overlapdp.query import Workload

    qs = list(Workload.of(schema, range_workload(schema) + marginal_workload(schema)))
    rp = plan_release(qs, budget, "pure", effort=effort)
    assert rp.allocation is not None
    return {
        "queries": len(qs),
        "budget": budget,
        "total_variance": dict(rp.totals),
        "method": rp.allocation.method,
        "gap": rp.allocation.gap,
    }


def _count_steps(
    client: Client, workload: list[str], s: AnalystSummary, examples: list[dict[str, Any]]
) -> Iterator[None]:
    for where in workload:
        s.submitted += 1
        try:
            answer = client.query(DATASET, where, epsilon=EPS_PER_QUERY)
        except QuotaExceeded:
            s.refused += 1
        else:
            s.answered += 1
            if len(examples) < 12 and s.answered <= 4:
                examples.append({"analyst": s.name, "query": where, **_first_row(answer)})
        yield None


def _session_steps(
    client: Client, schema: Schema, s: AnalystSummary, examples: list[dict[str, Any]]
) -> Iterator[None]:
    """A sparse-vector hunt for large age bands, then guess-and-check on income counts."""
    try:
        svt = client.open_session(DATASET, "sparse_vector", epsilon=0.5, max_positives=2)
        s.submitted += 1
        s.answered += 1
    except ServiceRefused:
        s.refused += 1
        return
    yield None
    for where in svt_queries(schema):
        s.submitted += 1
        try:
            result = svt.query(where, threshold=8000)
        except ServiceRefused:
            s.refused += 1
            break
        s.answered += 1
        examples.append({"analyst": s.name, "query": where, "sparse_vector": result})
        yield None
        if result.get("closed"):
            break
    try:
        gc = client.open_session(
            DATASET, "guess_and_check", epsilon=0.25, epsilon_estimates=0.25, tolerance=200, max_failures=2
        )
        s.submitted += 1
        s.answered += 1
    except ServiceRefused:
        s.refused += 1
        return
    yield None
    income = '"income>50K"' if _coded(schema) else "income"
    value = "1" if _coded(schema) else "'>50K'"
    # Guesses from last year's published table (made up here): right ones are confirmed for free.
    for sex, guess in zip(_sex_values(schema), (2000, 9000), strict=False):
        where = f"{income} = {value} AND sex = {sex}"
        s.submitted += 1
        try:
            result = gc.query(where, guess=guess)
        except ServiceRefused:
            s.refused += 1
            break
        s.answered += 1
        examples.append({"analyst": s.name, "query": where, "guess_and_check": result})
        yield None


def _first_row(frame: pd.DataFrame) -> dict[str, Any]:
    rec = frame.iloc[0].to_dict()
    return {str(k): (v.item() if hasattr(v, "item") else v) for k, v in rec.items() if k != "query"}


def _epsilon_of(cost: Any) -> float:
    """The pure-DP epsilon recorded for a charge (the ledger stores the cost as JSON)."""
    if isinstance(cost, str):
        cost = json.loads(cost)
    if isinstance(cost, dict):
        for key in ("epsilon", "load", "value"):
            if key in cost:
                return float(cost[key])
    return float(cost)


def _prefix_within(costs: list[float], quota: float, groups: list[str | None] | None = None) -> int:
    """How many charges, in order, fit in ``quota``: summed, or by parallel composition over ``groups``."""
    gs: list[str | None] = [None] * len(costs) if groups is None else groups
    n = 0
    for k in range(1, len(costs) + 1):
        if partition_charge(costs[:k], gs[:k]) > quota + 1e-12:
            break
        n = k
    return n


def declared_partitions(ledger: pd.DataFrame, families: dict[str, list[Family]]) -> dict[str, str]:
    """Charge id (``c{i}``, the i-th ledger row) -> the partition its analyst would have declared: the
    analyst's family holding that query, if the family is a partition. Session charges and queries of no
    such family are in none (each composes sequentially)."""
    out = {}
    for i, (analyst, kind, q) in enumerate(
        zip(ledger["analyst"], ledger["kind"], ledger["query"], strict=True)
    ):
        text = q.get("text") if isinstance(q, dict) else q
        if kind != "query" or not isinstance(text, str):
            continue
        for f in families.get(str(analyst), []):
            if f.partition and text in f.queries:
                out[f"c{i}"] = f"{analyst}: {f.name}"
                break
    return out


def _json_cells(ledger: pd.DataFrame) -> pd.DataFrame:
    """The ledger with its structured cells (query, mechanism, cost, answer) as JSON text, not reprs."""
    out = ledger.copy()
    for col in out.columns:
        if out[col].map(lambda v: isinstance(v, dict | list)).any():
            out[col] = out[col].map(lambda v: json.dumps(v) if isinstance(v, dict | list) else v)
    return out


def _worst_row(schema: Schema, ledger: pd.DataFrame) -> tuple[dict[str, Any], float, int]:
    """The row with the largest load over the whole ledger, recomputed from the charges themselves."""
    queries, weights = [], []
    for i, (q, cost) in enumerate(zip(ledger["query"], ledger["cost"], strict=True)):
        queries.append(recorded_query(schema, q if isinstance(q, str | dict) else None, str(i)))
        weights.append(_epsilon_of(cost))
    if not queries:
        return {}, 0.0, 0
    result = max_overlap(queries, weights, comp="sum")
    # Attributes no charge constrains could take any value: show only the ones that matter.
    active = {schema.names[p] for q in queries for p in q.active}
    row = {k: v for k, v in (result.witness or {}).items() if k in active}
    return row, float(result.upper), len(result.queries)


def _ledger_entries(schema: Schema, ledger: pd.DataFrame) -> list[LedgerEntry]:
    """The service's charges as report entries: each an opaque pure-DP cost over its coverage."""
    entries = []
    for i, row in enumerate(ledger.itertuples(index=False)):
        cid = f"c{i}"
        query = recorded_query(schema, row.query if isinstance(row.query, str | dict) else None, cid)
        mech = OpaqueApproxDP(_epsilon_of(row.cost), 0.0)
        entries.append(
            LedgerEntry(cid, mech, query, analyst=str(row.analyst), time=float(cast(float, row.created_at)))
        )
    return entries


def describe_row(row: dict[str, Any]) -> str:
    """A witness row as conditions, e.g. ``age = 27, sex = 'Female'`` (strings quoted as in a query)."""
    return ", ".join(f"{k} = {v!r}" if isinstance(v, str) else f"{k} = {v}" for k, v in row.items())


def _write_report(
    summary: DemoSummary, schema: Schema, entries: list[LedgerEntry], partitions: dict[str, str]
) -> dict[str, str]:
    """The full report (plots: spend over time per analyst, load heat map) plus a one-page summary,
    every number pure epsilon (:data:`BASIS`)."""
    files: dict[str, str] = {}
    if entries:
        report = build_report(
            schema,
            entries,
            summary.out,
            budget=summary.global_budget,
            x="age",
            y="sex",
            basis="pure",
            partitions=partitions,
        )
        files["report"] = str(report.html)
        files.update({f"plot_{k}": str(v) for k, v in report.plots.items()})
    e = html.escape
    rows = "".join(
        f"<tr><td>{e(a.name)}</td><td>{e(a.role)}</td><td>{a.quota:g}</td><td>{a.answered}</td>"
        f"<td>{a.refused}</td><td>{a.sequential_would_answer}</td><td>{a.partition_would_answer}</td>"
        f"<td>{spent(a.sequential_spent)}</td><td>{spent(a.partition_spent)}</td><td>{spent(a.overlap_spent)}</td></tr>"
        for a in summary.analysts
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>overlapdp demo</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:4px 10px;border-bottom:1px solid #ddd}}</style></head>
<body><h1>overlapdp demo</h1>
<p>{summary.rows:,} rows ({e(summary.source)}); global budget &epsilon; = {summary.global_budget:g}.
Every number is pure-DP &epsilon; (every charge is pure DP).</p>
<table><tr><th>analyst</th><th>workload</th><th>quota</th><th>answered</th><th>refused</th>
<th>sequential accounting would answer</th><th>parallel composition would answer</th>
<th>sequential spend (sum)</th><th>parallel composition spend</th><th>overlap-aware spend</th></tr>{rows}</table>
<p>Global: sequential spend {spent(summary.global_sequential_spent)}, parallel composition over declared
partitions {spent(summary.global_partition_spent)}, overlap-aware spend {spent(summary.global_overlap_spent)}
(of {summary.global_budget:g}).</p>
<p>Parallel composition is how Tumult Analytics and OpenDP charge a family of pairwise disjoint queries
declared as one partitioned query (a marginal, a grid of bands): once, at its largest charge; every other
charge adds up. Overlap-aware accounting charges the worst row's load, whatever the queries' shape.</p>
<p>Worst row: {e(describe_row(summary.worst_row))} (load {spent(summary.worst_row_load)},
{summary.worst_row_queries} charges).</p>
<p>Plots and the per-row load heat map: <a href="report.html">report.html</a>.</p>
</body></html>"""
    path = summary.out / "summary.html"
    path.write_text(page, encoding="utf-8")
    files["summary_html"] = str(path)
    return files


def clean_output(out: Path) -> None:
    """Remove a previous demo's folder (used by tests)."""
    shutil.rmtree(out, ignore_errors=True)
