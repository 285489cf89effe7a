"""The custodian's dashboard page, served by ``overlapdp serve`` at ``/dashboard``.

The page and its script are static and hold no data: the browser asks for the admin token, keeps it
in the tab's session storage, and reads the admin endpoints with it (data sets, analysts and their
quotas, the global guarantee over all analysts, the live ledger, the load heat map).
"""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query
from fastapi.responses import HTMLResponse, Response

from overlapdp.query import PredicateQuery
from overlapdp.schema import Schema
from overlapdp.service.core import NotFound
from overlapdp.service.recorded import recorded_query

# The page loads only its own script; nothing inline, nothing from elsewhere.
_CSP = "default-src 'self'; img-src 'self' blob:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"


def _static(name: str) -> str:
    return resources.files("overlapdp.service").joinpath("static", name).read_text(encoding="utf-8")


#: Seconds the heat map's overlap searches may take before showing safe upper bounds per cell.
HEATMAP_EFFORT = 2.0


def heatmap_png(store: Any, dataset: str, x: str, y: str) -> bytes:
    """The per-row load heat map (report.heat_map: max over the other attributes, per (x, y) cell) of
    every charge recorded for ``dataset``, as PNG bytes."""
    from overlapdp.report.loads import heat_map
    from overlapdp.report.plots import plot_heat

    record = store.get_dataset(dataset)
    if record is None:
        raise NotFound(f"unknown data set {dataset!r}")
    schema = Schema.from_json(record.schema)
    queries: list[PredicateQuery] = []
    weights: list[float] = []
    for i, (_seq, _analyst, query, load) in enumerate(store.loads_since(dataset, 0)):
        queries.append(recorded_query(schema, query, str(i)))
        weights.append(float(load))
    if not queries:
        raise NotFound(f"nothing has been charged on {dataset!r} yet")
    heat = heat_map(queries, x, y, weights=weights, schema=schema, effort=HEATMAP_EFFORT)
    with tempfile.TemporaryDirectory() as tmp:
        path = plot_heat(heat, Path(tmp) / "heatmap.png")
        return path.read_bytes()


def install_dashboard(app: FastAPI, store: Any, require_admin: Callable[..., Awaitable[None]]) -> None:
    """Add ``GET /dashboard`` and ``GET /dashboard/app.js`` (static, left out of the OpenAPI description)
    and the admin endpoint ``GET /v1/admin/datasets/{name}/heatmap.png`` to ``app``."""
    page = _static("dashboard.html")
    script = _static("dashboard.js")
    headers = {
        "Content-Security-Policy": _CSP,
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "no-store",
    }

    @app.get("/dashboard", include_in_schema=False)
    async def dashboard() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)

    @app.get("/dashboard/app.js", include_in_schema=False)
    async def dashboard_script() -> Response:
        return Response(script, media_type="text/javascript", headers=headers)

    @app.get(
        "/v1/admin/datasets/{name}/heatmap.png",
        tags=["admin"],
        response_class=Response,
        responses={
            200: {
                "content": {"image/png": {"schema": {"type": "string", "format": "binary"}}},
                "description": "the heat map as a PNG image",
            }
        },
        dependencies=[Depends(require_admin)],
    )
    def heatmap(
        name: str,
        x: Annotated[str, Query(max_length=200)],
        y: Annotated[str, Query(max_length=200)],
    ) -> Response:
        """The per-row load heat map over attributes x and y of everything charged on the data set."""
        return Response(heatmap_png(store, name, x, y), media_type="image/png")
