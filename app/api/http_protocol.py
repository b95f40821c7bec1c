"""uvicorn's HTTP protocol (httptools), hardened in the two places the app cannot reach:

- Requests it cannot parse (a bad Content-Length, conflicting framing headers, control
  characters in a header or the path) are answered with a problem document, not plain text.
- A client that opens a connection, or starts a request, and then dribbles its headers is cut
  off after ``HEADER_TIMEOUT_S`` (408). uvicorn's keep-alive timer only runs between requests,
  so without this a few thousand such connections would fill ``limit_concurrency`` and lock
  everyone out (slow-loris). The body has its own timer in ``app.api.limits``.
- When ``limit_concurrency`` is reached, the 503 is a problem document too.

The request never reaches the app in any of these cases, so nothing changes.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Final

from uvicorn._types import ASGIReceiveCallable, ASGISendCallable, Scope
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from app.api.problems import PROBLEM_MEDIA_TYPE, ProblemType

MALFORMED_HTTP = ProblemType("malformed-http", "Request is not valid HTTP", 400)
HEADERS_TIMEOUT = ProblemType("headers-timeout", "Request headers not received in time", 408)
OVERLOADED = ProblemType("overloaded", "Too many connections or requests in flight", 503)

# Read from the environment (not Settings) because uvicorn workers import this class by name.
HEADER_TIMEOUT_S: Final = float(os.environ.get("GPU_CREDITS_HEADER_TIMEOUT_S", "10"))


def _problem_bytes(kind: ProblemType, detail: str) -> bytes:
    body = {"type": kind.uri, "title": kind.title, "status": kind.status, "detail": detail}
    return json.dumps(body).encode()


class ProblemHttpToolsProtocol(HttpToolsProtocol):
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._start_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_header_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._start_header_timer()

    def on_headers_complete(self) -> None:
        self._stop_header_timer()
        super().on_headers_complete()

    def _start_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._headers_too_slow)

    def _stop_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        detail = f"the request headers took longer than {HEADER_TIMEOUT_S:g} s"
        self._send_problem(408, _problem_bytes(HEADERS_TIMEOUT, detail))

    def send_400_response(self, msg: str) -> None:
        detail = f"the HTTP request could not be parsed: {msg}"
        self._send_problem(400, _problem_bytes(MALFORMED_HTTP, detail))

    def _send_problem(self, status: int, body: bytes) -> None:
        content = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
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


async def _overloaded(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    body = _problem_bytes(OVERLOADED, "the service is at its concurrency limit; retry shortly")
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", b"1"),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


# uvicorn looks this name up when limit_concurrency is reached; answer with a problem
# document like every other error.
httptools_impl.service_unavailable = _overloaded  # type: ignore[attr-defined]
