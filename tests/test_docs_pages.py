"""The interactive documentation (``app.api.docs_pages``, issue 13): Swagger UI at ``/docs``
and ReDoc at ``/redoc`` work on a machine without internet.

- In process: both pages and their assets are served by the app, with no key even when keys
  are configured; the pages name no other host and carry the Content-Security-Policy; the
  assets are the files ``fastapi-offline`` ships, and nothing else new answers (other
  methods, a trailing slash, other files, a path out of the assets directory, FastAPI's
  OAuth2 redirect page).
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from app.api.docs_pages import (
    ASSETS,
    ASSETS_PATH,
    CONTENT_SECURITY_POLICY,
    REDOC_PATH,
    SWAGGER_UI_PATH,
    assets_directory,
)
from tests.support.api import assert_problem

PAGES = (SWAGGER_UI_PATH, REDOC_PATH)
# Every URL a page names: src, href and ReDoc's spec-url attributes, Swagger UI's url: '...'.
_URL_IN_PAGE = re.compile(r"""(?:src|href|spec-url)="([^"]*)"|url: '([^']*)'""")


# -- in process ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES, ids=["swagger-ui", "redoc"])
async def test_pages_are_public_and_name_no_other_host(
    keyed: tuple[httpx.AsyncClient, str, str], path: str
) -> None:
    client, _, _ = keyed  # keys are configured: the API itself wants one
    assert (await client.get("/v1/accounts")).status_code == 401
    for headers in ({}, {"Authorization": "Bearer gck_not_a_key"}):
        page = await client.get(path, headers=headers)
        assert page.status_code == 200, page.text
        assert page.headers["content-type"] == "text/html; charset=utf-8"
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    named = {a or b for a, b in _URL_IN_PAGE.findall(page.text)}
    assert "/openapi.json" in named
    assert "://" not in page.text  # no absolute URL anywhere, inline script included
    for url in named:
        assert url.startswith("/"), url
        assert not url.startswith("//"), url
        loaded = await client.get(url)
        assert loaded.status_code == 200, (url, loaded.text[:200])
    assets = {url.removeprefix(ASSETS_PATH + "/") for url in named if url.startswith(ASSETS_PATH)}
    assert assets <= set(ASSETS)


async def test_assets_are_the_files_the_package_ships(
    keyed: tuple[httpx.AsyncClient, str, str],
) -> None:
    client, _, _ = keyed
    directory = assets_directory()
    # What the mount exposes: an upgrade of fastapi-offline that ships more is looked at.
    assert sorted(p.name for p in directory.iterdir()) == sorted(ASSETS)
    types = {".js": "text/javascript", ".css": "text/css", ".png": "image/png"}
    for name in ASSETS:
        served = await client.get(f"{ASSETS_PATH}/{name}")
        assert served.status_code == 200, name
        assert served.content == (directory / name).read_bytes(), name
        assert served.headers["content-type"].split(";")[0] == types[Path(name).suffix]
        head = await client.head(f"{ASSETS_PATH}/{name}")
        assert head.status_code == 200, name
        assert head.content == b""
        again = await client.get(
            f"{ASSETS_PATH}/{name}", headers={"If-None-Match": served.headers["etag"]}
        )
        assert again.status_code == 304, name


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", SWAGGER_UI_PATH, 405),
        ("DELETE", REDOC_PATH, 405),
        ("POST", f"{ASSETS_PATH}/swagger-ui.css", 405),
        ("GET", f"{SWAGGER_UI_PATH}/", 404),
        ("GET", f"{REDOC_PATH}/", 404),
        ("GET", f"{ASSETS_PATH}", 404),
        ("GET", f"{ASSETS_PATH}/", 404),
        ("GET", f"{ASSETS_PATH}/swagger-ui.js", 404),
        ("GET", f"{ASSETS_PATH}/%2e%2e/%2e%2e/__init__.py", 404),
        ("GET", f"{ASSETS_PATH}/..%2f..%2f__init__.py", 404),
        ("GET", f"{SWAGGER_UI_PATH}/oauth2-redirect", 404),
        ("GET", "/static-offline-docs/swagger-ui.css", 404),
    ],
    ids=[
        "post-docs",
        "delete-redoc",
        "post-asset",
        "docs-slash",
        "redoc-slash",
        "assets-dir",
        "assets-dir-slash",
        "unknown-asset",
        "dot-segments",
        "encoded-slashes",
        "oauth2-redirect",
        "package-default-prefix",
    ],
)
async def test_nothing_else_answers(
    keyed: tuple[httpx.AsyncClient, str, str], method: str, path: str, status: int
) -> None:
    client, _, _ = keyed
    response = await client.request(method, path)
    assert_problem(response, status)
    if status == 405:
        assert {m.strip() for m in response.headers["allow"].split(",")} == {"GET", "HEAD"}


async def test_openapi_document_leaves_the_pages_out(
    keyed: tuple[httpx.AsyncClient, str, str],
) -> None:
    client, _, _ = keyed
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert all(p.startswith(("/v1/", "/healthz")) for p in paths), sorted(paths)
