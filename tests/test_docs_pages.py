"""The interactive documentation (``app.api.docs_pages``, issue 13): Swagger UI at ``/docs``
and ReDoc at ``/redoc`` work on a machine without internet.

- In process: both pages and their assets are served by the app, with no key even when keys
  are configured; the pages name no other host and carry the Content-Security-Policy; the
  assets are the files ``fastapi-offline`` ships, and nothing else new answers (other
  methods, a trailing slash, other files, a path out of the assets directory, FastAPI's
  OAuth2 redirect page).
- In a browser: headless Chromium opens each page from a real ``gpu-credits serve`` process
  with API keys configured, under a host name of its own (``docs.gpu-credits.test``, which
  only this Chromium resolves, to 127.0.0.1: Swagger UI treats localhost URLs specially).
  Every operation of the committed OpenAPI file must render, by operation id and summary,
  and Swagger UI's "Try it out" must get an answer from the service (``getHealth``);
  no request may reach the network for any other host (the browser blocks them all,
  and every host but that one resolves to nothing), no script may fail, and what the
  Content-Security-Policy blocked is exactly what is expected (ReDoc's Redocly logo). A
  screenshot of each page is left in the test's tmp_path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, Page, Playwright, Request, Route, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from app.api.docs_pages import (
    ASSETS,
    ASSETS_PATH,
    CONTENT_SECURITY_POLICY,
    REDOC_PATH,
    SWAGGER_UI_PATH,
    assets_directory,
)
from app.keys import Scope, create_key
from tests.support.api import assert_problem
from tests.support.browser import chromium_or_skip
from tests.support.server_process import ROOT, ServerProcess

PAGES = (SWAGGER_UI_PATH, REDOC_PATH)
# Every URL a page names: src, href and ReDoc's spec-url attributes, Swagger UI's url: '...'.
_URL_IN_PAGE = re.compile(r"""(?:src|href|spec-url)="([^"]*)"|url: '([^']*)'""")


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    operation_id: str
    tag: str
    summary: str


def committed_operations() -> list[Operation]:
    doc = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    operations = [
        Operation(method, path, op["operationId"], op["tags"][0], op["summary"])
        for path, item in doc["paths"].items()
        for method, op in item.items()
    ]
    assert len(operations) >= 10
    return operations


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
    probes = {"/livez", "/readyz", "/healthz", "/version", "/metrics"}
    assert all(p.startswith("/v1/") or p in probes for p in paths), sorted(paths)
    assert not [p for p in paths if p.startswith(("/docs", "/redoc"))], sorted(paths)


# -- in a browser --------------------------------------------------------------------------

HOST = "docs.gpu-credits.test"  # .test is reserved (RFC 6761): it never names a real host


@dataclass(frozen=True)
class PageCase:
    path: str
    rendered: str  # a CSS selector that shows the page has rendered its operations
    operation: str  # the element of one operation; {tag} and {operation_id} filled in
    title: str  # inside ``operation``: the element that shows its summary
    blocked_by_csp: frozenset[str] = frozenset()
    try_it_out: bool = False  # run getHealth from the page (a request the page sends itself)


CASES = {
    "swagger-ui": PageCase(
        SWAGGER_UI_PATH,
        rendered="#operations-credits-grantCredits",
        operation="#operations-{tag}-{operation_id}",
        title=".opblock-summary-description",
        try_it_out=True,
    ),
    "redoc": PageCase(
        REDOC_PATH,
        rendered='[data-section-id="operation/grantCredits"] h2',
        operation='[data-section-id="operation/{operation_id}"]',
        title="h2",
        # ReDoc 2's sidebar always shows the Redocly logo from its CDN (and hides it when it
        # cannot load); the Content-Security-Policy stops that request in the browser.
        blocked_by_csp=frozenset({"https://cdn.redoc.ly/redoc/logo-mini.svg"}),
    ),
}


@dataclass
class Traffic:
    """What the page asked for: requests that reached the network stack (to this service,
    or to another host, which are aborted), those the browser refused itself, and errors."""

    origin: str
    served: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def route(self, route: Route) -> None:
        url = route.request.url
        if _origin(url) == self.origin:
            self.served.append(urlsplit(url).path)
            route.continue_()
        else:
            self.foreign.append(url)
            route.abort("blockedbyclient")

    def request_failed(self, request: Request) -> None:
        self.failed.append((request.url, request.failure or ""))

    def blocked_by_csp(self) -> set[str]:
        return {url for url, failure in self.failed if failure == "csp"}


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@pytest.fixture(scope="module")
def docs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """``gpu-credits serve`` as the README starts it, with an API key configured."""
    data_dir = tmp_path_factory.mktemp("docs") / "data"
    data_dir.mkdir()
    create_key(data_dir / "api-keys.json", "dashboard", (Scope.READ,), "")
    server = ServerProcess(data_dir)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = chromium_or_skip()
    with sync_playwright() as playwright:
        yield _launch(playwright, executable)


def _launch(playwright: Playwright, executable: str) -> Browser:
    # Only HOST resolves, to the loopback address; every other name resolves to nothing, so
    # even a request that got past the page's own blocking could not leave this machine.
    rules = f"MAP {HOST} 127.0.0.1, MAP * ~NOTFOUND"
    return playwright.chromium.launch(
        executable_path=executable, args=[f"--host-resolver-rules={rules}"], timeout=30_000
    )


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_page_renders_every_operation_offline(
    browser: Browser, docs_server: ServerProcess, tmp_path: Path, case: PageCase
) -> None:
    origin = f"http://{HOST}:{docs_server.port}"
    traffic = Traffic(origin)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        context.set_default_timeout(20_000)
        context.route("**/*", traffic.route)
        page = context.new_page()
        page.on("requestfailed", traffic.request_failed)
        page.on("pageerror", lambda error: traffic.errors.append(f"page error: {error}"))
        page.on(
            "console",
            lambda message: (
                traffic.errors.append(f"console: {message.text}")
                if message.type == "error"
                else None
            ),
        )
        response = page.goto(origin + case.path)
        assert response is not None
        assert response.status == 200
        try:
            page.wait_for_selector(case.rendered, state="visible")
        except PlaywrightTimeoutError as exc:
            page.screenshot(path=tmp_path / f"{case.path.strip('/')}-failed.png")
            raise AssertionError(f"{case.path} did not render; {traffic}") from exc
        rendered = _rendered_operations(page, case)
        tried = _try_health(page) if case.try_it_out else None
        # Nothing more is on its way: every request the page makes has ended (for 500 ms).
        page.wait_for_load_state("networkidle")
        page.screenshot(path=tmp_path / f"{case.path.strip('/')}.png")
    finally:
        context.close()

    expected = {op.operation_id: op.summary for op in committed_operations()}
    assert rendered == expected
    if case.try_it_out:
        assert tried == ("200", {"status": "ok"})
    assert traffic.foreign == []
    assert {url for url, _ in traffic.failed} == traffic.blocked_by_csp()
    assert traffic.blocked_by_csp() == case.blocked_by_csp
    unexplained = [e for e in traffic.errors if not any(url in e for url in case.blocked_by_csp)]
    assert unexplained == []
    pages = {case.path, "/openapi.json"} | ({"/healthz"} if case.try_it_out else set())
    assets = {f"{ASSETS_PATH}/{name}" for name in ASSETS}
    assert pages <= set(traffic.served) <= pages | assets, traffic.served
    assert (tmp_path / f"{case.path.strip('/')}.png").stat().st_size > 10_000


def _rendered_operations(page: Page, case: PageCase) -> dict[str, str]:
    """Operation id -> the summary the page shows for it, for each committed operation whose
    element is on the page once (one round trip to the browser)."""
    selectors = [
        (op.operation_id, case.operation.format(tag=op.tag, operation_id=op.operation_id))
        for op in committed_operations()
    ]
    shown: dict[str, str] = page.evaluate(
        """([selectors, title]) => Object.fromEntries(selectors.flatMap(([id, selector]) => {
            const found = document.querySelectorAll(selector);
            const shown = found.length === 1 ? found[0].querySelector(title) : null;
            return shown ? [[id, shown.innerText.trim()]] : [];
        }))""",
        [selectors, case.title],
    )
    return shown


def _try_health(page: Page) -> tuple[str, Any]:
    """Swagger UI's "Try it out" on getHealth (public: no key to enter): the status and body
    the page shows. The page's own requests must pass the Content-Security-Policy too."""
    operation = page.locator("#operations-operations-getHealth")
    operation.locator(".opblock-summary-control").click()
    operation.get_by_role("button", name="Try it out").click()
    operation.get_by_role("button", name="Execute").click()
    answer = operation.locator(".live-responses-table .response").first
    status = answer.locator(".response-col_status")
    status.wait_for()
    body = answer.locator(".response-col_description .microlight").first.inner_text()
    return status.inner_text().strip(), json.loads(body)
