"""The custodian's dashboard page, served by ``overlapdp serve`` at ``/dashboard``.

The page and its script are static and hold no data: the browser asks for the admin token, keeps it
in the tab's session storage, and reads the admin endpoints with it (data sets, analysts and their
quotas, the global guarantee over all analysts, the live ledger, the load heat map).
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response

# The page loads only its own script; nothing inline, nothing from elsewhere.
_CSP = "default-src 'self'; img-src 'self' blob:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"


def _static(name: str) -> str:
    return resources.files("overlapdp.service").joinpath("static", name).read_text(encoding="utf-8")


def install_dashboard(app: FastAPI) -> None:
    """Add ``GET /dashboard`` and ``GET /dashboard/app.js`` to ``app`` (left out of the OpenAPI description)."""
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
