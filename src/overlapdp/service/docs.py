"""``/docs``: Swagger UI served from the installed package, so it renders on an air-gapped machine.

FastAPI's default ``/docs`` and ``/redoc`` pages load their scripts and styles from a CDN
(jsdelivr) and a favicon from fastapi.tiangolo.com; a custodian's machine without internet access
shows a blank page. The assets come from ``swagger-ui-bundle`` instead (the ``service`` extra; it
ships Swagger UI's release files under their Apache-2.0 licence), mounted at ``/docs/assets``, and
``/redoc`` is not served.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request
from fastapi.responses import HTMLResponse

if TYPE_CHECKING:
    from fastapi import FastAPI

#: Where the assets are mounted (under the application's root path).
ASSETS = "/docs/assets"


def install_docs(app: FastAPI, title: str) -> None:
    """Add ``GET /docs`` (Swagger UI on ``/openapi.json``) and its static assets to ``app``."""
    from fastapi.openapi.docs import get_swagger_ui_html

    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:  # an environment installed before the dependency: say so, load nothing remote
        swagger_ui_path = None
    if swagger_ui_path is not None:
        from starlette.staticfiles import StaticFiles

        app.mount(ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="swagger-ui-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        if swagger_ui_path is None:
            return HTMLResponse(
                "<!doctype html><title>overlapdp API</title><p>The interactive documentation needs the "
                "swagger-ui-bundle package: pip install 'overlapdp[service]'. The API's description is "
                f'at <a href="{root}/openapi.json">/openapi.json</a>.</p>'
            )
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{title} - API",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon-32x32.png",
        )
