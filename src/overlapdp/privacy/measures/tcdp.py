"""truncated CDP (rho, omega): :class:`TCDPMeasure` (MATH.md 2.4, 5.8)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any, cast

import numpy as np

from overlapdp.privacy.definitions import TCDP, BudgetError
from overlapdp.privacy.measures._checks import (
    _exact_scalar,
    _scalar_check,
)
from overlapdp.privacy.measures.base import (
    AccountingContext,
    AdditiveMeasure,
    DefinitionGuarantee,
    FilterOptions,
    FilterRule,
    TrackSpec,
    Value,
    _need,
)
from overlapdp.privacy.measures.zcdp import ZCDPMeasure
from overlapdp.privacy.mechanisms import Mechanism
from overlapdp.query import PredicateQuery


class TCDPMeasure(AdditiveMeasure[TCDP, TCDP]):
    """(rho, omega)-truncated CDP (Bun, Dwork, Rothblum, Steinke 2018; MATH.md 2.4, 5.9). A row
    covered by charges $(\\rho_i,\\omega_i)$ is $(\\sum\\rho_i,\\min\\omega_i)$-tCDP (composition), so the
    worst row is the pair $(\\max_x\\sum_{q\\ni x}\\rho_q,\\ \\min\\omega)$ with the minimum over the charges
    that cover some row: the smallest pair (larger rho, smaller omega is weaker) that every row satisfies.
    The rho part is a plain per-row ``sum``, computed as zCDP's is; the native value is the pair."""

    name = "tcdp"
    label = "truncated CDP"
    budget_type = TCDP
    parameters = ("rho", "omega")
    amount = "rho"
    fixed = ("omega",)
    native_pair = True

    def budget(self, amount: float, params: Mapping[str, Any]) -> TCDP:
        return TCDP(amount, params["omega"])

    def guarantee_of(self, m: Mechanism) -> TCDP | None:
        return m.tcdp()

    def weight(self, g: TCDP) -> float:
        return g.rho

    def account(
        self,
        ctx: AccountingContext,
        mechs: list[Mechanism],
        queries: list[PredicateQuery],
        delta: float,
        earlier: Mapping[str, DefinitionGuarantee],
    ) -> DefinitionGuarantee | None:
        """The rho part is the odometer's additive route on the rhos (or zCDP's result itself when every
        charge's rho IS its zCDP rho: the same loads give the same maximum); omega is the smallest over
        all charges sequentially and over the charges covering some row overlap-aware (a charge with an
        empty coverage loads no row)."""
        gs = [m.tcdp() for m in mechs]
        if any(g is None for g in gs):
            return None
        ts = [g for g in gs if g is not None]
        z = earlier.get(ZCDPMeasure.name)
        zs = [m.zcdp() for m in mechs]
        if z is None or not all(zc is not None and zc.rho == g.rho for zc, g in zip(zs, ts, strict=True)):
            loads = np.array([[g.rho] for g in ts], dtype=float)
            z = ctx.additive_guarantee(ZCDPMeasure(), queries, loads, delta)
        omega_seq = min(g.omega for g in ts)
        omega_ovl = min(
            (g.omega for g, q in zip(ts, queries, strict=True) if not q.is_contradiction), default=math.inf
        )
        seq = (float(cast(float, z.sequential)), omega_seq)
        ovl = (float(cast(float, z.overlap)), omega_ovl)
        return dataclasses.replace(
            z,
            definition=self.name,
            sequential=seq,
            overlap=ovl,
            sequential_epsilon=self.to_epsilon(seq, delta),
            overlap_epsilon=self.to_epsilon(ovl, delta),
        )

    def to_epsilon(self, value: Value, delta: float) -> float:
        """``value`` is the pair (rho, omega) (MATH.md 5.9)."""
        assert isinstance(value, tuple) and len(value) == 2
        return TCDP(value[0], value[1]).epsilon_at(delta) if math.isfinite(value[0]) else math.inf

    def infinite(self) -> Value:
        return (math.inf, math.inf)

    def budget_value(self, budget: TCDP) -> float:
        """rho: what the filter's value (the worst row's sum of rho) is compared with; the budget's omega
        is a condition on each charge (:meth:`rule`)."""
        return budget.rho

    def check_reset(self, old: TCDP, new: TCDP) -> None:
        """omega stays: charges admitted under a smaller omega would not meet a larger one."""
        if new.omega != old.omega:
            raise BudgetError("a tCDP filter's budget can change its rho only, not its omega")

    def rule(self, budget: TCDP, factor: float, options: FilterOptions) -> FilterRule:
        """Admit iff the charge's omega is at least the budget's and every row's sum of rho stays within
        the budget's rho, exactly (MATH.md 5.9: the individual Rényi filter of Feldman and
        Zrnic 2021 at every order $1<\\alpha\\le\\omega_B$ at once). A charge with a smaller omega that covers
        some row is refused whatever the loads, with its reason."""
        label = self.label

        def rho(m: Mechanism) -> float:
            return _need(m.tcdp(), m, label).rho

        def refuse(m: Mechanism, q: PredicateQuery) -> str | None:
            g = _need(m.tcdp(), m, label)
            if g.omega >= budget.omega or q.is_contradiction:  # a charge covering no row loads no row
                return None
            return (
                f"omega {g.omega!r} (of the {m.name} charge) is below the budget's omega {budget.omega!r}: "
                f"a tCDP budget admits only charges with omega >= {budget.omega!r}"
            )

        return FilterRule(
            tracks=(TrackSpec("sum", rho, lambda m: Fraction(rho(m))),),
            check=_scalar_check(factor, budget.rho),
            exact_ok=_exact_scalar(factor, Fraction(budget.rho)),
            limit=Fraction(budget.rho) / int(factor),
            refuse=refuse,
        )
