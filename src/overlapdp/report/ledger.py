"""A ledger read for reporting: charges with an optional analyst and time, and budget spent over time.

The ledger format is ``overlapdp account``'s (one JSON object per line: a query by ``where`` or
``conditions`` plus a mechanism) with two optional fields: ``"analyst"`` (a name) and ``"time"`` (a
number of seconds or an ISO 8601 timestamp). The curves are the :class:`~overlapdp.privacy.odometer.Odometer`'s
tightest certified epsilon at ``delta`` after each prefix of the ledger (in time order), sequential and
overlap-aware (MATH.md 2, 5); a prefix is a fixed, non-adaptive ledger, so these are the
odometer's guarantees, not a filter's. For ledgers of pure-DP charges :func:`pure_curve` gives the same
curves in pure epsilon, with partition-based parallel composition beside them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from overlapdp.errors import OverlapDPError, WorkloadError
from overlapdp.overlap import max_overlap
from overlapdp.privacy.ledger_lines import parse_ledger_charges
from overlapdp.privacy.mechanisms import Mechanism
from overlapdp.privacy.odometer import Odometer, OdometerReport
from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema

# Odometer reports per curve (evenly spaced prefixes, the last always included).
MAX_POINTS = 24
ALL = "all analysts"


@dataclass(frozen=True)
class LedgerEntry:
    id: str
    mechanism: Mechanism
    query: PredicateQuery
    analyst: str | None = None
    time: float | None = None


@dataclass(frozen=True)
class BudgetCurve:
    """Cumulative tightest epsilon at ``delta`` after ``charges[k]`` charges of one analyst (or all)."""

    analyst: str
    charges: tuple[int, ...]
    times: tuple[float, ...] | None
    sequential: tuple[float, ...]
    overlap: tuple[float, ...]
    # Partition-based parallel composition (:func:`pure_curve` with declared partitions), if computed.
    partition: tuple[float, ...] | None = None
    # The time of the curve's first charge (its ``times`` start at a checkpoint, maybe later).
    start: float | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "analyst": self.analyst,
            "charges": list(self.charges),
            "times": None if self.times is None else list(self.times),
            "start": self.start,
            "sequential_epsilon": [_num(v) for v in self.sequential],
            "overlap_epsilon": [_num(v) for v in self.overlap],
        }
        if self.partition is not None:
            out["partition_epsilon"] = [_num(v) for v in self.partition]
        return out


def _num(x: float) -> float | None:
    return None if math.isinf(x) else float(x)


def _time(value: Any, n: int) -> float:
    if isinstance(value, bool):
        raise WorkloadError(f"ledger line {n}: 'time' must be a number or an ISO 8601 timestamp")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise WorkloadError(f"ledger line {n}: 'time' must be finite")
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            pass
    raise WorkloadError(f"ledger line {n}: 'time' must be a number or an ISO 8601 timestamp, got {value!r}")


def parse_ledger(schema: Schema, lines: Iterable[str], *, source: str = "<ledger>") -> list[LedgerEntry]:
    """Every charge of a ledger, sorted by time when the lines carry one (stable otherwise).

    Either every line has a ``time`` or none does; bad lines raise :class:`WorkloadError` naming the line.
    """
    entries: list[LedgerEntry] = []
    seen: set[str] = set()
    with_time: bool | None = None
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WorkloadError(f"{source} line {n}: not valid JSON ({exc.msg})") from None
        try:
            charges = parse_ledger_charges(schema, obj, n)
        except OverlapDPError as exc:
            raise type(exc)(f"{source}: {exc}") from None
        for cid, _, _ in charges:
            if cid in seen:
                raise WorkloadError(f"{source} line {n}: duplicate id {cid!r}")
            seen.add(cid)
        analyst = obj.get("analyst")
        if analyst is not None and not isinstance(analyst, str | int):
            raise WorkloadError(f"{source} line {n}: 'analyst' must be a name")
        has_time = "time" in obj
        if with_time is None:
            with_time = has_time
        elif with_time != has_time:
            raise WorkloadError(f"{source} line {n}: give 'time' on every line or on none")
        t = _time(obj["time"], n) if has_time else None
        for cid, mech, query in charges:
            entries.append(LedgerEntry(cid, mech, query, None if analyst is None else str(analyst), t))
    if not entries:
        raise WorkloadError(f"{source} has no charges")
    if with_time:
        entries.sort(key=lambda e: e.time if e.time is not None else 0.0)
    return entries


def read_ledger(
    schema: Schema, path: str | Path, *, encoding: str | None = None, dataset: str | None = None
) -> list[LedgerEntry]:
    """Every charge of a ledger file, in any format the project writes:

    - JSON Lines (``overlapdp account``'s format, above);
    - the service's SQLite ledger (``overlapdp serve``, ``ledger.sqlite`` of ``overlapdp demo``), recognised
      by its header bytes;
    - the service's ledger as CSV (``ledger.csv`` of the demo, ``AdminClient.full_ledger`` written with
      ``to_csv``), recognised by its header row.

    The service's rows are read by :mod:`overlapdp.report.service_ledger`; ``dataset`` picks one data
    set of a ledger holding several. ``encoding`` is a text file's encoding (detected when None).
    """
    from overlapdp.files import read_text
    from overlapdp.report import service_ledger

    p = Path(path)
    if service_ledger.is_sqlite(p):
        return service_ledger.read_sqlite(schema, p, dataset=dataset)
    text = read_text(p, what="ledger", encoding=encoding, error=WorkloadError)
    if service_ledger.is_csv_ledger(text):
        return service_ledger.read_csv_text(schema, text, source=str(p), dataset=dataset)
    if dataset is not None:
        raise WorkloadError(f"--dataset {dataset!r}: ledger {str(p)!r} is JSON Lines, of one data set")
    return parse_ledger(schema, text.splitlines(), source=str(p))


def _checkpoints(n: int, points: int) -> list[int]:
    if n <= points:
        return list(range(1, n + 1))
    return sorted({max(1, round(k * n / points)) for k in range(1, points + 1)} | {n})


def budget_curve(
    schema: Schema,
    entries: Sequence[LedgerEntry],
    analyst: str,
    delta: float,
    *,
    effort: float | None = None,
    points: int = MAX_POINTS,
) -> tuple[BudgetCurve, OdometerReport]:
    """The curve of one analyst's (or every) charges and the odometer's report on all of them."""
    odo = Odometer(schema, effort=effort)
    ks, seq, ovl = [], [], []
    done = 0
    report: OdometerReport | None = None
    for k in _checkpoints(len(entries), points):
        for e in entries[done:k]:
            odo.charge(e.mechanism, e.query, id=e.id)
        done = k
        report = odo.report(delta)
        ks.append(k)
        seq.append(report.sequential_epsilon)
        ovl.append(report.overlap_epsilon)
    assert report is not None
    times, start = _times(entries, ks)
    return BudgetCurve(analyst, tuple(ks), times, tuple(seq), tuple(ovl), start=start), report


def _times(
    entries: Sequence[LedgerEntry], ks: Sequence[int]
) -> tuple[tuple[float, ...] | None, float | None]:
    if not entries or entries[0].time is None:
        return None, None
    return tuple(float(entries[k - 1].time or 0.0) for k in ks), float(entries[0].time)


def pure_epsilons(entries: Sequence[LedgerEntry]) -> list[float]:
    """Each charge's pure-DP epsilon; :class:`WorkloadError` naming the first charge that has none."""
    out = []
    for e in entries:
        p = e.mechanism.pure()
        if p is None:
            raise WorkloadError(f"charge {e.id!r} is not pure DP: a pure-epsilon report needs pure charges")
        out.append(p.epsilon)
    return out


def partition_charge(costs: Sequence[float], groups: Sequence[str | None]) -> float:
    """Partition-based parallel composition of pure-DP charges, as Tumult Analytics and OpenDP apply it.

    ``groups[i]`` names the declared partition charge ``i`` belongs to (None: none). The charges of one
    partition touch pairwise disjoint sets of rows, so together they cost the largest of them (parallel
    composition, McSherry 2009); partitions, and charges in none, compose sequentially (summed). The
    caller must only declare partitions that are disjoint: :func:`check_partitions` verifies it.
    """
    total = 0.0
    largest: dict[str, float] = {}
    for c, g in zip(costs, groups, strict=True):
        if g is None:
            total += c
        else:
            largest[g] = max(largest.get(g, 0.0), c)
    return total + sum(largest.values())


def check_partitions(entries: Sequence[LedgerEntry], partitions: Mapping[str, str]) -> dict[str, str]:
    """The declared partitions (charge id -> partition name) whose charges really are pairwise disjoint.

    Disjointness is checked, not trusted: a partition is kept only if no row is covered by two of its
    charges (:func:`~overlapdp.overlap.max_overlap` of unit weights is exactly at most 1); the charges of
    any other partition are left in none, so they are summed (a safe upper bound, never less).
    """
    members: dict[str, list[PredicateQuery]] = {}
    for e in entries:
        g = partitions.get(e.id)
        if g is not None:
            members.setdefault(g, []).append(e.query)
    ok = set()
    for g, qs in members.items():
        res = max_overlap(qs, [1.0] * len(qs), comp="sum")
        if res.exact and float(res.upper) <= 1.0:
            ok.add(g)
    return {cid: g for cid, g in partitions.items() if g in ok}


def pure_curve(
    entries: Sequence[LedgerEntry],
    analyst: str,
    *,
    partitions: Mapping[str, str] | None = None,
    effort: float | None = None,
    points: int = MAX_POINTS,
) -> BudgetCurve:
    """Cumulative pure-DP epsilon after each checkpoint: sequential (the sum), partition-based parallel
    composition over ``partitions`` (charge id -> declared partition, already checked with
    :func:`check_partitions`; None: no partition curve) and overlap-aware (the worst row's sum of
    charges, MATH.md 2.4: max_overlap's exact value or safe upper bound)."""
    eps = pure_epsilons(entries)
    groups = [None if partitions is None else partitions.get(e.id) for e in entries]
    ks = _checkpoints(len(entries), points)
    seq, part, ovl = [], [], []
    for k in ks:
        seq.append(math.fsum(eps[:k]))
        part.append(partition_charge(eps[:k], groups[:k]))
        res = max_overlap([e.query for e in entries[:k]], eps[:k], comp="sum", effort=effort)
        ovl.append(float(res.upper))
    times, start = _times(entries, ks)
    return BudgetCurve(
        analyst,
        tuple(ks),
        times,
        tuple(seq),
        tuple(ovl),
        partition=None if partitions is None else tuple(part),
        start=start,
    )


def analysts(entries: Sequence[LedgerEntry]) -> list[str]:
    """Analyst names in order of first appearance; ``[]`` when no line names one."""
    if all(e.analyst is None for e in entries):
        return []
    names: dict[str, None] = {}
    for e in entries:
        names.setdefault(e.analyst if e.analyst is not None else "(unnamed)", None)
    return list(names)


def entries_of(entries: Sequence[LedgerEntry], analyst: str) -> list[LedgerEntry]:
    return [e for e in entries if (e.analyst if e.analyst is not None else "(unnamed)") == analyst]


def ledger_loads(entries: Sequence[LedgerEntry], delta: float) -> tuple[str, list[float]]:
    """Per-charge additive row loads for the heat map, in the tightest additive form all share.

    pure epsilon if every mechanism is pure DP, else zCDP rho, else GDP mu^2, else epsilon at ``delta``
    (basic composition per row, a safe upper bound; MATH.md 2.4).
    """
    mechs = [e.mechanism for e in entries]
    pures = [m.pure() for m in mechs]
    if all(p is not None for p in pures):
        return "pure ε", [p.epsilon for p in pures if p is not None]
    zs = [m.zcdp() for m in mechs]
    if all(z is not None for z in zs):
        return "zCDP ρ", [z.rho for z in zs if z is not None]
    gs = [m.gdp() for m in mechs]
    if all(g is not None for g in gs):
        return "GDP μ²", [g.mu**2 for g in gs if g is not None]
    eps = [m.epsilon_at(delta) for m in mechs]
    if not all(math.isfinite(x) for x in eps):
        raise WorkloadError(f"a charge has no finite epsilon at delta={delta:g}: give a larger --delta")
    return f"ε at δ={delta:g} (basic composition)", eps
