"""uvicorn's HTTP protocol (httptools), hardened where the app cannot reach: everything here
happens before a request exists, or instead of it.

- Requests it cannot parse (a bad Content-Length, conflicting framing headers, control
  characters in a header or the path) are answered with a problem document, not plain text.
- A client that opens a connection, or starts a request, and then dribbles its headers is cut
  off after ``header_timeout_s`` (408). uvicorn's keep-alive timer only runs between requests.
- The request head is measured as it arrives: a URL past ``max_url_bytes`` (414) or a header
  section past ``max_header_bytes`` (431) is refused and the connection closed while the head
  is still incomplete, so one connection holds at most the cap plus one socket read. (httptools
  buffers a header field until it ends, and uvicorn the URL; neither has a cap of its own.)
  The trailer fields of a chunked body are buffered the same way and get the same cap.
- One client address holds at most ``max_connections_per_client`` connections; one more is
  answered 429 and closed at once (IPv6 clients count per /64, what one host usually owns).
- Near ``limit_concurrency``, connections that wait for nothing (idle keep-alive, or a request
  head not yet complete) are closed, oldest first, to make room for new connections and for
  requests whose headers are complete; a complete request is refused (503) only when the
  connections left are all busy with requests. nginx drains its idle keep-alive connections
  the same way when it runs out of connections. Without this, connections that never finish
  their headers fill the limit and every real request is refused until they time out.

The request never reaches the app in any of these cases (one refused for its trailers has,
but it ends as a disconnect before its body is complete), so nothing changes.

Configuration comes from ``Settings`` when the server is built (``protocol_factory``): a
``functools.partial`` of the class with a picklable ``ProtocolLimits``, which uvicorn pickles
with its config into each ``--workers`` process. Nothing is read or patched at import time.
"""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import json
import logging
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from app.api.limits import BODY_RECEIVED, HEADERS_TOO_LARGE, URL_TOO_LONG
from app.api.problems import PROBLEM_MEDIA_TYPE, ProblemType
from app.settings import Settings

MALFORMED_HTTP = ProblemType("malformed-http", "Request is not valid HTTP", 400)
HEADERS_TIMEOUT = ProblemType("headers-timeout", "Request headers not received in time", 408)
OVERLOADED = ProblemType("overloaded", "Too many connections or requests in flight", 503)
TOO_MANY_CONNECTIONS = ProblemType(
    "too-many-connections", "Too many connections from this client address", 429
)

# What a request head holds besides the URL and the header fields: the method, two spaces,
# "HTTP/1.1" and the line ends. The header cap is on the fields, as the app counts them.
REQUEST_LINE_ALLOWANCE_BYTES: Final = 64
# Refusals and shedding are logged as a count at most this often: under a flood, one line per
# connection would cost more than the connections.
LOG_INTERVAL_S: Final = 10.0

log = logging.getLogger("app.http")


@dataclass(frozen=True, slots=True)
class ProtocolLimits:
    """The settings the protocol needs; small and picklable, so it reaches worker processes."""

    header_timeout_s: float
    max_url_bytes: int
    max_header_bytes: int
    max_connections_per_client: int

    @classmethod
    def from_settings(cls, settings: Settings) -> ProtocolLimits:
        return cls(
            header_timeout_s=settings.header_timeout_s,
            max_url_bytes=settings.max_url_bytes,
            max_header_bytes=settings.max_header_bytes,
            max_connections_per_client=settings.max_connections_per_client,
        )


def protocol_factory(settings: Settings) -> functools.partial[ProblemHttpToolsProtocol]:
    """What ``uvicorn.run(http=...)`` gets: uvicorn calls it once per connection, with the
    same keyword arguments as its own protocol classes."""
    limits = ProtocolLimits.from_settings(settings)
    return functools.partial(ProblemHttpToolsProtocol, limits=limits)


def client_key(host: str) -> str:
    """Whose connection this is, for the per-client cap: the IPv4 address, or the IPv6 /64
    (one host or LAN usually gets a whole /64, so counting single IPv6 addresses would let it
    open connections without limit)."""
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host.split("%", 1)[0])
    except ValueError:
        return host
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((address, 64), strict=False))


def _problem_bytes(kind: ProblemType, detail: str) -> bytes:
    body = {"type": kind.uri, "title": kind.title, "status": kind.status, "detail": detail}
    return json.dumps(body).encode()


class _ServerConnections:
    """What all connections of one server share: open connections per client, and the
    connections that wait for nothing, in the order they started waiting."""

    def __init__(self) -> None:
        self.per_client: dict[str, int] = {}
        # Ordered by when each connection last became idle: the first is the oldest. An
        # OrderedDict, not a dict: removing from the front of a dict makes the next
        # iteration skip the holes, which turns shedding quadratic.
        self.idle: OrderedDict[ProblemHttpToolsProtocol, None] = OrderedDict()
        self._events: dict[str, int] = {}
        self._last_log_s = -LOG_INTERVAL_S
        self._report: asyncio.TimerHandle | None = None

    def note(self, event: str) -> None:
        """Count an event; the counts are logged at once, then at most every LOG_INTERVAL_S
        (on the event loop, from a protocol callback)."""
        self._events[event] = self._events.get(event, 0) + 1
        if self._report is None:
            wait_s = max(0.0, self._last_log_s + LOG_INTERVAL_S - time.monotonic())
            self._report = asyncio.get_running_loop().call_later(wait_s, self._log_report)

    def _log_report(self) -> None:
        self._report = None
        summary = ", ".join(f"{count} {name}" for name, count in self._events.items())
        log.warning("connection limits: %s", summary)
        self._events.clear()
        self._last_log_s = time.monotonic()


# One entry per uvicorn server (its ServerState is shared by all its connections); weak, so
# a server that is gone takes its entry with it.
_SERVERS: weakref.WeakKeyDictionary[ServerState, _ServerConnections] = weakref.WeakKeyDictionary()


class ProblemHttpToolsProtocol(HttpToolsProtocol):
    _header_timer: asyncio.TimerHandle | None = None

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        limits: ProtocolLimits,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._limits = limits
        # uvicorn's own check answers in plain text and counts idle connections as if they
        # were busy; on_headers_complete decides instead, so uvicorn is told there is no limit.
        self._limit_concurrency = self.limit_concurrency
        self.limit_concurrency = None
        self._app: ASGIApp = self.app
        shared = _SERVERS.get(server_state)
        if shared is None:
            shared = _SERVERS[server_state] = _ServerConnections()
        self._shared = shared
        self._client_key: str | None = None
        self._closed_by_us = False  # answered (or shed) and closing: ignore what still arrives
        # The request head: True from the connection's start, and again after each message,
        # until the next message's headers are complete.
        self._awaiting_head = True
        self._head_bytes = 0
        self._head_started = False  # on_message_begin ran: self.url is this head's URL
        # A chunked body's trailer fields are buffered by httptools like header fields, and
        # arrive after the app has the request: counted against the same cap.
        self._maybe_trailers = False
        self._trailer_bytes = 0

    # -- connections ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if self.client is not None:
            key = client_key(self.client[0])
            open_now = self._shared.per_client.get(key, 0)
            if open_now >= self._limits.max_connections_per_client:
                self.connections.discard(self)  # never counted: it is closed at once
                self._shared.note("refused over the per-client cap")
                detail = (
                    f"{key} already has {open_now} open connections (the limit); "
                    "reuse them or retry shortly"
                )
                body = _problem_bytes(TOO_MANY_CONNECTIONS, detail)
                self._send_problem(429, body, retry_after_s=1)
                return
            self._shared.per_client[key] = open_now + 1
            self._client_key = key
        self._shared.idle[self] = None
        self._make_room()
        self._start_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        self._forget()
        super().connection_lost(exc)

    def handle_websocket_upgrade(self) -> None:
        # The connection passes to uvicorn's WebSocket protocol (the app then refuses the
        # handshake: it has no WebSocket route), and this object never hears of it again:
        # count it out now, or every upgrade request would leak a place in the client's cap.
        self._forget()
        super().handle_websocket_upgrade()

    def _forget(self) -> None:
        self._shared.idle.pop(self, None)
        key = self._client_key
        if key is not None:
            self._client_key = None
            left = self._shared.per_client[key] - 1
            if left:
                self._shared.per_client[key] = left
            else:
                del self._shared.per_client[key]

    def _make_room(self) -> None:
        """Below ``limit_concurrency`` again by closing connections that wait for nothing,
        oldest first (never this one), so the request on this one can be served."""
        limit = self._limit_concurrency
        if limit is None:
            return
        idle = self._shared.idle
        while len(self.connections) >= limit:
            oldest = next(iter(idle), None)
            if oldest is None or oldest is self:
                return  # every other connection is busy with a request
            oldest._shed()

    def _shed(self) -> None:
        self._shared.idle.pop(self, None)
        self.connections.discard(self)  # counted out now, not when the loop gets to it
        if self.transport.is_closing():
            return  # on its way out already (keep-alive timeout)
        self._shared.note("idle or incomplete connections closed to make room")
        if self._awaiting_head and self._head_bytes > 0:
            # A request had started: say why it will not be answered.
            detail = "the service is at its connection limit; retry shortly"
            self._send_problem(503, _problem_bytes(OVERLOADED, detail), retry_after_s=1)
        else:
            # Idle between requests: a server may close those at any time (RFC 9112 9.6).
            self._closed_by_us = True
            self.transport.close()

    # -- the request head -------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._closed_by_us:
            return
        # Bytes that arrive while a head is awaited are head bytes, as far as the head goes
        # (on_headers_complete starts the count again; the body is not counted). A chunk that
        # starts in a body and ends in the next pipelined head is not counted: the cap may be
        # passed by at most one read, and memory is still bounded.
        if self._awaiting_head:
            self._head_bytes += len(data)
        elif self._maybe_trailers:
            self._trailer_bytes += len(data)
        super().data_received(data)
        if self._closed_by_us:
            return
        # (A head that completed in this read was counted out by on_headers_complete: its
        # request is the app's now, and the app's own checks answer it.)
        if self._awaiting_head and self._head_bytes:
            self._check_head_size()
        elif self._maybe_trailers and self._trailer_bytes > self._limits.max_header_bytes:
            self._refuse_trailers()

    def _check_head_size(self) -> None:
        limits = self._limits
        url_bytes = len(self.url) if self._head_started else 0
        if url_bytes > limits.max_url_bytes:
            detail = f"{URL_TOO_LONG.title} (limit: {limits.max_url_bytes} bytes)"
            self._send_problem(414, _problem_bytes(URL_TOO_LONG, detail))
            return
        header_bytes = self._head_bytes - url_bytes - REQUEST_LINE_ALLOWANCE_BYTES
        if header_bytes > limits.max_header_bytes:
            detail = f"{HEADERS_TOO_LARGE.title} (limit: {limits.max_header_bytes} bytes)"
            self._send_problem(431, _problem_bytes(HEADERS_TOO_LARGE, detail))

    def _refuse_trailers(self) -> None:
        cycle = self.cycle
        if cycle.response_started:
            self._closed_by_us = True
            self.transport.close()  # the app has answered already; only the close is left
            return
        # The app is waiting for the rest of the body: from now on it gets a disconnect and
        # cannot write, so this answer is the only one on the connection.
        cycle.disconnected = True
        cycle.message_event.set()
        detail = f"trailer fields over the header limit ({self._limits.max_header_bytes} bytes)"
        self._send_problem(431, _problem_bytes(HEADERS_TOO_LARGE, detail))

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_started = True
        self._start_header_timer()

    def on_headers_complete(self) -> None:
        self._stop_header_timer()
        self._awaiting_head = False
        self._head_started = False
        self._head_bytes = 0
        self._shared.idle.pop(self, None)  # busy with a request now
        limit = self._limit_concurrency
        if limit is not None and len(self.tasks) < limit:
            self._make_room()  # (no use when the requests in flight alone are at the limit)
        if limit is None or (len(self.connections) < limit and len(self.tasks) < limit):
            super().on_headers_complete()
            return
        self._shared.note("requests refused at limit_concurrency (503)")
        # uvicorn starts whatever self.app is for this request (in order, after any request
        # pipelined before it); the swap lasts for this call only.
        self.app = _overloaded
        try:
            super().on_headers_complete()
        finally:
            self.app = self._app

    def on_chunk_header(self) -> None:
        # Until body bytes follow, whatever arrives after a chunk's size line is trailer
        # fields (the last chunk has size 0); a chunk with data ends the count at once.
        self._maybe_trailers = True
        self._trailer_bytes = 0

    def on_body(self, body: bytes) -> None:
        self._maybe_trailers = False
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._awaiting_head = True
        self._maybe_trailers = False
        super().on_message_complete()
        # The body is all there (uvicorn said so to the request: more_body is False). Not
        # for an upgrade, which has no cycle of its own.
        cycle = getattr(self, "cycle", None)
        if cycle is not None and not cycle.more_body:
            cycle.scope[BODY_RECEIVED] = True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Waiting for nothing now, unless uvicorn just started a pipelined request: the
        # youngest idle connection, the last to be shed.
        # (Not in the queue since on_headers_complete: the assignment appends it.)
        if not self.transport.is_closing() and self.cycle.response_complete:
            self._shared.idle[self] = None

    # -- the header timeout -----------------------------------------------------------------

    def _start_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(
                self._limits.header_timeout_s, self._headers_too_slow
            )

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        detail = f"the request headers took longer than {self._limits.header_timeout_s:g} s"
        self._send_problem(408, _problem_bytes(HEADERS_TIMEOUT, detail))

    # -- answers written by the protocol itself ---------------------------------------------

    def send_400_response(self, msg: str) -> None:
        detail = f"the HTTP request could not be parsed: {msg}"
        self._send_problem(400, _problem_bytes(MALFORMED_HTTP, detail))

    def _send_problem(self, status: int, body: bytes, retry_after_s: int | None = None) -> None:
        self._closed_by_us = True
        self._stop_header_timer()
        # Closing: no longer a connection to shed (which would answer it a second time).
        self._shared.idle.pop(self, None)
        content = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        if retry_after_s is not None:
            content.append(b"retry-after: %d\r\n" % retry_after_s)
        content.extend(
            [
                b"content-type: " + PROBLEM_MEDIA_TYPE.encode() + b"\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.transport.close()


_OVERLOADED_BODY: Final = _problem_bytes(
    OVERLOADED, "the service is at its concurrency limit; retry shortly"
)


async def _overloaded(scope: Scope, receive: Receive, send: Send) -> None:
    """The app that answers a request refused at ``limit_concurrency``."""
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                (b"content-length", str(len(_OVERLOADED_BODY)).encode()),
                (b"retry-after", b"1"),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": _OVERLOADED_BODY, "more_body": False})
