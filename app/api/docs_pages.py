"""The interactive API documentation, served whole by the service itself: Swagger UI at
``/docs`` and ReDoc at ``/redoc``, both reading ``/openapi.json``.

FastAPI's own pages load their JavaScript and CSS from a CDN (and ReDoc its fonts from
Google), so they are blank on a machine without internet. Here the assets come from the
``fastapi-offline`` package (Swagger UI and ReDoc's standalone bundle, refreshed from
upstream with each release; pinned in ``constraints.txt``) and are served under
``/docs/assets/``. The pages name no other host and Swagger UI's online validator is off.
ReDoc's bundle still asks for one image from another host (the Redocly logo in its sidebar,
hidden when it fails to load): a Content-Security-Policy on the two pages lets the browser
load nothing from anywhere but this service, so that request never leaves the browser.

The pages and the assets are public, like ``/openapi.json``: they are not API routes
(``LedgerRoute``), take no key, and are left out of the OpenAPI document.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from typing import Final

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse

SWAGGER_UI_PATH: Final = "/docs"
REDOC_PATH: Final = "/redoc"
ASSETS_PATH: Final = "/docs/assets"
# What the pages load from ASSETS_PATH; the directory holds these files only.
ASSETS: Final = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")

# Everything from this service; inline script and style because FastAPI's page templates
# start the UIs with an inline <script> and ReDoc styles itself inline; images may be data:
# URIs (Swagger UI's icons), ReDoc may run its search in a blob: worker. No framing (the
# pages can send requests with an operator's key), no forms, no <base>.
CONTENT_SECURITY_POLICY: Final = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self' 'unsafe-inline'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "worker-src 'self' blob:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
_HEADERS: Final = {"Content-Security-Policy": CONTENT_SECURITY_POLICY}


def assets_directory() -> Path:
    """Where the installed ``fastapi-offline`` keeps the Swagger UI and ReDoc files."""
    return Path(str(files("fastapi_offline") / "static"))


def install(app: FastAPI) -> None:
    """Serve the two pages and their assets on ``app`` (created with ``docs_url=None`` and
    ``redoc_url=None``, so FastAPI's CDN pages are not there as well)."""
    directory = assets_directory()
    missing = [name for name in ASSETS if not (directory / name).is_file()]
    if missing:
        raise RuntimeError(f"fastapi-offline lacks {missing} in {directory}")
    openapi_path = app.openapi_url
    assert openapi_path is not None
    title = app.title

    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        page = get_swagger_ui_html(
            openapi_url=root + openapi_path,
            title=f"{title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
            # Swagger UI's online validator sends the OpenAPI URL to another host for a
            # badge; FastAPI's layout shows none today, and this keeps it so. No OAuth2
            # redirect page: the API takes bearer keys.
            swagger_ui_parameters={"validatorUrl": None},
        )
        page.headers.update(_HEADERS)
        return page

    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "").rstrip("/")
        page = get_redoc_html(
            openapi_url=root + openapi_path,
            title=f"{title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS_PATH}/favicon.png",
            with_google_fonts=False,
        )
        page.headers.update(_HEADERS)
        return page

    app.add_route(SWAGGER_UI_PATH, swagger_ui, include_in_schema=False)
    app.add_route(REDOC_PATH, redoc, include_in_schema=False)
    app.mount(ASSETS_PATH, StaticFiles(directory=directory), name="docs-assets")
