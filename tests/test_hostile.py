"""The hostile-input catalogue (issue 4), against a real ``gpu-credits serve`` process.

One table-driven test: every row is a bad request, sent as raw bytes (httpx with ``content=``
and explicit headers, or a raw socket for what httpx would normalise or refuse to send:
path tricks, bad framing, control characters). Each must be answered with a 4xx RFC 9457
problem document, and the target account must be exactly as before: its ledger, balance and
live grants for the seeded account; still 404 for a fresh one.

Then the limits that need their own server: the slow-body and slow-header timeouts (408),
the over-limit 503, and the caps on live grants per account and on accounts (409). Last, in
process: bodies that used to stall the service or answer 500 (a huge body with one duplicate
member, duplicate names that are lone surrogates) are quick 400s.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server_process import ServerProcess

JSON = dict[str, Any]
MAX = 2**53 - 1
PROBLEM_JSON = "application/problem+json"
VICTIM = "victim"
SEED_TS = 10  # the victim's clock: every hostile body below uses a later timestamp, so a
# request that slipped through validation would change the ledger
BODY_CAP = 64 * 1024  # GPU_CREDITS_MAX_BODY_BYTES default
URL_CAP = 8 * 1024  # GPU_CREDITS_MAX_URL_BYTES default
HEADER_CAP = 16 * 1024  # GPU_CREDITS_MAX_HEADER_BYTES default
IO_TIMEOUT_S = 15.0


# -- a raw HTTP/1.1 client -----------------------------------------------------------------


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    version, status, *_ = lines[0].split(" ", 2)
    assert version.startswith("HTTP/1."), lines[0]
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(status), headers


def _dechunk(data: bytes) -> bytes | None:
    """The body of a complete chunked message, or None while incomplete."""
    out = b""
    while True:
        size_end = data.find(b"\r\n")
        if size_end < 0:
            return None
        size = int(data[:size_end].split(b";")[0], 16)
        start = size_end + 2
        if size == 0:
            return out
        if len(data) < start + size + 2:
            return None
        out += data[start : start + size]
        data = data[start + size + 2 :]


def _complete(buffer: bytes, eof: bool) -> RawResponse | None:
    head_end = buffer.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    status, headers = _parse_head(buffer[:head_end])
    rest = buffer[head_end + 4 :]
    if "content-length" in headers:
        length = int(headers["content-length"])
        return RawResponse(status, headers, rest[:length]) if len(rest) >= length else None
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _dechunk(rest)
        return None if body is None else RawResponse(status, headers, body)
    return RawResponse(status, headers, rest) if eof else None


def raw_exchange(
    port: int, request: bytes, *, stop_sending_after: int | None = None
) -> RawResponse:
    """Send ``request`` (or only its first ``stop_sending_after`` bytes) and read one
    response. The response is read while sending, so a server that answers early (413 on a
    Content-Length it will not read) and closes is still heard."""
    to_send = request if stop_sending_after is None else request[:stop_sending_after]
    received = b""
    deadline = time.monotonic() + IO_TIMEOUT_S
    with socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S) as sock:
        sock.setblocking(False)
        sent = 0
        sending = True
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no complete response within {IO_TIMEOUT_S} s: {received!r}"
            want_write = [sock] if sending and sent < len(to_send) else []
            readable, writable, _ = select.select([sock], want_write, [], remaining)
            if writable:
                try:
                    sent += sock.send(to_send[sent : sent + 65536])
                except (BrokenPipeError, ConnectionResetError):
                    sending = False
            if readable:
                try:
                    chunk = sock.recv(65536)
                except ConnectionResetError:
                    chunk = b""
                received += chunk
                done = _complete(received, eof=not chunk)
                if done is not None:
                    return done
                assert chunk, f"connection closed before a complete response: {received!r}"


def build_request(
    method: str, target: str, headers: list[tuple[str, str]], body: bytes | None
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", "Connection: close"]
    if not any(name.lower() == "host" for name, _ in headers):
        lines.append("Host: 127.0.0.1")
    lines += [f"{name}: {value}" for name, value in headers]
    return "\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + (body or b"")


# -- the catalogue -------------------------------------------------------------------------

JSON_CT: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)


@dataclass(frozen=True)
class Hostile:
    id: str
    method: str
    # Request target, sent verbatim; "{fresh}" is replaced by an account id never used.
    target: str
    body: bytes | None = None
    status: int = 422
    headers: tuple[tuple[str, str], ...] = JSON_CT
    # Whose state must be unchanged: the seeded victim, or a fresh account (must stay 404).
    account: str = VICTIM
    raw: bool = False  # raw socket instead of httpx
    # raw only: send this Content-Length instead of the body's length (None: the real one;
    # "" to send none), or send the body chunked
    content_length: str | None = None
    chunked: bool = False
    marks: tuple[pytest.MarkDecorator, ...] = field(default=())

    def fresh_account(self) -> str:
        return f"fresh-{self.id}"

    def resolved_target(self) -> str:
        return self.target.replace("{fresh}", self.fresh_account())

    def target_account(self) -> str:
        return self.fresh_account() if self.account == "{fresh}" else self.account


def body(**members: Any) -> bytes:
    return json.dumps(members).encode()


def grant_body(amount: Any = 5, timestamp: Any = 20, expiry: Any = 100, **extra: Any) -> bytes:
    return body(amount=amount, timestamp=timestamp, expiry=expiry, **extra)


def text_body(text: str) -> bytes:
    return text.encode()


GRANTS = f"/v1/accounts/{VICTIM}/grants"
CONSUME = f"/v1/accounts/{VICTIM}/consumptions"
BALANCE = f"/v1/accounts/{VICTIM}/balance"
LEDGER = f"/v1/accounts/{VICTIM}/ledger"
FRESH_GRANTS = "/v1/accounts/{fresh}/grants"
FRESH = "{fresh}"


class NotAProblemDocument(AssertionError):
    """The answer is not an RFC 9457 problem document (distinct, so that an expected failure
    of this kind cannot hide any other)."""


DEEP = b'{"amount": ' + b"[" * 10_000 + b"]" * 10_000 + b', "timestamp": 20, "expiry": 100}'
PADDED = b'{"amount": 5, "timestamp": 20, "expiry": 100, "pad": "' + b"x" * (BODY_CAP + 16_384)
PADDED += b'"}'

CATALOGUE: list[Hostile] = [
    # -- wrong types --------------------------------------------------------------------------
    Hostile("amount-string", "POST", GRANTS, grant_body(amount="five")),
    Hostile("amount-numeric-string", "POST", GRANTS, grant_body(amount="5")),
    Hostile("amount-bool-true", "POST", GRANTS, grant_body(amount=True)),
    Hostile("amount-float-integral", "POST", GRANTS, grant_body(amount=5.0)),
    Hostile("amount-float-fraction", "POST", GRANTS, grant_body(amount=5.5)),
    Hostile(
        "amount-exponent", "POST", GRANTS, text_body('{"amount":5e0,"timestamp":20,"expiry":100}')
    ),
    Hostile("amount-null", "POST", GRANTS, grant_body(amount=None)),
    Hostile("amount-object", "POST", GRANTS, grant_body(amount={"value": 5})),
    Hostile("amount-array", "POST", GRANTS, grant_body(amount=[5])),
    Hostile("timestamp-bool-false", "POST", GRANTS, grant_body(timestamp=False)),
    Hostile("timestamp-numeric-string", "POST", GRANTS, grant_body(timestamp="20")),
    Hostile("expiry-float", "POST", GRANTS, grant_body(expiry=100.0)),
    Hostile("expiry-null", "POST", GRANTS, grant_body(expiry=None)),
    Hostile("consume-amount-bool", "POST", CONSUME, body(amount=True, timestamp=20)),
    Hostile("consume-amount-float", "POST", CONSUME, body(amount=1.0, timestamp=20)),
    Hostile("consume-timestamp-string", "POST", CONSUME, body(amount=1, timestamp="20")),
    # -- out of range -------------------------------------------------------------------------
    Hostile("amount-2pow53", "POST", GRANTS, grant_body(amount=2**53)),
    Hostile("amount-10pow100", "POST", GRANTS, grant_body(amount=10**100)),
    Hostile(
        "amount-5000-digits",
        "POST",
        GRANTS,
        text_body('{"amount": ' + "9" * 5000 + ', "timestamp": 20, "expiry": 100}'),
    ),
    Hostile("amount-minus-10pow100", "POST", GRANTS, grant_body(amount=-(10**100))),
    Hostile("amount-negative", "POST", GRANTS, grant_body(amount=-5)),
    Hostile("amount-zero", "POST", GRANTS, grant_body(amount=0)),
    Hostile("timestamp-negative", "POST", GRANTS, grant_body(timestamp=-1)),
    Hostile("timestamp-2pow53", "POST", GRANTS, grant_body(timestamp=2**53, expiry=MAX)),
    Hostile("expiry-2pow53", "POST", GRANTS, grant_body(expiry=2**53)),
    Hostile("expiry-equals-timestamp", "POST", GRANTS, grant_body(timestamp=20, expiry=20)),
    Hostile("expiry-before-timestamp", "POST", GRANTS, grant_body(timestamp=20, expiry=15)),
    Hostile("total-past-2pow53-1", "POST", GRANTS, grant_body(amount=MAX)),
    Hostile("consume-amount-negative", "POST", CONSUME, body(amount=-1, timestamp=20)),
    Hostile("consume-amount-zero", "POST", CONSUME, body(amount=0, timestamp=20)),
    Hostile("consume-amount-2pow53", "POST", CONSUME, body(amount=2**53, timestamp=20)),
    Hostile("timestamp-regression", "POST", GRANTS, grant_body(timestamp=SEED_TS - 1), status=409),
    Hostile("consume-timestamp-regression", "POST", CONSUME, body(amount=1, timestamp=0), 409),
    # -- shape of the body --------------------------------------------------------------------
    Hostile("missing-field", "POST", GRANTS, body(amount=5, timestamp=20)),
    Hostile("unknown-field", "POST", GRANTS, grant_body(bonus=1_000_000)),
    Hostile("consume-with-expiry", "POST", CONSUME, body(amount=1, timestamp=20, expiry=30)),
    Hostile("body-array", "POST", GRANTS, text_body("[5, 20, 100]")),
    Hostile("body-number", "POST", GRANTS, text_body("5")),
    Hostile("body-string", "POST", GRANTS, text_body('"grant"')),
    Hostile("body-null", "POST", GRANTS, text_body("null")),
    Hostile("empty-body", "POST", GRANTS, b""),
    Hostile("empty-body-fresh-account", "POST", FRESH_GRANTS, b"", account=FRESH),
    Hostile("no-body-at-all", "POST", GRANTS, None, raw=True, content_length=""),
    # -- not JSON, or JSON a careful ledger refuses ----------------------------------------
    Hostile("malformed-json", "POST", GRANTS, text_body('{"amount": 5,'), status=400),
    Hostile(
        "duplicate-keys",
        "POST",
        GRANTS,
        text_body('{"amount": 1, "amount": 1000000, "timestamp": 20, "expiry": 100}'),
        status=400,
    ),
    Hostile(
        "duplicate-keys-fresh-account",
        "POST",
        FRESH_GRANTS,
        text_body('{"amount": 1, "timestamp": 20, "expiry": 100, "expiry": 200}'),
        status=400,
        account=FRESH,
    ),
    Hostile(
        "nan",
        "POST",
        GRANTS,
        text_body('{"amount": NaN, "timestamp": 20, "expiry": 100}'),
        status=400,
    ),
    Hostile(
        "infinity",
        "POST",
        GRANTS,
        text_body('{"amount": Infinity, "timestamp": 20, "expiry": 100}'),
        status=400,
    ),
    Hostile(
        "invalid-utf8",
        "POST",
        GRANTS,
        b'{"amount": 5, "timestamp": 20, "expiry": 100, "note": "\xff\xfe"}',
        status=400,
    ),
    Hostile(
        "utf16-body",
        "POST",
        GRANTS,
        '{"amount": 5, "timestamp": 20, "expiry": 100}'.encode("utf-16"),
        status=400,
    ),
    Hostile("deeply-nested", "POST", GRANTS, DEEP, status=400),
    Hostile("deeply-nested-fresh-account", "POST", FRESH_GRANTS, DEEP, 400, account=FRESH),
    # -- size -----------------------------------------------------------------------------
    Hostile("huge-body-content-length", "POST", GRANTS, PADDED, status=413, raw=True),
    Hostile("huge-body-chunked", "POST", GRANTS, PADDED, status=413, raw=True, chunked=True),
    Hostile("huge-body-fresh-account", "POST", FRESH_GRANTS, PADDED, 413, raw=True, account=FRESH),
    Hostile(
        "huge-content-length-no-body",
        "POST",
        GRANTS,
        b"",
        status=413,
        raw=True,
        content_length=str(10**15),
    ),
    # -- content types --------------------------------------------------------------------
    Hostile("content-type-missing", "POST", GRANTS, grant_body(), status=415, headers=()),
    Hostile(
        "content-type-text-plain",
        "POST",
        GRANTS,
        grant_body(),
        status=415,
        headers=(("Content-Type", "text/plain"),),
    ),
    Hostile(
        "content-type-form",
        "POST",
        GRANTS,
        b"amount=5&timestamp=20&expiry=100",
        status=415,
        headers=(("Content-Type", "application/x-www-form-urlencoded"),),
    ),
    Hostile(
        "content-type-multipart",
        "POST",
        GRANTS,
        b'--b\r\nContent-Disposition: form-data; name="amount"\r\n\r\n5\r\n--b--\r\n',
        status=415,
        headers=(("Content-Type", "multipart/form-data; boundary=b"),),
    ),
    Hostile(
        "content-type-json-latin1",
        "POST",
        GRANTS,
        grant_body(),
        status=415,
        headers=(("Content-Type", "application/json; charset=latin-1"),),
    ),
    Hostile(
        "content-type-json-suffix",
        "POST",
        GRANTS,
        grant_body(),
        status=415,
        headers=(("Content-Type", "application/merge-patch+json"),),
    ),
    Hostile(
        "content-type-missing-fresh-account",
        "POST",
        FRESH_GRANTS,
        grant_body(),
        status=415,
        headers=(),
        account=FRESH,
    ),
    # -- account ids ----------------------------------------------------------------------
    Hostile("account-id-129-chars", "POST", "/v1/accounts/" + "a" * 129 + "/grants", grant_body()),
    Hostile(
        "account-id-129-chars-prefix-untouched",
        "POST",
        "/v1/accounts/" + "b" * 129 + "/grants",
        grant_body(),
        account="b" * 128,
    ),
    Hostile("account-id-leading-dash", "POST", "/v1/accounts/-victim/grants", grant_body()),
    Hostile("account-id-leading-dot", "POST", "/v1/accounts/.victim/grants", grant_body()),
    Hostile("account-id-space", "POST", "/v1/accounts/vic%20tim/grants", grant_body(), raw=True),
    Hostile(
        "account-id-trailing-space", "POST", "/v1/accounts/victim%20/grants", grant_body(), raw=True
    ),
    Hostile(
        "account-id-unicode", "POST", "/v1/accounts/v%C3%AFctim/grants", grant_body(), raw=True
    ),
    Hostile("account-id-semicolon", "POST", "/v1/accounts/victim;x/grants", grant_body(), raw=True),
    Hostile("account-id-empty", "POST", "/v1/accounts//grants", grant_body(), 404, raw=True),
    # -- path tricks (raw: httpx would normalise them) ------------------------------------
    Hostile("path-dotdot", "GET", "/v1/accounts/../balance", None, raw=True),
    Hostile("path-dotdot-post", "POST", "/v1/accounts/../grants", grant_body(), raw=True),
    Hostile(
        "path-dotdot-into-victim",
        "POST",
        "/v1/accounts/other/../victim/grants",
        grant_body(),
        404,
        raw=True,
    ),
    Hostile("path-encoded-dotdot", "GET", "/v1/accounts/%2e%2e/balance", None, raw=True),
    Hostile(
        "path-encoded-slash", "POST", "/v1/accounts/vic%2Ftim/grants", grant_body(), 404, raw=True
    ),
    Hostile("path-encoded-nul", "POST", "/v1/accounts/victim%00/grants", grant_body(), raw=True),
    Hostile(
        "path-double-slash-start",
        "POST",
        "//v1/accounts/victim/grants",
        grant_body(),
        404,
        raw=True,
    ),
    Hostile(
        "path-double-slash-middle",
        "POST",
        "/v1//accounts/victim/grants",
        grant_body(),
        404,
        raw=True,
    ),
    Hostile(
        "path-double-slash-end", "POST", "/v1/accounts/victim//grants", grant_body(), 404, raw=True
    ),
    Hostile(
        "path-trailing-slash",
        "POST",
        "/v1/accounts/victim/grants/",
        grant_body(),
        404,
        raw=True,
        headers=(*JSON_CT, ("Host", "evil.example")),
    ),
    Hostile("path-backslash", "POST", "/v1/accounts/victim%5Cgrants", grant_body(), 404, raw=True),
    Hostile(
        "path-absolute-form",
        "POST",
        "http://127.0.0.1/v1/accounts/vic%2Ftim/grants",
        grant_body(),
        404,
        raw=True,
    ),
    # -- wrong methods --------------------------------------------------------------------
    Hostile("method-put-grants", "PUT", GRANTS, grant_body(), status=405),
    Hostile("method-delete-grants", "DELETE", GRANTS, None, status=405),
    Hostile("method-patch-consumptions", "PATCH", CONSUME, body(amount=1, timestamp=20), 405),
    Hostile("method-get-consumptions", "GET", CONSUME, None, status=405),
    Hostile("method-post-balance", "POST", BALANCE, body(timestamp=20), status=405),
    Hostile("method-delete-ledger", "DELETE", LEDGER, None, status=405),
    Hostile("method-options-grants", "OPTIONS", GRANTS, None, status=405),
    Hostile("method-post-healthz", "POST", "/healthz", body(), status=405),
    # -- query parameters -----------------------------------------------------------------
    Hostile("query-timestamp-negative", "GET", BALANCE + "?timestamp=-1", None),
    Hostile("query-timestamp-float", "GET", BALANCE + "?timestamp=20.0", None),
    Hostile("query-timestamp-exponent", "GET", BALANCE + "?timestamp=2e1", None),
    Hostile("query-timestamp-plus", "GET", BALANCE + "?timestamp=%2B20", None, raw=True),
    Hostile("query-timestamp-leading-zero", "GET", BALANCE + "?timestamp=020", None),
    Hostile("query-timestamp-2pow53", "GET", BALANCE + f"?timestamp={2**53}", None),
    Hostile("query-timestamp-5000-digits", "GET", BALANCE + "?timestamp=" + "9" * 5000, None),
    Hostile("query-timestamp-empty", "GET", BALANCE + "?timestamp=", None),
    Hostile("query-timestamp-repeated", "GET", BALANCE + "?timestamp=20&timestamp=30", None),
    Hostile("query-unknown-parameter", "GET", BALANCE + "?timestmap=20", None),
    Hostile("query-on-grant", "POST", GRANTS + "?amount=1000", grant_body(amount=1)),
    Hostile("query-ledger-limit-zero", "GET", LEDGER + "?limit=0", None),
    Hostile("query-ledger-limit-too-big", "GET", LEDGER + "?limit=1001", None),
    Hostile("query-grant-id-zero", "GET", GRANTS + "/0", None),
    Hostile("query-grant-id-huge", "GET", GRANTS + "/" + "9" * 30, None),
    Hostile(
        "query-fresh-account-read-at-time",
        "GET",
        "/v1/accounts/{fresh}/balance?timestamp=5",
        None,
        404,
        account=FRESH,
    ),
    # -- URL and header caps --------------------------------------------------------------
    Hostile("url-over-cap", "GET", BALANCE + "?timestamp=" + "1" * URL_CAP, None, status=414),
    Hostile(
        "url-over-cap-path",
        "POST",
        "/v1/accounts/" + "a" * URL_CAP + "/grants",
        grant_body(),
        414,
        raw=True,
    ),
    Hostile(
        "header-over-cap",
        "POST",
        GRANTS,
        grant_body(),
        status=431,
        headers=(*JSON_CT, ("X-Padding", "x" * HEADER_CAP)),
    ),
    Hostile(
        "many-headers-over-cap",
        "POST",
        GRANTS,
        grant_body(),
        status=431,
        headers=(*JSON_CT, *((f"X-Pad-{i}", "y" * 100) for i in range(200))),
    ),
    # -- framing ------------------------------------------------------------------------
    Hostile(
        "content-length-not-a-number",
        "POST",
        GRANTS,
        grant_body(),
        status=400,
        raw=True,
        content_length="abc",
    ),
    Hostile(
        "content-length-negative",
        "POST",
        GRANTS,
        grant_body(),
        status=400,
        raw=True,
        content_length="-1",
    ),
    Hostile(
        "content-length-19-digits",
        "POST",
        GRANTS,
        grant_body(),
        status=400,
        raw=True,
        content_length="9" * 19,
    ),
    Hostile(
        "content-length-shorter-than-body",
        "POST",
        GRANTS,
        grant_body(),
        status=400,
        raw=True,
        content_length="10",
    ),
    Hostile(
        "content-length-zero-with-body",
        "POST",
        GRANTS,
        grant_body(),
        raw=True,
        content_length="0",
    ),
    Hostile(
        "content-length-conflicting",
        "POST",
        GRANTS,
        grant_body(),
        status=400,
        raw=True,
        headers=(*JSON_CT, ("Content-Length", "3")),
    ),
    Hostile(
        "content-length-and-chunked",
        "POST",
        GRANTS,
        grant_body(),
        status=400,
        raw=True,
        chunked=True,
        headers=(*JSON_CT, ("Content-Length", "5")),
    ),
    # -- Idempotency-Key ------------------------------------------------------------------
    Hostile(
        "idempotency-key-tab",
        "POST",
        GRANTS,
        grant_body(),
        headers=(*JSON_CT, ("Idempotency-Key", "retry\t1")),
        raw=True,
    ),
    Hostile(
        "idempotency-key-control-char",
        "POST",
        GRANTS,
        grant_body(),
        status=400,
        headers=(*JSON_CT, ("Idempotency-Key", "retry\x011")),
        raw=True,
    ),
    Hostile(
        "idempotency-key-latin1",
        "POST",
        GRANTS,
        grant_body(),
        headers=(*JSON_CT, ("Idempotency-Key", "retry-\xe9")),
        raw=True,
    ),
    Hostile(
        "idempotency-key-256-chars",
        "POST",
        GRANTS,
        grant_body(),
        headers=(*JSON_CT, ("Idempotency-Key", "k" * 256)),
    ),
    Hostile(
        "idempotency-key-empty",
        "POST",
        GRANTS,
        grant_body(),
        headers=(*JSON_CT, ("Idempotency-Key", "")),
        raw=True,
    ),
]


# -- the server and the state snapshots ----------------------------------------------------


@dataclass(frozen=True)
class Service:
    server: ServerProcess
    http: httpx.Client


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    server = ServerProcess(tmp_path_factory.mktemp("hostile") / "data")
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=IO_TIMEOUT_S) as http:
            seed(http, VICTIM)
            yield Service(server, http)
    finally:
        server.stop()


def seed(http: httpx.Client, account: str) -> None:
    """A grant, a consumption and a second grant, all at SEED_TS."""
    url = f"/v1/accounts/{account}"
    r = http.post(f"{url}/grants", json={"amount": 100, "timestamp": 0, "expiry": 1_000_000})
    assert r.status_code == 201, r.text
    r = http.post(f"{url}/consumptions", json={"amount": 30, "timestamp": 5})
    assert r.status_code == 200, r.text
    r = http.post(f"{url}/grants", json={"amount": 7, "timestamp": SEED_TS, "expiry": 50})
    assert r.status_code == 201, r.text


ABSENT = "404: no such account"


def snapshot(http: httpx.Client, account: str) -> Any:
    """Everything observable about ``account`` without changing it (reads without a
    timestamp change nothing), or ABSENT."""
    url = f"/v1/accounts/{account}"
    balance = http.get(f"{url}/balance")
    if balance.status_code == 404:
        ledger = http.get(f"{url}/ledger")
        assert ledger.status_code == 404, ledger.text
        return ABSENT
    assert balance.status_code == 200, balance.text
    ledger = http.get(f"{url}/ledger", params={"limit": "1000"})
    assert ledger.status_code == 200, ledger.text
    grants = http.get(f"{url}/grants")
    assert grants.status_code == 200, grants.text
    return {"balance": balance.json(), "ledger": ledger.json(), "grants": grants.json()}


def assert_problem_document(status: int, headers: dict[str, str], payload: bytes) -> None:
    try:
        content_type = headers.get("content-type", "")
        assert content_type.split(";")[0].strip() == PROBLEM_JSON, content_type
        doc = json.loads(payload)
        assert isinstance(doc, dict), doc
        for member in ("type", "title", "detail"):
            assert isinstance(doc.get(member), str), doc
            assert doc[member], doc
        assert doc.get("status") == status, doc
    except (AssertionError, ValueError) as exc:
        raise NotAProblemDocument(f"{status} {headers} {payload[:300]!r}: {exc}") from exc


def send(service: Service, case: Hostile) -> tuple[int, dict[str, str], bytes]:
    target = case.resolved_target()
    if not case.raw:
        response = service.http.request(
            case.method, target, content=case.body, headers=list(case.headers)
        )
        return response.status_code, dict(response.headers), response.content
    headers = list(case.headers)
    payload = case.body
    if case.chunked:
        assert payload is not None
        headers.append(("Transfer-Encoding", "chunked"))
        payload = b"".join(
            b"%x\r\n%s\r\n" % (len(payload[i : i + 4096]), payload[i : i + 4096])
            for i in range(0, len(payload), 4096)
        )
        payload += b"0\r\n\r\n"
    elif case.content_length is not None:
        if case.content_length:
            headers.append(("Content-Length", case.content_length))
    elif payload is not None:
        headers.append(("Content-Length", str(len(payload))))
    port = service.server.port
    raw = raw_exchange(port, build_request(case.method, target, headers, payload))
    return raw.status, raw.headers, raw.body


def _param(case: Hostile) -> Any:
    return pytest.param(case, id=case.id, marks=case.marks)


def test_catalogue_is_large_and_distinct() -> None:
    ids = [c.id for c in CATALOGUE]
    assert len(ids) == len(set(ids))
    assert len(CATALOGUE) >= 30


@pytest.mark.parametrize("case", [_param(c) for c in CATALOGUE])
def test_hostile_request_is_refused_and_changes_nothing(service: Service, case: Hostile) -> None:
    account = case.target_account()
    before = snapshot(service.http, account)
    victim_before = snapshot(service.http, VICTIM)
    if case.account == FRESH:
        assert before == ABSENT

    status, headers, payload = send(service, case)

    assert 400 <= status < 500, (status, payload[:300])
    assert status == case.status, (status, payload[:300])
    assert snapshot(service.http, account) == before
    assert snapshot(service.http, VICTIM) == victim_before
    assert_problem_document(status, headers, payload)
    if status == 405:
        assert headers.get("allow"), headers


# -- limits that need a server of their own ------------------------------------------------


@pytest.fixture(scope="module")
def slow_body_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("slow") / "data", env={"GPU_CREDITS_BODY_TIMEOUT_S": "1"}
    )
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=IO_TIMEOUT_S) as http:
            seed(http, VICTIM)
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_slow_body_times_out_with_408(slow_body_server: ServerProcess, chunked: bool) -> None:
    with httpx.Client(base_url=slow_body_server.base_url, timeout=IO_TIMEOUT_S) as http:
        before = snapshot(http, VICTIM)
        partial = b'{"amount": 5, '
        if chunked:
            framing = [("Transfer-Encoding", "chunked")]
            sent = b"%x\r\n%s\r\n" % (len(partial), partial)  # and never the last chunk
        else:
            framing = [("Content-Length", "100")]
            sent = partial  # 14 of 100 bytes
        request = build_request("POST", GRANTS, [*JSON_CT, *framing], sent)
        started = time.monotonic()
        response = raw_exchange(slow_body_server.port, request)
        elapsed = time.monotonic() - started
        assert response.status == 408, response.body
        assert_problem_document(408, response.headers, response.body)
        assert 0.9 <= elapsed < IO_TIMEOUT_S, elapsed
        assert snapshot(http, VICTIM) == before


def test_slow_headers_are_cut_off_and_idle_connections_make_room(tmp_path: Path) -> None:
    """Connections that never finish their headers used to be kept forever and, at
    limit_concurrency, lock everyone out. Now they are cut off (408), and at the limit the
    connections that wait for nothing are closed, oldest first, to serve a complete request
    (the 503 problem document for busy connections: tests/test_connection_limits.py)."""
    env = {"GPU_CREDITS_HEADER_TIMEOUT_S": "1", "GPU_CREDITS_LIMIT_CONCURRENCY": "3"}
    server = ServerProcess(tmp_path / "data", storage="memory", env=env)
    server.start()
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
    slow = socket.create_connection(("127.0.0.1", server.port))
    try:
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")  # and never the rest
        # Three open (the limit): the two oldest waiting ones are closed to serve this.
        assert httpx.get(f"{server.base_url}/healthz").status_code == 200
        for sock in idle:
            sock.settimeout(30)  # a bound on the wait, not a sleep
            assert sock.recv(4096) == b""
        slow.settimeout(30)  # a bound on the wait, not a sleep: the answer comes at 1 s
        answer = slow.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"headers-timeout" in answer
    finally:
        for s in [*idle, slow]:
            s.close()
        server.stop()


@pytest.fixture
def capped_server(tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path / "data",
        env={
            "GPU_CREDITS_MAX_LIVE_GRANTS_PER_ACCOUNT": "3",
            "GPU_CREDITS_MAX_ACCOUNTS": "2",
        },
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _grant(http: httpx.Client, account: str, amount: int, ts: int, expiry: int) -> httpx.Response:
    body = {"amount": amount, "timestamp": ts, "expiry": expiry}
    return http.post(f"/v1/accounts/{account}/grants", json=body)


def _assert_409(response: httpx.Response, slug: str) -> JSON:
    assert response.status_code == 409, response.text
    assert_problem_document(409, dict(response.headers), response.content)
    doc: JSON = response.json()
    assert doc["type"].endswith(slug), doc
    return doc


def test_live_grant_and_account_limits(capped_server: ServerProcess) -> None:
    with httpx.Client(base_url=capped_server.base_url, timeout=IO_TIMEOUT_S) as http:
        for i, expiry in enumerate((100, 200, 300)):
            assert _grant(http, "a", 10, i, expiry).status_code == 201
        before = snapshot(http, "a")

        # a fourth live grant: refused, nothing changes (not even the account's clock)
        doc = _assert_409(_grant(http, "a", 10, 50, 400), "live-grant-limit")
        assert "3" in doc["detail"]
        assert snapshot(http, "a") == before

        # a grant used up is no longer live: room for one more, and then the cap again
        consumed = http.post("/v1/accounts/a/consumptions", json={"amount": 10, "timestamp": 50})
        assert consumed.status_code == 200, consumed.text
        assert _grant(http, "a", 10, 50, 400).status_code == 201
        full = snapshot(http, "a")
        _assert_409(_grant(http, "a", 10, 60, 400), "live-grant-limit")
        assert snapshot(http, "a") == full

        # an expired grant is no longer live either (expiry 200 is over at t=200)
        assert _grant(http, "a", 10, 200, 500).status_code == 201
        after_a = snapshot(http, "a")
        assert len(after_a["grants"]["grants"]) == 3
        _assert_409(_grant(http, "a", 10, 200, 600), "live-grant-limit")
        assert snapshot(http, "a") == after_a

        # accounts: "a" and "b" fit, "c" does not, whichever way it would be created
        assert _grant(http, "b", 10, 0, 100).status_code == 201
        b_before = snapshot(http, "b")
        _assert_409(_grant(http, "c", 10, 0, 100), "account-limit")
        consume_c = http.post("/v1/accounts/c/consumptions", json={"amount": 1, "timestamp": 0})
        _assert_409(consume_c, "account-limit")
        assert snapshot(http, "c") == ABSENT
        assert snapshot(http, "a") == after_a
        assert snapshot(http, "b") == b_before
        # existing accounts keep working at the cap
        assert _grant(http, "b", 1, 1, 100).status_code == 201


# -- strict JSON, in process ---------------------------------------------------------------


@pytest.mark.timeout(120)
async def test_a_huge_body_with_one_duplicate_member_is_a_quick_400(
    keyed: tuple[httpx.AsyncClient, str, str],
) -> None:
    """The duplicate-member check is linear: one large body used to stall the service."""
    client, key, _ = keyed
    members = ",".join(f'"k{i}":0' for i in range(300_000))  # about 3.3 MB, under the cap
    body = ("{" + members + ',"k0":1}').encode()
    r = await client.post(
        "/v1/batch",
        content=body,
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
    )
    assert r.status_code == 400, r.text
    assert "duplicate member" in r.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/accounts/a/grants", "/v1/batch"])
async def test_duplicate_names_with_lone_surrogates_are_400_not_500(
    keyed: tuple[httpx.AsyncClient, str, str], path: str
) -> None:
    client, key, _ = keyed
    r = await client.post(
        path,
        content=b'{"\\ud800":1,"\\ud800":2}',
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
    )
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith(PROBLEM_JSON)
    json.loads(r.content)  # a well-formed document
