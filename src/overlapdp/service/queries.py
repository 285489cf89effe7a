"""The queries room: a batch parsed and checked (GROUP BYs expanded, sums and means), counted and
its noise drawn before it joins a group (:meth:`Queries.query`); dry runs (``/cost``), plans
(``/plan``) and a worker process's part of a large batch (:meth:`Queries.worker_batch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from overlapdp.errors import NotFound, QueryError, QueryTooComplexError, TooLarge
from overlapdp.mechanisms.consistency import (
    aggregate_system,
    check_aggregate_shape,
    finish_aggregates,
    workload_design,
)
from overlapdp.overlap import _clock
from overlapdp.query import PredicateQuery, QueryFamily, parse_line
from overlapdp.query.aggregate import COUNT, Aggregate, declared_bounds
from overlapdp.service import definitions, filters, logged_filter, shared
from overlapdp.service.admission import Admission
from overlapdp.service.ledger import AnalystRecord
from overlapdp.service.ledger.base import dumps
from overlapdp.service.responses import (
    BatchAnswer,
    BatchCost,
    Cost,
    CostEstimate,
    EpsilonDelta,
    ReleasePlanned,
)
from overlapdp.service.shared import (
    DatasetState,
    Pending,
    Prepared,
    check_key,
    check_time,
    fingerprint,
    recorded_query,
)

#: Most cells (distinct sets of covering queries) a batch may have for consistent answers: bounds the
#: solver's work per request on a shared service.
CONSISTENT_CELL_LIMIT = 20_000


class Queries(Admission):
    """Batches of queries, their dry runs and plans, prepared here and admitted by :class:`Admission`."""

    def _parse(
        self, state: DatasetState, specs: Sequence[Any], deadline: float | None = None
    ) -> list[PredicateQuery]:
        """One query per spec (a session step); a GROUP BY is refused here."""
        queries, _, groups, aggregates = self._expand(state, specs, deadline)
        if any(g is not None for g in groups):
            raise QueryError("a GROUP BY is answered by .../query or .../batch, not by a session")
        if any(a.clipping is not None for a in aggregates):
            raise QueryError("a sum or mean is answered by .../query or .../batch, not by a session")
        return queries

    def _expand(
        self, state: DatasetState, specs: Sequence[Any], deadline: float | None = None
    ) -> tuple[list[PredicateQuery], list[int], list[dict[str, Any] | None], list[Aggregate]]:
        """The queries of a request, each GROUP BY expanded into its cells in place, with the position of
        the spec each query comes from, for a cell its group labels, and each query's aggregate (a count,
        or a sum or mean with the clipping bounds given in the request: :func:`parse_line`, as for a
        workload line). The cells of all GROUP BYs count toward ``max_batch`` (refused before a family
        is expanded). Parsing counts against the request's time budget (``deadline``): checked before
        each query."""
        if len(specs) > self.limits.max_batch:
            raise TooLarge(f"a batch may hold at most {self.limits.max_batch} queries, got {len(specs)}")
        if not specs:
            raise QueryError("a batch needs at least one query")
        declared = declared_bounds(state.record.schema)  # the data set's declared clipping bounds
        out: list[PredicateQuery] = []
        items: list[int] = []
        groups: list[dict[str, Any] | None] = []
        aggregates: list[Aggregate] = []
        for i, spec in enumerate(specs):
            check_time(deadline)
            try:
                key = dumps(spec)
            except ValueError:  # NaN or infinity somewhere in the query
                raise QueryError(f"query #{i} holds a number that is not finite") from None
            if len(key) > self.limits.max_query_chars:
                raise TooLarge(f"query #{i} is longer than {self.limits.max_query_chars} characters")
            # Every other spec still needs a place in the batch; a family may fill the rest.
            room = self.limits.max_batch - len(out) - (len(specs) - i - 1)
            parsed: PredicateQuery | QueryFamily | None = state.request_cache.get(key)
            agg = COUNT  # only counts are cached
            if parsed is None:
                try:
                    parsed, agg = parse_line(state.schema, spec, declared=declared, max_cells=max(room, 0))
                except RecursionError:  # a condition nested deeper than the parser can follow
                    raise QueryError(f"query #{i} is nested too deeply") from None
                except QueryTooComplexError as exc:
                    if exc.limit != "cells":
                        raise
                    raise TooLarge(
                        f"query #{i}: {exc}: a request may hold at most {self.limits.max_batch} queries, "
                        "each cell of a GROUP BY counting as one"
                    ) from None
                # Families are not kept: up to max_batch cells each, 10 000 of them would hold
                # millions of queries in memory (expanding again is cheap next to counting).
                if isinstance(parsed, PredicateQuery) and agg == COUNT:
                    if len(state.request_cache) >= 10_000:
                        state.request_cache.clear()
                    state.request_cache[key] = parsed
            if isinstance(parsed, QueryFamily):
                for cell, labels in zip(parsed.cells, parsed.groups, strict=True):
                    suffix = "" if cell.id is None else cell.id[len(parsed.id or "") :]
                    out.append(cell.with_id(f"{i}{suffix}"))
                    items.append(i)
                    groups.append(dict(labels))
                    aggregates.append(agg)
            else:
                out.append(parsed.with_id(str(i)))
                items.append(i)
                groups.append(None)
                aggregates.append(agg)
        return out, items, groups, aggregates

    def _mechanism(
        self, state: DatasetState, parameter: float | None, given: str | None
    ) -> definitions.ServedMechanism:
        name = definitions.amount_name(state.record.definition, state.params)
        if parameter is None or (given is not None and given != name):
            raise QueryError(
                f"data set {state.record.name!r} is served under {state.record.definition!r}: give {name!r}"
            )
        return definitions.mechanism_for(state.record.definition, parameter, state.params)

    def query(
        self,
        analyst: AnalystRecord,
        dataset: str,
        specs: Sequence[Any],
        parameter: float | None,
        parameter_name: str | None = None,
        *,
        request_key: str | None = None,
        consistent: bool = False,
        deadline: float | None = None,
    ) -> BatchAnswer:
        """Answer a batch of counting queries (each with the same per-query parameter) atomically.

        ``consistent``: also the counts projected onto a non-negative table's answers
        (:mod:`overlapdp.mechanisms.consistency`, post-processing of the noisy counts). The workload's cells are
        enumerated before anything is counted, so a workload over :data:`CONSISTENT_CELL_LIMIT` is
        refused (400) without spending. The projection runs in a worker process
        (:mod:`overlapdp.service._projection`) BEFORE admission, within the request's time budget:
        one that cannot finish in time is a 503 with nothing charged, one that finishes is recorded
        with the charges, so an idempotent replay returns it without computing it again.

        ``deadline`` (a :func:`time.monotonic` time): when the request's time budget runs out, counted
        from its arrival (the HTTP layer gives it); by default ``Limits.request_seconds`` from now.
        """
        state, pending = self._query(
            analyst,
            dataset,
            specs,
            parameter,
            parameter_name,
            request_key,
            consistent=consistent,
            deadline=deadline,
        )
        job = pending.projection
        try:
            if job is not None:
                projected = job.result()  # off every lock; 503 past the deadline, nothing charged
                values = projected.counts
                if pending.system is not None:  # sums and means: each query's from its figures
                    values = finish_aggregates(pending.system, values)
                for answer, value in zip(pending.noisy, values, strict=True):
                    # recorded with the charge (the ledger's answer), never released before its commit
                    answer["consistent"] = {
                        "answer": value,
                        "cells": pending.cells,
                        "solver": projected.solver,
                    }
                    if pending.system is None:
                        answer["consistent"]["count"] = value  # (the name older answers carry)
            return self._submit(state, pending, BatchAnswer)
        finally:
            if job is not None:
                job.cancel()  # the request failed before its projection came: its worker is freed

    def cost(
        self,
        analyst: AnalystRecord,
        dataset: str,
        specs: Sequence[Any],
        parameter: float | None,
        parameter_name: str | None = None,
        *,
        consistent: bool = False,
        allocation: str | None = None,
        objective: str = "variance",
        deadline: float | None = None,
    ) -> CostEstimate:
        """A dry run of :meth:`query`: its cost and whether both budgets would admit it now (nothing spent);
        with ``consistent``, also whether consistent answers could be computed (400 if not). With
        ``Limits.cost_workers``, it runs in a worker process (:mod:`overlapdp.service._dryrun`).

        With ``allocation`` ("optimal" or "even"), also the batch's own overlap cost split over its
        queries by :meth:`plan` (the same code as ``POST .../plan``, with that cost as the budget, within
        what is left of the request's time): charged at those shares, the queries' worst row pays at most
        what this batch would."""
        deadline = self._deadline(deadline)
        if self.dry_runs is not None:
            job = {
                "analyst": analyst.name,
                "dataset": dataset,
                "specs": list(specs),
                "parameter": parameter,
                "parameter_name": parameter_name,
                "consistent": consistent,
            }
            estimate = CostEstimate.model_validate(self.dry_runs.run(job, deadline))
        else:
            state, pending = self._query(
                analyst,
                dataset,
                specs,
                parameter,
                parameter_name,
                None,
                dry_run=True,
                consistent=consistent,
                deadline=deadline,
            )
            estimate = self._dry_run(state, pending)
        if allocation is None:
            return estimate
        assert estimate.cost.batch is not None  # a dry run always reports its batch's cost
        planned = self.plan(
            analyst,
            dataset,
            specs,
            budget=estimate.cost.batch.overlap,
            allocation=allocation,
            objective=objective,
            deadline=deadline,
        )
        return estimate.model_copy(update={"allocation": ReleasePlanned.model_validate(planned)})

    def plan(
        self,
        analyst: AnalystRecord,
        dataset: str,
        specs: Sequence[Any],
        *,
        budget: float | None = None,
        target_error: int | None = None,
        allocation: str = "optimal",
        objective: str = "variance",
        level: float = 0.95,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """A release planned before any data is read (:func:`overlapdp.mechanisms.planning.plan_release`,
        MATH.md 2.10): each query's share of a total ``budget`` (in the data set's amount), its noise and
        error bar, and the total noise under every accounting; or, with ``target_error``, the smallest
        budget answering every query within it (:func:`~overlapdp.mechanisms.planning.budget_for_error`).
        Reads no data and spends nothing; under add/remove neighbours, as the service's guarantees. The
        search's effort is the time left of the request (a safe plan either way). With
        ``Limits.cost_workers`` it runs in a worker process, as a dry run does."""
        if dataset not in analyst.quotas:
            raise NotFound(f"unknown data set {dataset!r}")
        if self.dry_runs is not None:
            deadline = self._deadline(deadline)
            job = {
                "kind": "plan",
                "analyst": analyst.name,
                "dataset": dataset,
                "specs": list(specs),
                "budget": budget,
                "target_error": target_error,
                "allocation": allocation,
                "objective": objective,
                "level": level,
            }
            return self.dry_runs.run(job, deadline)
        deadline = self._deadline(deadline)
        state = self._state(dataset)
        from overlapdp.mechanisms.planning import error_target, plan_release
        from overlapdp.privacy.measures import MEASURES, measure_named

        definition = state.record.definition
        if not measure_named(definition).counts:  # pure, zcdp, gdp: a count's noise is calibrated to them
            counted = ", ".join(m.name for m in MEASURES if m.counts)
            raise QueryError(f"a plan is made for {counted} data sets; {dataset!r} is {definition}")
        queries, _, _, _ = self._expand(state, specs, deadline)
        check_time(deadline)
        effort = max(0.05, 0.8 * (deadline - shared._now()))
        if (budget is None) == (target_error is None):
            raise QueryError("give either 'budget' or 'target_error', not both and not neither")
        if target_error is not None:
            return error_target(queries, target_error, definition, level=level, effort=effort)
        assert budget is not None
        rp = plan_release(
            queries,
            budget,
            definition,
            allocation=cast(Any, allocation),
            objective=cast(Any, objective),
            level=level,
            effort=effort,
        )
        return rp.to_json()

    def _query(
        self,
        analyst: AnalystRecord,
        dataset: str,
        specs: Sequence[Any],
        parameter: float | None,
        parameter_name: str | None,
        request_key: str | None,
        *,
        dry_run: bool = False,
        consistent: bool = False,
        deadline: float | None = None,
    ) -> tuple[DatasetState, Pending]:
        deadline = self._deadline(deadline)
        if dataset not in analyst.quotas:
            raise NotFound(f"unknown data set {dataset!r}")
        state = self._state(dataset)
        loaded = self._loaded(state)
        job = None
        if not dry_run and self.dry_runs is not None and len(specs) >= self.limits.worker_batch_min:
            # parsed and tried in a worker process (nothing of it holds this process's interpreter
            # lock); what comes back is checked against the filters here (_from_worker)
            job = self._batch_job(analyst.name, dataset, specs, parameter, parameter_name, consistent)
            reply = self.dry_runs.run(job, deadline)
            prepared: Prepared = reply["prepared"]
        else:
            prepared = self._prepare(state, specs, parameter, parameter_name, consistent, deadline)
        queries, items, groups, aggregates = (
            prepared.queries,
            prepared.items,
            prepared.groups,
            prepared.aggregates,
        )
        mech = self._mechanism(state, parameter, parameter_name)
        design = None
        if consistent:
            # numpy's enumeration releases the interpreter lock (_prepare checked the workload)
            design = workload_design(queries, limit=CONSISTENT_CELL_LIMIT)
        check_time(deadline)
        pending = Pending(
            analyst=analyst.name,
            kind="dry-run" if dry_run else "query",
            request_key=check_key(request_key),
            request_hash=prepared.request_hash,
            queries=list(queries),
            query_json=prepared.query_json,
            mechanism=mech,
            loads=[prepared.load] * len(queries),
            deadline=deadline,
            worker_job=job,
        )
        if not dry_run:
            # The exact counts and the noise never depend on the ledger: both are ready before the
            # request joins a group, so a failure here concerns this request alone.
            counted = None if job is None else reply.get("counts")
            if counted is not None:  # counted by the worker, on the same rows
                pending.true_counts, sums = counted
            else:
                pending.true_counts = loaded.counts(queries)
                sums = None
                if any(a.clipping is not None for a in aggregates):
                    sums = loaded.sums(queries, aggregates)
            drawn: list[Any] = []
            if sums is not None:
                pending.noisy, drawn = definitions.noisy_released(pending.true_counts, sums, aggregates, mech)
            else:
                pending.noisy = definitions.noisy_counts(pending.true_counts, mech)
            check_time(deadline)  # counted: nothing more is spent on a request out of time
            for answer, i, g in zip(pending.noisy, items, groups, strict=True):
                if g is not None:  # recorded with the answer, so a replay returns the labels too
                    answer["group"] = g
                    answer["item"] = i
            if design is not None and not (
                pending.request_key is not None and self.store.is_recorded(analyst.name, pending.request_key)
            ):
                # Started now, it runs in its worker while the trials below search (on two cores, in
                # parallel); query() waits for it before admission.
                pending.cells = design.cells
                if drawn:
                    # counts, sums and means projected together (MATH.md 6.5.1): the library's own
                    # problem of the very answers drawn, solved in the worker as the library solves it
                    system = aggregate_system(design, drawn)
                    pending.system = system
                    pending.projection = self.projections.start(
                        design.matrix,
                        system.values,
                        system.variances,
                        deadline,
                        owners=system.owners,
                        factor=system.factor,
                    )
                else:
                    pending.projection = self.projections.start(
                        design.matrix,
                        [float(a["count"]) for a in pending.noisy],
                        [float(a["stddev"]) ** 2 for a in pending.noisy],
                        deadline,
                    )
            try:
                if job is not None:
                    self._from_worker(state, pending, reply)
                elif len(queries) > self.limits.bounds_max and len(queries) >= self.limits.snapshot_min:
                    pending.needs = {0, 1}
                    self._advance(state, pending)
                elif len(queries) >= self.limits.snapshot_min:
                    pending.on_bounds = True
            except BaseException:
                if pending.projection is not None:
                    pending.projection.cancel()
                raise
        return state, pending

    def _prepare(
        self,
        state: DatasetState,
        specs: Sequence[Any],
        parameter: float | None,
        parameter_name: str | None,
        consistent: bool,
        deadline: float | None,
    ) -> Prepared:
        """A batch's queries parsed (:meth:`_expand`), with what is recorded of them (their hash and
        JSON) and each one's load: the part of a request that depends on its text alone (it runs in a
        worker process for a large batch, :meth:`_batch_job`)."""
        queries, items, groups, aggregates = self._expand(state, specs, deadline)
        mech = self._mechanism(state, parameter, parameter_name)
        if consistent:
            # Refused before anything is counted or charged (a 400 naming the limit): a workload with
            # too many cells (numpy's enumeration releases the lock), or sums of more distinct columns
            # and bounds than the projection takes together, or a matrix past the solver's limit.
            design = workload_design(queries, limit=CONSISTENT_CELL_LIMIT)
            check_aggregate_shape(
                design,
                [a.clipping for a in aggregates],
                sum(a.kind == "mean" for a in aggregates if a.clipping is not None),
            )
        check_time(deadline)
        request_hash = fingerprint(
            "query",
            state.record.name,
            # a sum's aggregate is part of what was asked (a count's hash is unchanged)
            [
                q.to_json() if a == COUNT else {**q.to_json(), **a.to_json()}
                for q, a in zip(queries, aggregates, strict=True)
            ],
            mech.parameter,
            # a consistent batch is another request (its answers carry the projection); a plain
            # batch's hash is unchanged
            *(["consistent"] if consistent else []),
        )
        query_json: list[dict[str, Any] | None] = [
            recorded_query(specs[i] if g is None else q.describe(), q)
            for i, g, q in zip(items, groups, queries, strict=True)
        ]
        check_time(deadline)
        return Prepared(
            queries,
            items,
            groups,
            aggregates,
            request_hash,
            query_json,
            definitions.load_of(state.record.definition, mech.parameter),
        )

    @staticmethod
    def _batch_job(
        analyst: str,
        dataset: str,
        specs: Sequence[Any],
        parameter: float | None,
        parameter_name: str | None,
        consistent: bool,
    ) -> dict[str, Any]:
        return {
            "kind": "batch",
            "analyst": analyst,
            "dataset": dataset,
            "specs": list(specs),
            "parameter": parameter,
            "parameter_name": parameter_name,
            "consistent": consistent,
        }

    def worker_batch(
        self,
        analyst: AnalystRecord,
        dataset: str,
        specs: Sequence[Any],
        parameter: float | None,
        parameter_name: str | None,
        *,
        consistent: bool = False,
        deadline: float | None = None,
    ) -> dict[str, Any]:
        """A worker process's part of a large batch (:mod:`overlapdp.service._dryrun_worker`): the batch
        prepared (:meth:`_prepare`), then tried on snapshots of both filters caught up with the ledger
        (each filter's EXACT decision on that state, :meth:`ServiceFilter.trial`, within the deadline),
        with the sequence number of the last ledger charge those filters hold, the definition they were
        built for, and per filter (the analyst's, the global one) ``(admitted, upper, budget)``."""
        deadline = self._deadline(deadline)
        if dataset not in analyst.quotas:
            raise NotFound(f"unknown data set {dataset!r}")
        state = self._state(dataset)
        prepared = self._prepare(state, specs, parameter, parameter_name, consistent, deadline)
        pairs = list(zip(prepared.queries, [prepared.load] * len(prepared.queries), strict=True))
        _, snaps, seq, built_for = self._snapshots_at(state, analyst.name)
        verdicts = []
        for f, snap in snaps:
            trial = f.trial(snap, pairs, deadline)
            filters.ServiceFilter.finish(trial)
            verdicts.append((trial.admitted, trial.upper, snap.budget))
        # The exact counts (and clipped sums) too, here at nice 19 rather than in the server's process
        # where they would take a processor from other analysts' requests; the server draws the noise.
        # Counted whatever the verdicts (the server may decide again on fresher snapshots); not when
        # this instance cannot read the rows (the server counts then).
        counts = None
        if state.loaded is not None:
            true_counts = state.loaded.counts(prepared.queries)
            sums = None
            if any(a.clipping is not None for a in prepared.aggregates):
                sums = state.loaded.sums(prepared.queries, prepared.aggregates)
            check_time(deadline)
            counts = (true_counts, sums)
        return {
            "prepared": prepared,
            "seq": seq,
            "built_for": built_for,
            "verdicts": verdicts,
            "counts": counts,
        }

    def _dry_run(self, state: DatasetState, p: Pending) -> CostEstimate:
        """What the batch would cost and whether both filters would admit it, as of a snapshot of both
        filters taken under the admission lock (the only work done under it); the spends and verdicts
        are computed off the lock on private replicas (:meth:`ServiceFilter.dry_run`), within the
        request's time budget: each verdict exactly, or None when its search does not end within
        ``_DECISION_SHARE`` of the time left (503 only past the budget itself); the spends and the
        batch's own overlap cost exactly when their searches end within a share of it, else as safe
        upper bounds (``exact`` False). Nothing is added to any filter."""
        quota, ((mine, mine_snap), (glob, global_snap)) = self._snapshots(state, p.analyst)
        pairs = list(zip(p.queries, p.loads, strict=True))
        mine_run = mine.dry_run(mine_snap, pairs, p.deadline, _share(p.deadline, _DECISION_SHARE))

        def global_verdict() -> bool:
            trial = glob.trial(global_snap, pairs, _share(p.deadline, _DECISION_SHARE), bound=False)
            filters.ServiceFilter.finish(trial)
            return trial.admitted

        global_ok = filters.verdict_within(global_verdict, p.deadline)
        definition = state.record.definition
        batch = filters.batch_cost(state.schema, pairs, definition, p.deadline)
        batch_exact = batch.pop("exact")
        logged_filter.check_deadline(p.deadline)
        value = p.loads[0] if p.loads else 0.0
        cost = Cost.model_validate(
            {
                "definition": definition,
                "queries": len(p.queries),
                definitions.amount_name(definition, state.params): value,
            }
        )
        after = mine_run.after
        return CostEstimate(
            cost=cost.model_copy(update={"batch": BatchCost(**batch)}),
            spent_after=after,
            spent_after_epsilon_delta=EpsilonDelta(
                **definitions.epsilon_delta(definition, state.params, after)
            ),
            admissible=_both(mine_run.admitted, global_ok),
            quota_admits=mine_run.admitted,
            global_admits=global_ok,
            remaining=definitions.remaining(definition, quota, mine_run.before, state.params),
            curve=definitions.curve_figures(definition, state.params, after, quota),
            exact=mine_run.exact and batch_exact and None not in (mine_run.admitted, global_ok),
        )


#: The share of a ``/cost``'s time left that each of its two verdicts (quota, global budget) may take
#: before it is given as undecided (None), so that the figures after them still fit in the budget.
_DECISION_SHARE = 0.45


def _share(deadline: float | None, share: float) -> float | None:
    """``share`` of the time left before ``deadline``, from now (None without a deadline)."""
    if deadline is None:
        return None
    now = _clock.now()
    return now + share * max(0.0, deadline - now)


def _both(mine: bool | None, glob: bool | None) -> bool | None:
    """Whether both budgets admit: False when either refuses, None when either is undecided."""
    if mine is False or glob is False:
        return False
    return None if mine is None or glob is None else True
