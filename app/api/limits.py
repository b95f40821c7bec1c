"""Request limits, as pure ASGI middleware (no BaseHTTPMiddleware: it costs a task and a copy
per request, and this runs on every one).

- URL longer than ``max_url_bytes``: 414. Header block larger than ``max_header_bytes``: 431.
- Body: a ``Content-Length`` over the cap is refused (413) before a byte is read; a chunked
  body is counted as it arrives and refused once it passes the cap, so memory stays bounded.
  A client that takes longer than ``body_timeout_s`` to send its body gets 408 (slow-loris).
- The body is read here and handed to the app whole, so nothing downstream can be made to
  wait on a slow client while holding an account lock. Except on the streaming paths
  (``POST /v1/events``): only their Content-Length is checked here (against their own cap);
  the endpoint reads the body as it arrives, bounds it and times it out itself, and holds
  no lock while it waits for the client (``app.api.events``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import NamedTuple

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.problems import ProblemType, problem_response

URL_TOO_LONG = ProblemType("url-too-long", "URL too long", 414)
HEADERS_TOO_LARGE = ProblemType("headers-too-large", "Request headers too large", 431)
BODY_TOO_LARGE = ProblemType("body-too-large", "Request body too large", 413)
BODY_TIMEOUT = ProblemType("body-timeout", "Request body not received in time", 408)
BAD_LENGTH = ProblemType("bad-content-length", "Invalid Content-Length", 400)
# Set in the scope by our HTTP protocol (app.api.http_protocol) once the whole body has been
# received: reading it then cannot wait on the client, and needs no timer.
BODY_RECEIVED = "gpu_credits.body_received"


class RequestLimits:
    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        max_url_bytes: int,
        max_header_bytes: int,
        body_timeout_s: float,
        body_cap_for_path: Callable[[str], int] | None = None,
        streaming_paths: frozenset[str] = frozenset(),
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_url_bytes = max_url_bytes
        self.max_header_bytes = max_header_bytes
        self.body_timeout_s = body_timeout_s
        self.body_cap_for_path = body_cap_for_path
        self.streaming_paths = streaming_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = _scan_head(scope)
        refusal = self._refusal_of(head)
        if refusal is not None:
            await self._respond(scope, send, *refusal)
            return
        content_length = head.content_length
        if content_length is None and not head.chunked:
            await self.app(scope, receive, send)  # no body: nothing to bound or wait for
            return
        cap = self.body_cap_for_path(scope["path"]) if self.body_cap_for_path else 0
        cap = cap or self.max_body_bytes
        if content_length is not None and content_length > cap:
            await self._respond(scope, send, BODY_TOO_LARGE, f"{cap} bytes")
            return
        if scope["path"] in self.streaming_paths:
            await self.app(scope, receive, send)  # bounded as it is read (see above)
            return
        body = await self._read_body(scope, receive, send, cap)
        if body is None:
            return  # refused, or the client is gone
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as ASGI does

        await self.app(scope, replay, send)

    def _refusal_of(self, head: _Head) -> tuple[ProblemType, str] | None:
        """The URL and header caps (a second line: the HTTP protocol enforces them as bytes
        arrive), and a Content-Length that is not one byte count."""
        if head.url_bytes > self.max_url_bytes:
            return URL_TOO_LONG, f"{self.max_url_bytes} bytes"
        if head.header_bytes > self.max_header_bytes:
            return HEADERS_TOO_LARGE, f"{self.max_header_bytes} bytes"
        if head.length_problem is not None:
            return BAD_LENGTH, head.length_problem
        return None

    async def _read_body(
        self, scope: Scope, receive: Receive, send: Send, cap_bytes: int
    ) -> bytes | None:
        """The whole body, or None once answered (too large, too slow) or disconnected."""
        chunks: list[bytes] = []
        size = 0
        if scope.get(BODY_RECEIVED):
            # The protocol holds the whole body already (it came with the head: the usual
            # case for a small request), so one receive() hands it over at once: no timer
            # to arm and cancel (a few microseconds a request).
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size = len(chunk)
            if size > cap_bytes:
                await self._respond(scope, send, BODY_TOO_LARGE, f"{cap_bytes} bytes")
                return None
            if not message.get("more_body", False):
                return bytes(chunk)
            chunks.append(chunk)
        try:
            # One timer for the whole body (asyncio.timeout, not wait_for: no task per chunk).
            async with asyncio.timeout(self.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None  # the client is gone; there is nobody to answer
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > cap_bytes:
                        await self._respond(scope, send, BODY_TOO_LARGE, f"{cap_bytes} bytes")
                        return None
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            await self._respond(scope, send, BODY_TIMEOUT, f"{self.body_timeout_s:g} s")
            return None

    @staticmethod
    async def _respond(scope: Scope, send: Send, kind: ProblemType, limit: str) -> None:
        # An unread body may be left on the connection: close it rather than parse the rest
        # as the next request.
        headers = {"Connection": "close"}
        response = problem_response(kind, f"{kind.title} (limit: {limit})", headers)

        async def no_body() -> Message:
            return {"type": "http.disconnect"}

        await response(scope, no_body, send)


class _Head(NamedTuple):
    """What the limits need of a request's head, read in one pass over its headers (this
    runs for every request)."""

    url_bytes: int
    header_bytes: int
    content_length: int | None
    chunked: bool
    length_problem: str | None  # why the Content-Length is refused, if it is


def _scan_head(scope: Scope) -> _Head:
    url_bytes = len(scope.get("raw_path") or scope["path"].encode()) + len(
        scope.get("query_string", b"")
    )
    header_bytes = 0
    raw_length: bytes | None = None
    chunked = False
    problem: str | None = None
    for name, value in scope["headers"]:
        header_bytes += len(name) + len(value) + 4
        if name == b"content-length":
            if raw_length is not None and raw_length != value:
                problem = "conflicting values"
            raw_length = value
        elif name == b"transfer-encoding":
            chunked = True
    content_length = None
    if raw_length is not None and problem is None:
        if raw_length.isdigit() and len(raw_length) <= 18:
            content_length = int(raw_length)
        else:
            problem = "not a byte count"
    return _Head(url_bytes, header_bytes, content_length, chunked, problem)
