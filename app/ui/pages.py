"""The account page: ``GET /ui/accounts/{account_id}``, a server-rendered HTML view of one
account for people (the API is for programs): its totals at the clock, balance over time as
an SVG chart, the upcoming expirations and the latest ledger entries. No script and nothing
from another host (``app.ui.templates`` holds the HTML and its Content-Security-Policy).

Authentication is the API's: an API key with the ``credits:read`` scope, limited to the
key's account prefix, either in an ``Authorization: Bearer`` header (for tools) or, for a
browser, in a cookie set by the sign-in form:

- ``GET /ui/login`` shows the form (account id and key); ``POST /ui/login`` checks the key
  and its scope for that account, sets the cookie and redirects (303) to the account's page.
  The cookie is ``HttpOnly`` (no script can read it), ``SameSite=Strict`` (no other site's
  page or link sends it), ``Path=/ui`` (the API never sees it, and never reads cookies
  anyway) and ``Secure`` when the browser is on https; it lasts ``COOKIE_MAX_AGE_S``.
- ``POST /ui/logout`` deletes it.
- Never in a URL: these pages take no query parameters; a request with any is refused (422)
  before anything else is looked at, so a key sent that way is never used, nor echoed.
- An account page without credentials answers 401 with the sign-in form (no redirect: the
  address stays the account's, and nothing decides where a redirect would go).
- Cross-site requests: the cookie is ``SameSite=Strict``, and the two POSTs (the only
  requests that change anything, and only the cookie) are refused (403) when the browser
  says they come from another site (``Sec-Fetch-Site``, else ``Origin``), so no other site
  can sign a browser in with a key of its own choosing (login CSRF).

Failed sign-ins and invalid cookies are logged like the API's 401s (``app.auth``).

Reads only (SPEC section 3): the page is made of the service's reads, bounded:
``EXPIRATIONS_SHOWN`` live grants and the last ``CHART_ENTRIES`` entries
(``Ledger.overview``). These routes are not API routes: not in the OpenAPI document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, quote, urlsplit

from fastapi import FastAPI, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from app.api.auth import Authenticator, Forbidden, Unauthenticated, authenticate, authorize
from app.api.problems import describe
from app.api.schemas import ACCOUNT_ID_PATTERN
from app.keys import KeyRecord, Scope
from app.service.errors import ServiceError
from app.service.ledger import Ledger
from app.service.results import AccountOverview
from app.storage.base import ConsumptionEntry, Entry, ExpirationEntry, GrantEntry
from app.ui.chart import chart
from app.ui.templates import CONTENT_SECURITY_POLICY, classes, render

LOGIN_PATH: Final = "/ui/login"
LOGOUT_PATH: Final = "/ui/logout"
ACCOUNT_PATH: Final = "/ui/accounts/{account_id}"
COOKIE_NAME: Final = "gpu_credits_key"
COOKIE_PATH: Final = "/ui"
COOKIE_MAX_AGE_S: Final = 8 * 3600  # a working day; sign in again after
CHART_ENTRIES: Final = 500  # the latest entries read, charted
TABLE_ENTRIES: Final = 50  # of those, the newest listed
EXPIRATIONS_SHOWN: Final = 50  # live grants listed, in the order they will be used
_FORM_FIELDS: Final = frozenset({"account_id", "key"})
_ACCOUNT_ID: Final = re.compile(ACCOUNT_ID_PATTERN)
_ACCOUNT_ID_RULE: Final = (
    "an account id is 1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or digit"
)

# Every answer of these pages: the policy, no sniffing, no caching (an account's figures
# for whoever holds the key), no referrer to other sites (the account id is in the address;
# not "no-referrer": a browser then sends "Origin: null" with the forms' own POSTs).
_HEADERS: Final = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class _SignInNeeded(Exception):
    """No credentials, or credentials that are not valid: answer with the sign-in form."""

    def __init__(self, message: str, clear_cookie: bool) -> None:
        super().__init__(message)
        self.message = message
        self.clear_cookie = clear_cookie


def install(app: FastAPI) -> None:
    app.add_route(LOGIN_PATH, login_form, methods=["GET"], include_in_schema=False)
    app.add_route(LOGIN_PATH, sign_in, methods=["POST"], include_in_schema=False)
    app.add_route(LOGOUT_PATH, sign_out, methods=["POST"], include_in_schema=False)
    app.add_route(ACCOUNT_PATH, account_page, methods=["GET"], include_in_schema=False)


# -- the pages --------------------------------------------------------------------------------


async def login_form(request: Request) -> Response:
    if request.url.query:
        return _query_refused(request)
    return _login(request, 200)


async def sign_in(request: Request) -> Response:
    if request.url.query:
        return _query_refused(request)
    if not _same_site(request):
        return _cross_site_refused(request)
    media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media_type != "application/x-www-form-urlencoded":
        return _error(
            request, 415, "Unsupported media type", "the sign-in form is sent as a web form"
        )
    try:
        fields = _form(await request.body())
    except ValueError as exc:
        return _login(request, 422, message=str(exc))
    account_id, key = fields["account_id"], fields["key"]
    if not _ACCOUNT_ID.fullmatch(account_id):
        return _login(request, 422, message=f"Not an account id: {_ACCOUNT_ID_RULE}.")
    if not key:
        return _login(request, 422, account_id, "Enter an API key.")
    auth = _authenticator(request)
    if auth.enabled:
        try:
            record = authenticate(auth, f"Bearer {key}", _client(request))
            authorize(record, Scope.READ, account_id)
        except Unauthenticated:
            return _login(
                request, 401, account_id, "This key is not valid: unknown, revoked or mistyped."
            )
        except Forbidden as exc:
            return _login(request, 403, account_id, f"This key cannot open the account: {exc}.")
    response = RedirectResponse(
        _root(request) + "/ui/accounts/" + quote(account_id, safe=":"), 303, _HEADERS
    )
    if auth.enabled:
        response.set_cookie(
            COOKIE_NAME,
            key,
            max_age=COOKIE_MAX_AGE_S,
            path=_root(request) + COOKIE_PATH,
            secure=_on_https(request),
            httponly=True,
            samesite="strict",
        )
    return response


async def sign_out(request: Request) -> Response:
    if request.url.query:
        return _query_refused(request)
    if not _same_site(request):
        return _cross_site_refused(request)
    response = RedirectResponse(_root(request) + LOGIN_PATH, 303, _HEADERS)
    _forget_cookie(request, response)
    return response


async def account_page(request: Request) -> Response:
    if request.url.query:
        return _query_refused(request)
    account_id = request.path_params["account_id"]
    assert isinstance(account_id, str)
    if not _ACCOUNT_ID.fullmatch(account_id):
        return _error(request, 422, "Invalid account id", f"Not an account id: {_ACCOUNT_ID_RULE}.")
    try:
        key = _caller(request)
        authorize(key, Scope.READ, account_id)
    except _SignInNeeded as need:
        page = _login(request, 401, account_id, need.message)
        page.headers["WWW-Authenticate"] = 'Bearer realm="gpu-credits"'
        if need.clear_cookie:
            _forget_cookie(request, page)
        return page
    except Forbidden as exc:
        return _error(request, 403, "Forbidden", f"{exc}.")
    ledger = request.app.state.ledger
    assert isinstance(ledger, Ledger)
    try:
        overview = await ledger.overview(account_id, EXPIRATIONS_SHOWN, CHART_ENTRIES)
    except ServiceError as exc:
        described = describe(exc)
        return _error(
            request,
            described.kind.status,
            described.kind.title,
            described.detail,
            described.headers,
        )
    return _html(200, render("account.html", **_account_values(request, overview)))


# -- what the account page shows ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntryRow:
    """One ledger entry as the table lists it."""

    sequence: int
    timestamp: int
    kind: str
    amount: str  # signed: what the entry added to or took from the credits
    details: str
    balance: int
    available: int
    debt: int
    final: bool
    revision: int


def entry_row(e: Entry, watermark: int) -> EntryRow:
    if isinstance(e, GrantEntry):
        amount = f"+{e.amount}"
        details = f"grant {e.grant_id}, expires at {e.expiry}, classes {_classes(e.resources)}"
        if e.settled_debt:
            details += f", settled debt {e.settled_debt}"
        details += f", kept {e.retained}"
        if e.name is not None:
            details += f", name: {e.name}"
    elif isinstance(e, ConsumptionEntry):
        amount = f"-{e.amount}"
        drawn = ", ".join(f"grant {a.grant_id}: {a.amount}" for a in e.allocation)
        details = f"class {e.resource or 'none'}; drawn from {drawn or 'no grant'}"
        if e.debt_added:
            details += f"; debt added {e.debt_added}"
    elif isinstance(e, ExpirationEntry):
        amount = f"-{e.amount}"
        details = f"grant {e.grant_id}'s unused rest, classes {_classes(e.resources)}"
    else:
        amount = f"-{e.amount}"
        details = f"grant {e.grant_id} voided: its remainder removed"
    return EntryRow(
        e.sequence,
        e.timestamp,
        e.kind,
        amount,
        details,
        e.available - e.debt,
        e.available,
        e.debt,
        e.timestamp < watermark,
        e.revision,
    )


def _classes(resources: tuple[str, ...] | None) -> str:
    return classes(None if resources is None else list(resources))


def _account_values(request: Request, overview: AccountOverview) -> dict[str, object]:
    view = overview.balance
    newest_first = overview.entries[::-1][:TABLE_ENTRIES]
    return {
        "root": _root(request),
        "signed_in": COOKIE_NAME in request.cookies,
        "view": view,
        "chart": chart(overview.entries),
        "older_entries": overview.older_entries,
        "grants": overview.live_grants,
        "live_grant_count": overview.live_grant_count,
        "table": [entry_row(e, view.watermark) for e in newest_first],
    }


# -- authentication ---------------------------------------------------------------------------


def _authenticator(request: Request) -> Authenticator:
    auth = request.app.state.authenticator
    assert isinstance(auth, Authenticator)
    return auth


def _client(request: Request) -> str:
    peer = request.client
    return f"{peer.host}:{peer.port}" if peer else "unknown"


def _caller(request: Request) -> KeyRecord | None:
    """The key of the request: its ``Authorization`` header, as the API takes it, else the
    sign-in cookie; None when authentication is off."""
    auth = _authenticator(request)
    if not auth.enabled:
        return None
    header = request.headers.get("authorization")
    cookie = request.cookies.get(COOKIE_NAME)
    if header is None and not cookie:
        raise _SignInNeeded("", clear_cookie=False)  # a first visit: not worth a log line
    try:
        return authenticate(
            auth, header if header is not None else f"Bearer {cookie}", _client(request)
        )
    except Unauthenticated as exc:
        if header is not None:
            raise _SignInNeeded(f"The Authorization header was refused: {exc}.", False) from None
        raise _SignInNeeded(
            "The key this browser kept is not valid any more (revoked?): sign in again.", True
        ) from None


def _same_site(request: Request) -> bool:
    """Whether a POST comes from these pages (or from no page: a tool like curl), as the
    browser tells: ``Sec-Fetch-Site`` (every current browser), else ``Origin``."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = request.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc == request.headers.get("host")


def _on_https(request: Request) -> bool:
    """Behind a proxy that ends TLS the request may look like http (unless uvicorn trusts
    its forwarded headers): the browser's ``Origin`` says which scheme the page is on."""
    origin = request.headers.get("origin", "")
    return request.url.scheme == "https" or origin.startswith("https://")


def _forget_cookie(request: Request, response: Response) -> None:
    response.delete_cookie(
        COOKIE_NAME,
        path=_root(request) + COOKIE_PATH,
        secure=_on_https(request),
        httponly=True,
        samesite="strict",
    )


def _form(body: bytes) -> dict[str, str]:
    """The sign-in form's two fields, each exactly once (surrounding spaces from pasting
    dropped: neither an account id nor a key holds any)."""
    try:
        pairs = parse_qsl(
            body.decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=True,
            errors="strict",
            max_num_fields=8,
        )
    except ValueError:
        raise ValueError("The form could not be read.") from None
    names = [name for name, _ in pairs]
    if set(names) != _FORM_FIELDS or len(names) != len(_FORM_FIELDS):
        raise ValueError("The form takes an account id and a key, once each.")
    return {name: value.strip() for name, value in pairs}


# -- answers ----------------------------------------------------------------------------------


def _root(request: Request) -> str:
    root = request.scope.get("root_path", "")
    assert isinstance(root, str)
    return root.rstrip("/")


def _html(status: int, html: str, headers: dict[str, str] | None = None) -> HTMLResponse:
    return HTMLResponse(html, status, {**_HEADERS, **(headers or {})})


def _login(request: Request, status: int, account_id: str = "", message: str = "") -> HTMLResponse:
    html = render(
        "login.html",
        root=_root(request),
        signed_in=False,
        account_id=account_id,
        message=message,
        cookie_hours=COOKIE_MAX_AGE_S // 3600,
        auth_enabled=_authenticator(request).enabled,
    )
    return _html(status, html)


def _error(
    request: Request,
    status: int,
    title: str,
    detail: str,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    html = render(
        "error.html",
        root=_root(request),
        signed_in=COOKIE_NAME in request.cookies,
        status=status,
        title=title,
        detail=detail,
    )
    return _html(status, html, headers)


def _query_refused(request: Request) -> HTMLResponse:
    return _error(
        request,
        422,
        "Query parameters refused",
        "These pages take no query parameters. An API key belongs in the sign-in form or an "
        "Authorization header, never in a URL (browsers, proxies and servers keep URLs in "
        "their history and logs): if you sent one this way, revoke it.",
    )


def _cross_site_refused(request: Request) -> HTMLResponse:
    return _error(
        request, 403, "Cross-site request refused", "Sign in and out from these pages only."
    )
