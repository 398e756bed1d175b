"""Swagger UI and ReDoc served from assets inside an installed package (fastapi-offline's copies):
clusters often have no internet, so /docs must not fetch anything from a CDN."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse, Response

ASSETS_DIR = Path(fastapi_offline.__file__).parent / "static"
ASSETS_PATH = "/static/docs"

# Everything the docs pages load comes from this server. The policy also stops what the bundles
# would fetch on their own (ReDoc's footer logo from its CDN), so a cluster without internet sees
# no failed request and nothing leaves it.
DOCS_CSP = (
    "default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; worker-src 'self' blob:; "
    "connect-src 'self'; font-src 'self' data:"
)


def _with_policy(page: HTMLResponse) -> HTMLResponse:
    page.headers["Content-Security-Policy"] = DOCS_CSP
    return page


# ReDoc's menu footer shows a logo fetched from its CDN; in a cluster with no internet that is a
# failed request on every page view. The bundle is served with that one URL pointed at an empty image.
_REDOC_CDN_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
_EMPTY_SVG = b"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E"


@lru_cache(maxsize=1)
def _redoc_bundle() -> bytes:
    return (ASSETS_DIR / "redoc.standalone.js").read_bytes().replace(_REDOC_CDN_LOGO, _EMPTY_SVG)


def install_docs(app: FastAPI) -> None:
    router = APIRouter(include_in_schema=False)
    title = app.title

    @router.get(f"{ASSETS_PATH}/redoc.standalone.js")
    async def redoc_bundle() -> Response:
        return Response(
            _redoc_bundle(),
            media_type="text/javascript",
            headers={"Cache-Control": "public, max-age=86400"},
        )

    @router.get("/docs")
    async def swagger_ui() -> HTMLResponse:
        return _with_policy(
            get_swagger_ui_html(
                openapi_url=app.openapi_url or "/openapi.json",
                title=f"{title} — Swagger UI",
                swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
                swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
                swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
                swagger_ui_parameters={"displayOperationId": True, "tryItOutEnabled": True},
            )
        )

    @router.get("/redoc")
    async def redoc() -> HTMLResponse:
        return _with_policy(
            get_redoc_html(
                openapi_url=app.openapi_url or "/openapi.json",
                title=f"{title} — ReDoc",
                redoc_js_url=f"{ASSETS_PATH}/redoc.standalone.js",
                redoc_favicon_url=f"{ASSETS_PATH}/favicon.png",
                with_google_fonts=False,
            )
        )

    app.include_router(router)
    app.mount(ASSETS_PATH, StaticFiles(directory=ASSETS_DIR), name="docs-assets")
