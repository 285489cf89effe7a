"""A Python client of the overlapdp query service (httpx); tables come back as pandas DataFrames.

Every spending call sends an ``Idempotency-Key`` (a fresh UUID unless given) and is retried with the
SAME key on a transport failure, so a lost response never costs budget twice: the service answers a
retry with the recorded answer. A 429 (the analyst already has as many requests in progress as the
service allows; nothing was read) is retried after its ``Retry-After`` seconds, up to ``busy_retries``
times (10 by default), then raised.

>>> analyst = Client("http://127.0.0.1:8000", token)              # doctest: +SKIP
>>> analyst.query("adult", "age BETWEEN 30 AND 39", epsilon=0.1)  # doctest: +SKIP
"""

from __future__ import annotations

import numbers
import shutil
import time
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from overlapdp import display
from overlapdp._optional import missing_extra
from overlapdp.errors import QuotaRefused as QuotaRefused
from overlapdp.errors import ServiceRefused as ServiceRefused
from overlapdp.query.groupby import is_select

try:
    import httpx
except ModuleNotFoundError:  # the 'service' extra: one error that says so
    raise missing_extra("service", "overlapdp.service.client", "httpx") from None

#: A query: SQL-style condition text, or a workload-file object ``{"where": ...}`` / ``{"conditions": ...}``.
QuerySpec = str | Mapping[str, Any]


#: The old name of :class:`~overlapdp.errors.QuotaRefused` (the server's error is
#: :class:`~overlapdp.errors.QuotaExceeded`; one name for two classes confused ``except`` clauses).
QuotaExceeded = QuotaRefused


def _one_query(query: QuerySpec) -> dict[str, Any]:
    """The body fields of one query: a SELECT statement goes in ``sql``, other text in ``where``, an
    object is sent as it is."""
    if isinstance(query, str):
        return {"sql": query} if is_select(query) else {"where": query}
    return dict(query)


#: Longest wait the client honours from a ``Retry-After`` header, in seconds.
MAX_RETRY_AFTER = 30.0


def _retry_after(response: httpx.Response) -> float:
    """Seconds a 429 asks to wait (``Retry-After`` in seconds; 1 when absent or unreadable)."""
    try:
        value = float(response.headers.get("retry-after", "1"))
    except ValueError:
        value = 1.0
    return min(max(value, 0.0), MAX_RETRY_AFTER)


class _Base:
    #: How the client waits before a retry (tests replace it).
    _sleep = staticmethod(time.sleep)

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        busy_retries: int = 10,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )
        self.retries = retries
        self.busy_retries = busy_retries

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> _Base:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        key: str | None = None,
        spend: bool = False,
    ) -> Any:
        headers = {}
        if spend:
            headers["Idempotency-Key"] = key or uuid.uuid4().hex
        attempt = busy = 0
        while True:
            try:
                response = self._http.request(method, path, json=json, params=params, headers=headers)
            except httpx.TransportError:
                # Safe to retry: a spending call carries the same idempotency key each time.
                attempt += 1
                if attempt > self.retries:
                    raise
                self._sleep(min(2.0, 0.1 * 2**attempt))
                continue
            if response.status_code == 429 and busy < self.busy_retries:
                # too many requests of this analyst in progress: nothing was read or charged
                busy += 1
                self._sleep(_retry_after(response))
                continue
            break
        try:
            body = response.json()
        except ValueError:
            body = {"detail": response.text[:200]}
        if response.status_code >= 400:
            if (
                response.status_code == 403
                and isinstance(body, dict)
                and body.get("error") == "QuotaExceeded"
            ):
                raise QuotaRefused(response.status_code, body)
            raise ServiceRefused(response.status_code, body)
        return body


def _parameter(
    epsilon: float | None, rho: float | None, mu: float | None = None, epsilon_alpha: float | None = None
) -> dict[str, float]:
    """The per-query amount(s) given (the data set's definition says which one it takes). Real numbers
    (Python's or numpy's) are sent as JSON numbers; anything else (``True``, ``"0.5"``) is sent as given,
    so the service refuses it (422, nothing spent) by the same strict rule as a raw HTTP body: the client
    never turns a boolean or a string into a charge."""
    given = {"epsilon": epsilon, "rho": rho, "mu": mu, "epsilon_alpha": epsilon_alpha}
    return {k: _amount(v) for k, v in given.items() if v is not None}


def _amount(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return value
    return float(value)


#: The answer tables' older column names, read as the new ones (with a DeprecationWarning).
_RENAMED = {"count": "answer", "stddev": "noise_std"}


class AnswerFrame(pd.DataFrame):
    """The client's answers: a pandas DataFrame that prints every column, wrapped to the terminal's width
    rather than elided (pandas elides the middle columns of a wide frame, which hid the error bar
    between a long query text and the 32-character charge id).

    The noisy value is the column ``answer`` for every aggregate, as in the library's
    ``WorkloadAnswers.frame`` and the CLI's JSON, and the noise's standard deviation ``noise_std``, as
    in the CLI's JSON and a plan. Their older names ``count`` and ``stddev`` are not columns (two
    columns of one number would print the concept twice, and a sum's row would have an empty
    ``count``), but ``frame["count"]`` and ``frame["stddev"]`` still read the new columns with a
    ``DeprecationWarning``, so code written against older clients keeps working while it moves."""

    @property
    def _constructor(self) -> Any:
        return AnswerFrame

    def __getitem__(self, key: Any) -> Any:
        new = _RENAMED.get(key) if isinstance(key, str) else None
        if new is not None and key not in self.columns and new in self.columns:
            warnings.warn(f"the column {key!r} is now {new!r}", DeprecationWarning, stacklevel=2)
            key = new
        return super().__getitem__(key)

    def __repr__(self) -> str:
        width = shutil.get_terminal_size().columns
        return self.to_string(line_width=width, max_rows=pd.get_option("display.max_rows"))


def _answers_frame(queries: Sequence[QuerySpec], answers: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per answer; a GROUP BY's cells name their query (``item``) and carry their ``group``."""
    rows = []
    grouped = any("group" in a for a in answers)
    summed = any("aggregate" in a for a in answers)
    if not grouped and len(answers) != len(queries):
        raise ServiceRefused(502, {"detail": "the service returned a different number of answers"})
    for n, a in enumerate(answers):
        q = queries[int(a.get("item", n))]
        row: dict[str, Any] = {"query": q if isinstance(q, str) else str(dict(q))}
        if grouped:
            row["group"] = a.get("group")
        if summed:  # a sum or mean among the answers: each row's kind
            row["aggregate"] = a.get("aggregate", "count")
        row.update({"answer": _value(a), **_error_bar(a), "noise_std": _noise_std(a)})
        row.update({"seq": a.get("seq"), "charge": a.get("charge")})  # the long ids last
        rows.append(row)
    return AnswerFrame(rows)


def _value(answer: Mapping[str, Any]) -> Any:
    """An answer's noisy value: ``answer`` (an older service sent a count's only as ``count``)."""
    value = answer.get("answer")
    return answer.get("count") if value is None else value


def _noise_std(answer: Mapping[str, Any]) -> Any:
    """An answer's noise standard deviation: ``noise_std`` (an older service sent only ``stddev``)."""
    return answer.get("noise_std", answer.get("stddev"))


def _error_bar(answer: Mapping[str, Any]) -> dict[str, Any]:
    """An answer's error bar as the columns ``low``, ``high``, ``level``: the names the library's
    ``WorkloadAnswers.frame`` and the CLI's JSON (``error_bar``) use (an older service sent
    only ``ci95``, at level 0.95)."""
    bar = answer.get("error_bar")
    if isinstance(bar, Mapping):
        return {"low": bar.get("low"), "high": bar.get("high"), "level": bar.get("level")}
    lo, hi = answer.get("ci95", [None, None])
    return {"low": lo, "high": hi, "level": 0.95 if lo is not None else None}


def _cells_frame(by: Sequence[str], answers: list[dict[str, Any]]) -> pd.DataFrame:
    """A GROUP BY's answers: one row per cell, a column per grouped attribute, then the answer."""
    rows = []
    for a in answers:
        group = a.get("group") or {}
        rows.append(
            {
                **{name: group.get(name) for name in by},
                **({"aggregate": a["aggregate"]} if "aggregate" in a else {}),
                "answer": _value(a),
                **_error_bar(a),
                "noise_std": _noise_std(a),
                "seq": a.get("seq"),
                "charge": a.get("charge"),
            }
        )
    extra = ["aggregate"] if any("aggregate" in a for a in answers) else []
    return AnswerFrame(
        rows, columns=[*by, *extra, "answer", "low", "high", "level", "noise_std", "seq", "charge"]
    )


def _figures(row: Mapping[str, Any]) -> dict[str, Any]:
    """A quota line for people: ``spent`` rounded up and ``remaining`` down to 6 significant digits
    (:mod:`overlapdp.display`), so a printed DataFrame never shows ``0.49999999999998357``, nor rounds it
    to ``0.5``, more than is left (pandas prints floats to the nearest)."""
    out = dict(row)
    for key, side in (("spent", display.spent), ("remaining", display.remaining)):
        value = out.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[key] = float(side(value))
    return out


def _ledger_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    columns = ["seq", "id", "dataset", "analyst", "kind", "session", "request_key", "position"]
    columns += ["query", "mechanism", "cost", "answer", "created_at"]
    return pd.DataFrame(rows, columns=columns)


class Session:
    """An open sparse-vector or guess-and-check session."""

    def __init__(self, client: Client, info: dict[str, Any]) -> None:
        self._client = client
        self.info = info
        self.id = str(info["id"])

    def query(
        self,
        query: QuerySpec,
        *,
        threshold: float | None = None,
        guess: float | None = None,
        key: str | None = None,
    ) -> dict[str, Any]:
        """Sparse vector: ``{"above": bool, ...}``; guess-and-check: ``{"ok": bool, "estimate": ...}``."""
        body: dict[str, Any] = _one_query(query)
        if threshold is not None:
            body["threshold"] = threshold
        if guess is not None:
            body["guess"] = guess
        out = self._client._call("POST", f"/v1/sessions/{self.id}/query", json=body, key=key, spend=True)
        answer: dict[str, Any] = out["answer"]
        return answer

    def refresh(self) -> dict[str, Any]:
        self.info = self._client._call("GET", f"/v1/sessions/{self.id}")
        return self.info


class Client(_Base):
    """An analyst's client: data sets, noisy counts, sessions, own quota and ledger."""

    def datasets(self) -> pd.DataFrame:
        rows = self._call("GET", "/v1/datasets")
        return pd.DataFrame(
            [
                {
                    "name": r["name"],
                    "definition": r["definition"],
                    "parameter": r["parameter"],
                    "attributes": [a["name"] for a in r["schema"]["attributes"]],
                }
                for r in rows
            ],
            columns=["name", "definition", "parameter", "attributes"],
        )

    def schema(self, dataset: str) -> dict[str, Any]:
        out: dict[str, Any] = self._call("GET", f"/v1/datasets/{dataset}")["schema"]
        return out

    def query(
        self,
        dataset: str,
        query: QuerySpec | None,
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        epsilon_alpha: float | None = None,
        key: str | None = None,
        group_by: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """One noisy count as a one-row DataFrame (its noisy value ``answer``, its error bar ``low`` /
        ``high`` / ``level``, ``noise_std``, ledger position and charge id).

        With ``group_by`` (or a ``"group_by"`` key in an object query), a GROUP BY: one row per cell of
        the grouped attributes' domain, a column per grouped attribute, empty cells included.
        ``query`` may be None then (every row). An object query with ``aggregate`` / ``of`` / ``bounds``
        (or ``{"sql": "SELECT SUM(col) ...", "bounds": [lo, hi]}``) asks a clipped sum or mean: the
        table then also has an ``aggregate`` column."""
        body: dict[str, Any] = {
            **(_one_query(query) if query is not None else {}),
            **_parameter(epsilon, rho, mu, epsilon_alpha),
        }
        if group_by is not None:
            body["group_by"] = list(group_by)
        out = self._call("POST", f"/v1/datasets/{dataset}/query", json=body, key=key, spend=True)
        if "group_by" in out:
            return _cells_frame(out["group_by"], out["answers"])
        return _answers_frame([query if query is not None else ""], [out])

    def batch(
        self,
        dataset: str,
        queries: Sequence[QuerySpec],
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        epsilon_alpha: float | None = None,
        key: str | None = None,
        consistent: bool = False,
    ) -> pd.DataFrame:
        """Several noisy counts, admitted and charged together (all or none).

        ``consistent=True`` adds a column ``consistent``: the answers (counts, sums, means) projected
        onto the answers of a non-negative table (post-processing, no privacy cost; the total squared
        error never increases, a single answer's can, so the interval columns belong to ``answer``
        only)."""
        body: dict[str, Any] = {"queries": list(queries), **_parameter(epsilon, rho, mu, epsilon_alpha)}
        if consistent:
            body["consistent"] = True
        out = self._call("POST", f"/v1/datasets/{dataset}/batch", json=body, key=key, spend=True)
        frame = _answers_frame(queries, out["answers"])
        if consistent:
            frame["consistent"] = out["consistent"]["answers"]
        return frame

    def cost(
        self,
        dataset: str,
        queries: Sequence[QuerySpec],
        *,
        epsilon: float | None = None,
        rho: float | None = None,
        mu: float | None = None,
        epsilon_alpha: float | None = None,
        allocation: str | None = None,
        objective: str = "variance",
    ) -> dict[str, Any]:
        """A dry run: the cost and whether the quota and the global budget would admit it now. With
        ``allocation`` ("optimal" or "even"), also ``out["allocation"]``: the batch's own overlap cost
        (``out["cost"]["batch"]["overlap"]``) split over its queries as :meth:`plan` does, each query's
        share in ``out["allocation"]["queries"][i]["share"]``."""
        body: dict[str, Any] = {"queries": list(queries), **_parameter(epsilon, rho, mu, epsilon_alpha)}
        if allocation is not None:
            body["allocation"] = allocation
            body["objective"] = objective
        out: dict[str, Any] = self._call("POST", f"/v1/datasets/{dataset}/cost", json=body)
        return out

    def plan(
        self,
        dataset: str,
        queries: Sequence[QuerySpec],
        *,
        budget: float | None = None,
        target_error: int | None = None,
        allocation: str = "optimal",
        objective: str = "variance",
        level: float = 0.95,
    ) -> dict[str, Any]:
        """A release planned before any data is read (nothing spent): with ``budget`` (the TOTAL, in the
        data set's amount) each query's share (``queries[i]["share"]``; send those as each query's
        amount), its noise and error bar, and ``total_variance`` under every accounting; with
        ``target_error``, the smallest ``budget`` answering every query within it."""
        body: dict[str, Any] = {"queries": list(queries), "allocation": allocation, "objective": objective}
        body["level"] = level
        if budget is not None:
            body["budget"] = budget
        if target_error is not None:
            body["target_error"] = target_error
        out: dict[str, Any] = self._call("POST", f"/v1/datasets/{dataset}/plan", json=body)
        return out

    def open_session(
        self,
        dataset: str,
        kind: str,
        *,
        epsilon: float,
        max_positives: int | None = None,
        monotonic: bool | None = None,
        tolerance: float | None = None,
        epsilon_estimates: float | None = None,
        max_failures: int | None = None,
        key: str | None = None,
    ) -> Session:
        """``kind`` is ``"sparse_vector"`` (epsilon, max_positives, monotonic) or ``"guess_and_check"``
        (epsilon, tolerance, epsilon_estimates, max_failures), the fields of the HTTP body. A parameter
        the kind does not use is refused by the service (:class:`ServiceRefused`, 422 naming it)."""
        given = {
            "max_positives": max_positives,
            "monotonic": monotonic,
            "tolerance": tolerance,
            "epsilon_estimates": epsilon_estimates,
            "max_failures": max_failures,
        }
        body = {"kind": kind, "epsilon": epsilon, **{k: v for k, v in given.items() if v is not None}}
        out = self._call("POST", f"/v1/datasets/{dataset}/sessions", json=body, key=key, spend=True)
        return Session(self, out["session"])

    def session(self, session_id: str) -> Session:
        return Session(self, self._call("GET", f"/v1/sessions/{session_id}"))

    def me(self) -> pd.DataFrame:
        """Quota, spend and remaining budget per data set."""
        out = self._call("GET", "/v1/me")
        rows = [_figures({"dataset": ds, **v}) for ds, v in out["datasets"].items()]
        return pd.DataFrame(rows, columns=["dataset", "definition", "quota", "spent", "remaining"])

    def account(self, dataset: str) -> dict[str, Any]:
        """``GET /v1/me`` for one data set, as sent: quota, spend, remaining, their (epsilon, delta)
        lines and, for an rdp data set served as a curve, ``curve`` (the spend and quota per order)."""
        out: dict[str, Any] = self._call("GET", "/v1/me")["datasets"][dataset]
        return out

    def ledger(self, dataset: str | None = None, *, page: int = 1000) -> pd.DataFrame:
        """Own charges and answers, all pages."""
        return _ledger_frame(self._pages("/v1/me/ledger", {"dataset": dataset}, page))

    def _pages(self, path: str, params: dict[str, Any], page: int) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        after = 0
        while True:
            query = {k: v for k, v in params.items() if v is not None}
            chunk = self._call("GET", path, params={**query, "after": after, "limit": page})
            rows.extend(chunk)
            if len(chunk) < page:
                return rows
            after = int(chunk[-1]["seq"])


class AdminClient(Client):
    """The data custodian's client: data sets, budgets, analysts, tokens, the full ledger."""

    def register_dataset(
        self,
        name: str,
        path: str,
        schema: Mapping[str, Any],
        *,
        budget: float | None = None,
        definition: str = "pure",
        engine: str = "duckdb",
        **parameters: Any,
    ) -> dict[str, Any]:
        """Register a data set with its global ``budget`` in the definition's amount, or ``epsilon=``, a
        target epsilon at its ``delta``, calibrated as ``overlapdp answer --epsilon`` does, or (rdp with
        ``orders``) ``budgets=``, one per order; ``parameters``: its definition's (``delta``, ``omega``
        for tcdp, ``alpha`` or ``orders`` for rdp, ``composition`` for approx)."""
        body: dict[str, Any] = {"name": name, "path": path, "schema": dict(schema)}
        if budget is not None:
            body["budget"] = budget
        body.update(definition=definition, engine=engine, **parameters)
        out: dict[str, Any] = self._call("POST", "/v1/admin/datasets", json=body)
        return out

    def set_budget(
        self, dataset: str, budget: float | None = None, definition: str = "pure", **parameters: Any
    ) -> dict[str, Any]:
        """Change the global budget: ``budget`` in the definition's amount, or ``epsilon=`` (a target at
        the data set's delta), or ``budgets=`` (rdp with ``orders``: one per order)."""
        body: dict[str, Any] = {"definition": definition, **parameters}
        if budget is not None:
            body["budget"] = budget
        out: dict[str, Any] = self._call("PUT", f"/v1/admin/datasets/{dataset}/budget", json=body)
        return out

    def status(self, dataset: str) -> dict[str, Any]:
        """Global spend, remaining budget, per-analyst spend and the guarantee over all analysts."""
        out: dict[str, Any] = self._call("GET", f"/v1/admin/datasets/{dataset}")
        return out

    def create_analyst(
        self, name: str, quotas: Mapping[str, float], *, quota_epsilons: Mapping[str, float] | None = None
    ) -> str:
        """Create an analyst; returns the token (shown only here). ``quota_epsilons``: quotas given as a
        target epsilon at each data set's delta."""
        body: dict[str, Any] = {"name": name, "quotas": dict(quotas)}
        if quota_epsilons:
            body["quota_epsilons"] = dict(quota_epsilons)
        return str(self._call("POST", "/v1/admin/analysts", json=body)["token"])

    def set_quota(
        self,
        analyst: str,
        dataset: str,
        quota: float | None = None,
        *,
        epsilon: float | None = None,
        budgets: Sequence[float] | None = None,
    ) -> dict[str, Any]:
        """Set a quota in the data set's amount, or as ``epsilon`` at its delta, or (rdp with ``orders``)
        as ``budgets``, one per order."""
        given = (
            ("quota", quota),
            ("epsilon", epsilon),
            ("budgets", None if budgets is None else list(budgets)),
        )
        body = {k: v for k, v in given if v is not None}
        out: dict[str, Any] = self._call("PUT", f"/v1/admin/analysts/{analyst}/quotas/{dataset}", json=body)
        return out

    def revoke(self, analyst: str) -> None:
        self._call("POST", f"/v1/admin/analysts/{analyst}/revoke")

    def rotate_token(self, analyst: str) -> str:
        return str(self._call("POST", f"/v1/admin/analysts/{analyst}/token")["token"])

    def analysts(self) -> pd.DataFrame:
        rows = self._call("GET", "/v1/admin/analysts")
        flat = [
            _figures({"analyst": a["name"], "revoked": a["revoked"], "dataset": ds, **v})
            for a in rows
            for ds, v in a["datasets"].items()
        ]
        return pd.DataFrame(
            flat, columns=["analyst", "revoked", "dataset", "definition", "quota", "spent", "remaining"]
        )

    def full_ledger(
        self, dataset: str | None = None, analyst: str | None = None, *, page: int = 5000
    ) -> pd.DataFrame:
        """Every charge of every analyst, in ledger order."""
        return _ledger_frame(self._pages("/v1/admin/ledger", {"dataset": dataset, "analyst": analyst}, page))
