"""The account page (``app.ui``, issue 13): ``/ui/accounts/{account_id}``.

- In process, on every backend: the page shows what the API answers (the totals at the
  clock, a chart point per ledger entry with the balance after it, the live grants in the
  order they will be used, the latest entries newest first) and changes nothing.
- In process, with API keys: the key works from the ``Authorization`` header and from the
  sign-in cookie (``POST /ui/login``: HttpOnly, SameSite=Strict, Path=/ui, Secure on https),
  never from the URL; wrong, revoked, scope-less and out-of-prefix keys are refused;
  sign-out forgets the cookie; cross-site sign-ins are refused; the API ignores the cookie.
- The caller's data is escaped (a hostile grant name, a hostile account id in the path or
  the form); the pages carry a strict Content-Security-Policy (no script at all, the one
  inline stylesheet by its hash), and are left out of the OpenAPI document.
- Bounded work: the chart holds the last ``CHART_ENTRIES`` entries, the table the last
  ``TABLE_ENTRIES``, the expirations the first ``EXPIRATIONS_SHOWN`` live grants.
- In a browser: headless Chromium against a real ``gpu-credits serve`` signs in through the
  form, sees the chart's points match the ledger and the two tables' rows, with nothing
  loaded from anywhere else and no console error; screenshots in the test's tmp_path.
"""

from __future__ import annotations

import base64
import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from fastapi import FastAPI
from playwright.sync_api import Browser, Request, Route, sync_playwright

from app.keys import Scope, create_key, revoke_key
from app.main import create_app
from app.settings import Settings
from app.ui import chart as chart_geometry
from app.ui.pages import (
    CHART_ENTRIES,
    COOKIE_MAX_AGE_S,
    COOKIE_NAME,
    EXPIRATIONS_SHOWN,
    TABLE_ENTRIES,
)
from app.ui.templates import CONTENT_SECURITY_POLICY
from tests.support.api import JSON, all_entries, ok, paginate, snapshot
from tests.support.app_runner import running
from tests.support.browser import chromium_or_skip
from tests.support.server_process import ServerProcess

ACCOUNT = "team-a:acme"
HOSTILE_NAME = "<script>alert('x')</script> & \"quoted\" <img src=x onerror=alert(1)>"
PAGE = f"/ui/accounts/{ACCOUNT}"
# Grants (one named with markup, two scoped to GPU classes), consumptions into debt, an
# expiration, debt settled, and two live grants left at the end.
HISTORY: list[tuple[str, JSON]] = [
    ("grants", {"amount": 100, "timestamp": 0, "expiry": 50, "name": HOSTILE_NAME}),
    ("grants", {"amount": 50, "timestamp": 2, "expiry": 5, "resources": ["h100"]}),
    ("consumptions", {"amount": 70, "timestamp": 3}),
    ("consumptions", {"amount": 10, "timestamp": 4, "resource": "h100"}),
    ("consumptions", {"amount": 60, "timestamp": 8}),
    ("grants", {"amount": 80, "timestamp": 12, "expiry": 40, "resources": ["h100", "a100"]}),
    ("grants", {"amount": 20, "timestamp": 13, "expiry": 30}),
    ("grants", {"amount": 25, "timestamp": 14, "expiry": 60, "name": "night batch"}),
]


# -- what a page shows -------------------------------------------------------------------------


@dataclass
class Parsed:
    """A page as the tests look at it."""

    tags: Counter[str] = field(default_factory=Counter)
    attributes: set[str] = field(default_factory=set)
    points: list[dict[str, str]] = field(default_factory=list)  # the chart's circles
    rows: dict[str, list[list[str]]] = field(default_factory=dict)  # section id -> cells
    figures: dict[str, str] = field(default_factory=dict)  # <dd id> -> text
    forms: list[dict[str, str]] = field(default_factory=list)
    inputs: list[dict[str, str]] = field(default_factory=list)
    style: str = ""
    text: str = ""


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parsed = Parsed()
        self._section = ""
        self._in_thead = False
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._figure: str | None = None
        self._in_style = False
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        p = self.parsed
        p.tags[tag] += 1
        p.attributes |= set(a)
        if tag == "section":
            self._section = a.get("id", "")
        elif tag == "thead":
            self._in_thead = True
        elif tag == "circle" and "point" in a.get("class", "").split():
            p.points.append(a)
        elif tag == "tr" and not self._in_thead:
            self._row = []
        elif tag in ("td", "dd"):
            self._cell = []
            self._figure = a.get("id") if tag == "dd" else None
        elif tag == "form":
            p.forms.append(a)
        elif tag == "input":
            p.inputs.append(a)
        elif tag == "style":
            self._in_style = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "thead":
            self._in_thead = False
        elif tag == "td" and self._row is not None and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "dd" and self._cell is not None and self._figure:
            self.parsed.figures[self._figure] = " ".join("".join(self._cell).split())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.parsed.rows.setdefault(self._section, []).append(self._row)
            self._row = None
        elif tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        if self._in_style:
            self.parsed.style += data
        else:
            self._text.append(data)

    def close(self) -> None:
        super().close()
        self.parsed.text = " ".join("".join(self._text).split())


def parse(page: str) -> Parsed:
    parser = _Parser()
    parser.feed(page)
    parser.close()
    return parser.parsed


def assert_html(response: httpx.Response, status: int) -> Parsed:
    """An HTML answer of these pages: the status, the headers every one carries, and no
    script, no style attribute, no URL of another host, and the one stylesheet allowed by
    its hash."""
    assert response.status_code == status, response.text[:500]
    assert response.headers["content-type"] == "text/html; charset=utf-8"
    assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["cache-control"] == "no-store"
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "same-origin"
    parsed = parse(response.text)
    assert parsed.tags["script"] == 0
    assert "style" not in parsed.attributes
    assert not [a for a in parsed.attributes if a.startswith("on")]
    assert "://" not in response.text
    digest = base64.b64encode(hashlib.sha256(parsed.style.encode()).digest()).decode()
    assert f"style-src 'sha256-{digest}'" in CONTENT_SECURITY_POLICY
    return parsed


def _classes(resources: list[str] | None) -> str:
    return ", ".join(resources) if resources else "any"


def assert_shows(parsed: Parsed, balance: JSON, grants: list[JSON], entries: list[JSON]) -> None:
    """The page shows what the API answers: ``entries`` is the whole ledger here."""
    assert parsed.figures == {
        "balance": str(balance["balance"]),
        "available": str(balance["available"]),
        "debt": str(balance["debt"]),
        "clock": str(balance["timestamp"]),
        "watermark": str(balance["watermark"]),
        "live-grants": str(len(grants)),
    }
    charted = entries[-CHART_ENTRIES:]
    assert [
        (
            int(p["data-sequence"]),
            int(p["data-timestamp"]),
            int(p["data-balance"]),
            int(p["data-available"]),
            int(p["data-debt"]),
        )
        for p in parsed.points
    ] == [(e["sequence"], e["timestamp"], e["balance"], e["available"], e["debt"]) for e in charted]
    assert [p["class"] for p in parsed.points] == [f"point {e['kind']}" for e in charted]
    # Where each point is drawn: later entries further right, a larger balance higher up.
    xs = [float(p["cx"]) for p in parsed.points]
    ys = {int(p["data-balance"]): float(p["cy"]) for p in parsed.points}
    assert xs == sorted(xs)
    if charted[0]["timestamp"] < charted[-1]["timestamp"]:
        assert xs[0] == chart_geometry.LEFT
        assert xs[-1] == chart_geometry.WIDTH - chart_geometry.RIGHT
    by_balance = sorted(ys)
    assert [ys[b] for b in by_balance] == sorted(ys.values(), reverse=True)
    assert all(
        chart_geometry.TOP <= y <= chart_geometry.HEIGHT - chart_geometry.BOTTOM
        for y in ys.values()
    )

    shown_grants = grants[:EXPIRATIONS_SHOWN]
    assert parsed.rows.get("expirations", []) == [
        [
            str(g["expiry"]),
            str(g["expiry"] - balance["timestamp"]),
            str(g["remaining"]),
            str(g["grant_id"]),
            _classes(g["resources"]),
            g["name"] or "",
        ]
        for g in shown_grants
    ]
    listed = entries[::-1][:TABLE_ENTRIES]
    rows = parsed.rows["ledger"]
    assert [(int(r[0]), int(r[1]), r[2], int(r[5]), int(r[6]), int(r[7]), r[8]) for r in rows] == [
        (
            e["sequence"],
            e["timestamp"],
            e["kind"],
            e["balance"],
            e["available"],
            e["debt"],
            ("final" if e["final"] else "provisional")
            + (f", revision {e['revision']}" if e["revision"] else ""),
        )
        for e in listed
    ]
    signs = {"grant": "+", "consumption": "-", "expiration": "-", "void": "-"}
    assert [r[3] for r in rows] == [f"{signs[e['kind']]}{e['amount']}" for e in listed]


async def api_view(client: httpx.AsyncClient, account_id: str = ACCOUNT) -> tuple[JSON, list[JSON]]:
    balance = ok(await client.get(f"/v1/accounts/{account_id}/balance"))
    grants = ok(await client.get(f"/v1/accounts/{account_id}/grants"))["grants"]
    assert isinstance(grants, list)
    return balance, grants


async def write_history(client: httpx.AsyncClient, headers: dict[str, str] | None = None) -> None:
    for tail, body in HISTORY:
        response = await client.post(f"/v1/accounts/{ACCOUNT}/{tail}", json=body, headers=headers)
        assert response.status_code in (200, 201), response.text


# -- in process, every backend -------------------------------------------------------------------


async def test_the_page_shows_what_the_api_answers_and_changes_nothing(
    client: httpx.AsyncClient,
) -> None:
    await write_history(client)
    before = await snapshot(client, ACCOUNT)
    page = assert_html(await client.get(PAGE), 200)
    assert await snapshot(client, ACCOUNT) == before  # reads never change an account
    balance, grants = await api_view(client)
    entries = await all_entries(client, ACCOUNT)
    assert {e["kind"] for e in entries} == {"grant", "consumption", "expiration"}
    assert balance["debt"] == 0
    assert len(grants) == 2
    assert_shows(page, balance, grants, entries)
    # The hostile name is shown as text, in the grant's ledger row.
    assert HOSTILE_NAME not in (await client.get(PAGE)).text
    assert f"name: {HOSTILE_NAME}" in page.rows["ledger"][-1][4]
    assert page.tags["img"] == 0
    # HEAD answers the same headers and no body.
    head = await client.head(PAGE)
    assert head.status_code == 200
    assert head.content == b""


async def test_an_unknown_account_is_a_404_page_and_is_not_created(
    client: httpx.AsyncClient,
) -> None:
    page = assert_html(await client.get("/ui/accounts/nobody"), 404)
    assert "Account not found" in page.text
    assert (await client.get("/v1/accounts/nobody/balance")).status_code == 404


# -- in process, memory: bounded work, escaping, routes --------------------------------------


@pytest.mark.backends("memory")
async def test_the_page_reads_a_bounded_part_of_a_long_ledger(client: httpx.AsyncClient) -> None:
    """More entries than the chart holds and more live grants than the table lists: the
    latest entries, the first grants in consumption order, and a note saying so."""
    grants = EXPIRATIONS_SHOWN + 7
    operations: list[JSON] = [
        {
            "op": "grant",
            "account_id": ACCOUNT,
            "amount": 1000 + i,
            "timestamp": i,
            "expiry": 10**6 - i,
        }
        for i in range(grants)
    ]
    operations += [
        {"op": "consume", "account_id": ACCOUNT, "amount": 1, "timestamp": grants + i}
        for i in range(CHART_ENTRIES + 30 - grants)
    ]
    ok(await client.post("/v1/batch", json={"atomic": True, "operations": operations}))
    page = assert_html(await client.get(PAGE), 200)
    balance, live = await api_view(client)
    entries = await paginate(client, 1000, ACCOUNT)
    assert len(entries) == CHART_ENTRIES + 30
    assert len(live) == grants
    assert len(page.points) == CHART_ENTRIES
    assert len(page.rows["ledger"]) == TABLE_ENTRIES
    assert len(page.rows["expirations"]) == EXPIRATIONS_SHOWN
    assert_shows(page, balance, live, entries)
    assert f"the first {EXPIRATIONS_SHOWN} of {grants}" in page.text
    assert f"The latest {CHART_ENTRIES} entries" in page.text


@pytest.mark.backends("memory")
async def test_one_entry_and_no_live_grant(client: httpx.AsyncClient) -> None:
    ok(
        await client.post(
            f"/v1/accounts/{ACCOUNT}/consumptions", json={"amount": 5, "timestamp": 7}
        )
    )
    page = assert_html(await client.get(PAGE), 200)
    balance, grants = await api_view(client)
    assert_shows(page, balance, grants, await all_entries(client, ACCOUNT))
    assert [float(p["cx"]) for p in page.points] == [
        chart_geometry.LEFT
        + (chart_geometry.WIDTH - chart_geometry.LEFT - chart_geometry.RIGHT) / 2
    ]
    assert "expirations" not in page.rows
    assert "No live grants" in page.text


@pytest.mark.backends("memory")
@pytest.mark.parametrize(
    "path",
    [
        "/ui/accounts/%3Cscript%3Ealert(1)%3C%5Cscript%3E",
        "/ui/accounts/-starts-with-a-dash",
        "/ui/accounts/" + "a" * 129,
        "/ui/accounts/a%22%20onmouseover%3D%22x",
        "/ui/accounts/acme%0a",
    ],
    ids=["markup", "dash", "too-long", "attribute", "newline"],
)
async def test_an_invalid_account_id_is_refused_and_not_echoed(
    client: httpx.AsyncClient, path: str
) -> None:
    response = await client.get(path)
    page = assert_html(response, 422)
    assert "Not an account id" in page.text
    assert "alert" not in response.text
    assert "onmouseover" not in response.text


@pytest.mark.backends("memory")
@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", PAGE, 405),
        ("DELETE", PAGE, 405),
        ("PUT", "/ui/login", 405),
        ("GET", "/ui/logout", 405),
        ("GET", "/ui/accounts", 404),
        ("GET", "/ui/accounts/", 404),
        ("GET", f"{PAGE}/", 404),
        ("GET", "/ui", 404),
    ],
)
async def test_nothing_else_answers(
    client: httpx.AsyncClient, method: str, path: str, status: int
) -> None:
    assert (await client.request(method, path)).status_code == status


@pytest.mark.backends("memory")
async def test_the_pages_are_not_in_the_openapi_document(client: httpx.AsyncClient) -> None:
    paths = ok(await client.get("/openapi.json"))["paths"]
    assert not [p for p in paths if p.startswith("/ui")]


@pytest.mark.backends("memory")
async def test_without_keys_the_page_needs_no_sign_in(client: httpx.AsyncClient) -> None:
    """Authentication off (no key configured, loopback only): the page opens as the API
    does, and the form signs in with any key without keeping it."""
    await write_history(client)
    assert_html(await client.get(PAGE), 200)
    form = assert_html(await client.get("/ui/login"), 200)
    assert "Authentication is off" in form.text
    signed = await client.post("/ui/login", data={"account_id": ACCOUNT, "key": "anything"})
    assert signed.status_code == 303
    assert signed.headers["location"] == PAGE
    assert "set-cookie" not in signed.headers


# -- in process, with API keys ----------------------------------------------------------------


@dataclass(frozen=True)
class Keys:
    app: FastAPI
    client: httpx.AsyncClient
    keys_file: Path
    writer: str  # every scope
    reader: str  # credits:read
    reader_id: str
    team_b: str  # credits:read, accounts starting with team-b:
    no_read: str  # credits:grant and credits:consume only


@pytest.fixture
async def keys(tmp_path: Path) -> AsyncIterator[Keys]:
    keys_file = tmp_path / "api-keys.json"
    writer, _ = create_key(keys_file, "ops", tuple(Scope), "")
    reader, record = create_key(keys_file, "dashboard", (Scope.READ,), "")
    team_b, _ = create_key(keys_file, "team-b", (Scope.READ,), "team-b:")
    no_read, _ = create_key(keys_file, "scheduler", (Scope.GRANT, Scope.CONSUME), "")
    app = create_app(Settings(storage="memory", data_dir=tmp_path, api_keys_file=keys_file))
    async with running(app) as client:
        await write_history(client, bearer(writer))
        yield Keys(app, client, keys_file, writer, reader, record.key_id, team_b, no_read)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def set_cookie(response: httpx.Response) -> dict[str, str]:
    """The sign-in cookie a response sets: its value and attributes (lower-case names)."""
    headers = response.headers.get_list("set-cookie")
    assert len(headers) == 1, headers
    first, *attributes = (part.strip() for part in headers[0].split(";"))
    name, _, value = first.partition("=")
    assert name == COOKIE_NAME
    parsed = {"value": value}
    for attribute in attributes:
        key, _, val = attribute.partition("=")
        parsed[key.lower()] = val
    return parsed


async def sign_in(
    client: httpx.AsyncClient, key: str, account_id: str = ACCOUNT, **headers: str
) -> httpx.Response:
    return await client.post(
        "/ui/login", data={"account_id": account_id, "key": key}, headers=headers or None
    )


async def test_without_credentials_the_page_is_the_sign_in_form(keys: Keys) -> None:
    response = await keys.client.get(PAGE)
    page = assert_html(response, 401)
    assert response.headers["www-authenticate"] == 'Bearer realm="gpu-credits"'
    assert page.forms == [{"class": "login", "method": "post", "action": "/ui/login"}]
    assert {i["name"]: i["type"] for i in page.inputs} == {"account_id": "text", "key": "password"}
    assert [i.get("value") for i in page.inputs if i["name"] == "account_id"] == [ACCOUNT]
    assert page.points == []
    assert "ledger" not in page.rows
    assert page.figures == {}


async def test_the_key_works_in_the_authorization_header(keys: Keys) -> None:
    page = assert_html(await keys.client.get(PAGE, headers=bearer(keys.reader)), 200)
    balance, grants = await api_view_with(keys.client, keys.reader)
    entries = ok(
        await keys.client.get(f"/v1/accounts/{ACCOUNT}/ledger", headers=bearer(keys.reader))
    )["entries"]
    assert_shows(page, balance, grants, entries)
    assert "Sign out" not in page.text  # no cookie to forget
    assert "set-cookie" not in (await keys.client.get(PAGE, headers=bearer(keys.reader))).headers


async def api_view_with(client: httpx.AsyncClient, key: str) -> tuple[JSON, list[JSON]]:
    balance = ok(await client.get(f"/v1/accounts/{ACCOUNT}/balance", headers=bearer(key)))
    grants = ok(await client.get(f"/v1/accounts/{ACCOUNT}/grants", headers=bearer(key)))
    return balance, grants["grants"]


async def test_sign_in_sets_a_strict_http_only_cookie_and_sign_out_forgets_it(
    keys: Keys,
) -> None:
    client = keys.client
    signed = await sign_in(client, keys.reader)
    assert signed.status_code == 303
    assert signed.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert signed.headers["location"] == PAGE
    cookie = set_cookie(signed)
    assert cookie == {
        "value": keys.reader,
        "httponly": "",
        "max-age": str(COOKIE_MAX_AGE_S),
        "path": "/ui",
        "samesite": "strict",
    }  # no Secure on plain http, no Domain, no Expires beyond Max-Age
    page = assert_html(await client.get(PAGE), 200)  # the client sends the cookie back
    assert len(page.points) == len(await all_entries_with(client, keys.reader))
    assert page.forms == [{"class": "logout", "method": "post", "action": "/ui/logout"}]
    # The API never reads the cookie: a page's key is no key for it.
    assert (await client.get(f"/v1/accounts/{ACCOUNT}/balance")).status_code == 401
    out = await client.post("/ui/logout")
    assert out.status_code == 303
    assert out.headers["location"] == "/ui/login"
    gone = set_cookie(out)
    assert gone["value"] in ("", '""')
    assert gone["max-age"] == "0"
    assert gone["path"] == "/ui"
    assert COOKIE_NAME not in client.cookies
    assert_html(await client.get(PAGE), 401)


async def all_entries_with(client: httpx.AsyncClient, key: str) -> list[JSON]:
    body = ok(await client.get(f"/v1/accounts/{ACCOUNT}/ledger", headers=bearer(key)))
    entries = body["entries"]
    assert isinstance(entries, list)
    return entries


async def test_the_cookie_is_secure_on_https(keys: Keys) -> None:
    transport = httpx.ASGITransport(keys.app)
    async with httpx.AsyncClient(transport=transport, base_url="https://test") as over_tls:
        cookie = set_cookie(await sign_in(over_tls, keys.reader))
    assert "secure" in cookie
    # Behind a proxy that ends TLS, the browser's Origin tells.
    behind_proxy = await sign_in(keys.client, keys.reader, origin="https://test")
    assert "secure" in set_cookie(behind_proxy)


@pytest.mark.parametrize("where", ["page", "login", "logout", "login-form"])
async def test_a_key_in_the_url_is_refused_and_never_used(keys: Keys, where: str) -> None:
    requests = {
        "page": ("GET", f"{PAGE}?key={keys.reader}"),
        "login": ("POST", f"/ui/login?key={keys.reader}&account_id={ACCOUNT}"),
        "logout": ("POST", f"/ui/logout?key={keys.reader}"),
        "login-form": ("GET", f"/ui/login?api_key={keys.reader}"),
    }
    method, url = requests[where]
    response = await keys.client.request(method, url)
    page = assert_html(response, 422)
    assert "never in a URL" in page.text
    assert keys.reader not in response.text
    assert "set-cookie" not in response.headers
    assert page.points == []


async def test_wrong_keys_are_refused_and_logged(
    keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    client = keys.client
    wrong = keys.reader[:-4] + ("AAAA" if not keys.reader.endswith("AAAA") else "BBBB")
    with caplog.at_level("WARNING", logger="app.auth"):
        by_header = await client.get(PAGE, headers=bearer(wrong))
        by_form = await sign_in(client, wrong)
        by_cookie = await client.get(PAGE, headers={"Cookie": f"{COOKIE_NAME}={wrong}"})
    header_page = assert_html(by_header, 401)
    assert "Authorization header was refused" in header_page.text
    form_page = assert_html(by_form, 401)
    assert "This key is not valid" in form_page.text
    assert "set-cookie" not in by_form.headers
    cookie_page = assert_html(by_cookie, 401)
    assert "sign in again" in cookie_page.text
    assert set_cookie(by_cookie)["max-age"] == "0"  # the useless cookie is dropped
    logged = [r.getMessage() for r in caplog.records if r.name == "app.auth"]
    assert len(logged) == 3, logged
    assert all("authentication failed (401)" in line for line in logged)
    assert not any(wrong.rpartition("_")[2] in line for line in logged)  # never the secret
    for response in (by_header, by_form, by_cookie):
        assert parse(response.text).points == []


async def test_a_revoked_key_stops_working_at_once(keys: Keys) -> None:
    client = keys.client
    await sign_in(client, keys.reader)
    assert_html(await client.get(PAGE), 200)
    assert revoke_key(keys.keys_file, keys.reader_id)
    assert keys.app.state.authenticator.reload_if_changed()  # what the service does every 2 s
    assert_html(await client.get(PAGE), 401)
    assert_html(await client.get(PAGE, headers=bearer(keys.reader)), 401)


async def test_a_key_without_the_read_scope_or_for_other_accounts_is_forbidden(
    keys: Keys,
) -> None:
    client = keys.client
    for key in (keys.no_read, keys.team_b):
        page = assert_html(await client.get(PAGE, headers=bearer(key)), 403)
        assert page.points == []
        refused = await sign_in(client, key)
        form = assert_html(refused, 403)
        assert "This key cannot open the account" in form.text
        assert "set-cookie" not in refused.headers
    assert "credits:read" in parse((await client.get(PAGE, headers=bearer(keys.no_read))).text).text
    assert "team-b:" in parse((await client.get(PAGE, headers=bearer(keys.team_b))).text).text
    # Its own accounts: the page (404 here: none exists).
    assert_html(await client.get("/ui/accounts/team-b:1", headers=bearer(keys.team_b)), 404)


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
    ],
    ids=["cross-site", "same-site", "foreign-origin", "opaque-origin"],
)
async def test_cross_site_sign_in_and_out_are_refused(keys: Keys, headers: dict[str, str]) -> None:
    """Login CSRF: another site's page must not sign a browser in with a key it chose."""
    refused = await sign_in(keys.client, keys.reader, **headers)
    assert "Cross-site request refused" in assert_html(refused, 403).text
    assert "set-cookie" not in refused.headers
    out = await keys.client.post("/ui/logout", headers=headers)
    assert_html(out, 403)
    assert "set-cookie" not in out.headers


async def test_same_site_sign_in_is_accepted(keys: Keys) -> None:
    for headers in (
        {"Sec-Fetch-Site": "same-origin", "Origin": "http://test"},
        {"Sec-Fetch-Site": "none"},  # typed or bookmarked
        {"Origin": "http://test"},  # a browser without Fetch Metadata
        {},  # not a browser: nothing for another site to forge
    ):
        assert (await sign_in(keys.client, keys.reader, **headers)).status_code == 303, headers


@pytest.mark.parametrize(
    ("content", "content_type", "status", "says"),
    [
        ("account_id=team-a:acme", "application/x-www-form-urlencoded", 422, "once each"),
        ("account_id=a&account_id=b&key=k", "application/x-www-form-urlencoded", 422, "once each"),
        ("account_id=a&key=k&next=/x", "application/x-www-form-urlencoded", 422, "once each"),
        ("account_id=a&key=k&&", "application/x-www-form-urlencoded", 422, "could not be read"),
        ("account_id=%ff&key=k", "application/x-www-form-urlencoded", 422, "could not be read"),
        ("account_id=-a&key=k", "application/x-www-form-urlencoded", 422, "Not an account id"),
        ("account_id=a&key=+", "application/x-www-form-urlencoded", 422, "Enter an API key"),
        ('{"account_id": "a", "key": "k"}', "application/json", 415, "web form"),
    ],
    ids=["missing", "repeated", "unknown", "malformed", "not-utf8", "bad-id", "blank-key", "json"],
)
async def test_a_bad_sign_in_form_is_refused(
    keys: Keys, content: str, content_type: str, status: int, says: str
) -> None:
    response = await keys.client.post(
        "/ui/login", content=content.encode(), headers={"Content-Type": content_type}
    )
    assert says in assert_html(response, status).text
    assert "set-cookie" not in response.headers


async def test_a_hostile_account_id_in_the_form_is_not_echoed(keys: Keys) -> None:
    hostile = '"><script>alert(1)</script>'
    response = await sign_in(keys.client, keys.reader, account_id=hostile)
    page = assert_html(response, 422)
    assert "alert" not in response.text
    assert [i.get("value") for i in page.inputs if i["name"] == "account_id"] == [""]


async def test_pasted_spaces_around_the_fields_are_dropped(keys: Keys) -> None:
    signed = await sign_in(keys.client, f"  {keys.reader}\n", account_id=f" {ACCOUNT} ")
    assert signed.headers["location"] == PAGE
    assert set_cookie(signed)["value"] == keys.reader


async def test_the_sign_in_form(keys: Keys) -> None:
    page = assert_html(await keys.client.get("/ui/login"), 200)
    assert page.forms == [{"class": "login", "method": "post", "action": "/ui/login"}]
    assert "Authentication is off" not in page.text
    assert "credits:read" in page.text


# -- in a browser --------------------------------------------------------------------------------

HOST = "ui.gpu-credits.test"  # .test is reserved (RFC 6761); only this Chromium resolves it


@dataclass
class Traffic:
    origin: str
    requested: list[str] = field(default_factory=list)  # every request, redirects included
    foreign: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def route(self, route: Route) -> None:
        url = route.request.url
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" == self.origin:
            route.continue_()
        else:
            self.foreign.append(url)
            route.abort("blockedbyclient")

    def request(self, request: Request) -> None:
        parts = urlsplit(request.url)
        self.requested.append(f"{request.method} {parts.scheme}://{parts.netloc}{parts.path}")

    def request_failed(self, request: Request) -> None:
        self.failed.append((request.url, request.failure or ""))


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str, str]]:
    """``gpu-credits serve`` with two keys: one that writes, one that reads."""
    data_dir = tmp_path_factory.mktemp("ui") / "data"
    data_dir.mkdir()
    writer, _ = create_key(data_dir / "api-keys.json", "ops", tuple(Scope), "")
    reader, _ = create_key(data_dir / "api-keys.json", "dashboard", (Scope.READ,), "")
    server = ServerProcess(data_dir)
    server.start()
    try:
        yield server, writer, reader
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = chromium_or_skip()
    rules = f"MAP {HOST} 127.0.0.1, MAP * ~NOTFOUND"
    with sync_playwright() as playwright:
        yield playwright.chromium.launch(
            executable_path=executable, args=[f"--host-resolver-rules={rules}"], timeout=30_000
        )


def test_sign_in_and_read_the_page_in_chromium(
    browser: Browser, ui_server: tuple[ServerProcess, str, str], tmp_path: Path
) -> None:
    server, writer, reader = ui_server
    with httpx.Client(base_url=server.base_url, headers=bearer(writer), timeout=10) as api:
        _write_history_sync(api)
        entries = api.get(f"/v1/accounts/{ACCOUNT}/ledger", params={"limit": "1000"}).json()[
            "entries"
        ]
        grants = api.get(f"/v1/accounts/{ACCOUNT}/grants").json()["grants"]
    origin = f"http://{HOST}:{server.port}"
    traffic = Traffic(origin)
    context = browser.new_context(viewport={"width": 1200, "height": 1000})
    try:
        context.set_default_timeout(20_000)
        context.route("**/*", traffic.route)
        page = context.new_page()
        page.on("request", traffic.request)
        page.on("requestfailed", traffic.request_failed)
        page.on("pageerror", lambda error: traffic.errors.append(f"page error: {error}"))
        page.on(
            "console",
            lambda m: traffic.errors.append(f"console: {m.text}") if m.type == "error" else None,
        )
        response = page.goto(origin + PAGE)
        assert response is not None
        assert response.status == 401
        page.screenshot(path=tmp_path / "sign-in.png")
        assert page.locator("input[name=account_id]").input_value() == ACCOUNT
        page.fill("input[name=key]", reader)
        with page.expect_navigation():
            page.click("button[type=submit]")
        page.wait_for_selector("svg#chart circle.point")
        assert page.url == origin + PAGE
        cookies = context.cookies()
        assert [(c["name"], c["httpOnly"], c["sameSite"], c["path"]) for c in cookies] == [
            (COOKIE_NAME, True, "Strict", "/ui")
        ]
        # No script could read it anyway: the page has none, and document.cookie hides it.
        assert page.evaluate("document.cookie") == ""
        shown = page.evaluate(
            """() => ({
                points: [...document.querySelectorAll('svg#chart circle.point')].map(c => {
                    const box = c.getBoundingClientRect();
                    return [Number(c.dataset.sequence), Number(c.dataset.balance),
                            box.width > 0 && box.height > 0, box.x, box.y];
                }),
                expirations: [...document.querySelectorAll('#expirations tbody tr')]
                    .map(r => [...r.cells].map(c => c.innerText.trim())),
                entries: [...document.querySelectorAll('#ledger tbody tr')]
                    .map(r => [...r.cells].map(c => c.innerText.trim())),
                balanceLine: getComputedStyle(document.querySelector('svg .balance')).stroke,
                header: getComputedStyle(document.querySelector('header')).display,
                chart: document.querySelector('svg#chart').getBoundingClientRect().width,
            })"""
        )
        page.screenshot(path=tmp_path / "account.png", full_page=True)
        with page.expect_navigation():
            page.click("form.logout button")
        assert page.url == origin + "/ui/login"
        assert context.cookies() == []
        page.screenshot(path=tmp_path / "signed-out.png")
    finally:
        context.close()

    assert [(s, b) for s, b, *_ in shown["points"]] == [
        (e["sequence"], e["balance"]) for e in entries
    ]
    assert all(visible for _, _, visible, _, _ in shown["points"])
    xs = [x for *_, x, _ in shown["points"]]
    assert xs == sorted(xs)
    assert xs[0] < xs[-1]
    assert shown["expirations"] == [
        [
            str(g["expiry"]),
            str(g["expiry"] - entries[-1]["timestamp"]),
            str(g["remaining"]),
            str(g["grant_id"]),
            _classes(g["resources"]),
            g["name"] or "",
        ]
        for g in grants
    ]
    assert [int(r[0]) for r in shown["entries"]] == [e["sequence"] for e in reversed(entries)]
    assert any(HOSTILE_NAME in r[4] for r in shown["entries"])  # shown as text, not run
    # The stylesheet applied (its hash is in the policy): the chart is laid out and styled.
    assert shown["header"] == "flex"
    assert shown["balanceLine"] == "rgb(36, 87, 166)"
    assert shown["chart"] > 800
    assert traffic.foreign == []
    assert traffic.failed == []
    # Chromium reports every document answered with an error status; the 401 is the one.
    assert traffic.errors == [
        "console: Failed to load resource: the server responded with a status of 401 (Unauthorized)"
    ]
    # Nothing but the pages themselves: no stylesheet, script, font, image or favicon.
    assert traffic.requested == [
        f"GET {origin}{PAGE}",
        f"POST {origin}/ui/login",
        f"GET {origin}{PAGE}",
        f"POST {origin}/ui/logout",
        f"GET {origin}/ui/login",
    ]
    for name in ("sign-in.png", "account.png", "signed-out.png"):
        assert (tmp_path / name).stat().st_size > 10_000, name


def _write_history_sync(api: httpx.Client) -> None:
    """``write_history`` over a real socket (the browser test runs outside an event loop)."""
    for tail, body in HISTORY:
        response = api.post(f"/v1/accounts/{ACCOUNT}/{tail}", json=body)
        assert response.status_code in (200, 201), response.text
