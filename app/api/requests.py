"""Every request's id, metrics and log line: pure ASGI middleware, the outermost layer of
the app (outside Starlette's error middleware, so a 500 is seen too).

- **Request id.** ``X-Request-ID`` from the request when it is one value of 1 to 128
  visible ASCII characters (``!`` to ``~``: no spaces, no control characters, nothing that
  could break a log line or a header); otherwise (absent, repeated, empty, too long, other
  characters) a new one, 32 hexadecimal digits (128 random bits). It is answered in the
  ``X-Request-ID`` header of every response, in every problem document (``request_id``, read
  from ``app.logs.REQUEST_ID`` by ``app.api.problems``) and in every log line written while
  the request is answered.
- **Metrics** (``app.metrics``): one observation per request, labelled with the route's
  template, the method and the status.
- **Request log** (``GPU_CREDITS_ACCESS_LOG``): one INFO line on ``app.requests`` per
  request, with its fields as structured members (``app.logs``).

The route is known once the router has run (Starlette leaves it in ``scope["route"]``); a
request refused before routing (body too large, say) is matched here, afterwards, so it is
still labelled with its route. Nothing is done per request beyond that: no dictionaries of
labels, no string formatting unless a line is logged.
"""

from __future__ import annotations

import logging
import os
import random
import re
import time
from collections.abc import Sequence
from typing import Any, Final

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.keys import KeyRecord
from app.logs import FIELDS_ATTR, REQUEST_ID
from app.metrics import UNMATCHED_ROUTE, Metrics

log = logging.getLogger("app.requests")

HEADER: Final = b"x-request-id"
MAX_REQUEST_ID_CHARS: Final = 128
_VALID_ID: Final = re.compile(rb"[\x21-\x7e]{1,%d}" % MAX_REQUEST_ID_CHARS)
# What a request that got no answer at all is logged and counted as (the client went away
# first): nginx's convention.
NO_ANSWER: Final = 499
# Caller-chosen text in a log line is cut at this length (a path may be 8 KiB).
LOGGED_TEXT_MAX: Final = 256


def request_id_of(headers: Sequence[tuple[bytes, bytes]]) -> str:
    """The caller's X-Request-ID if it is one valid value, else a new id."""
    found: bytes | None = None
    for name, value in headers:
        if name == HEADER:
            if found is not None:
                return new_request_id()  # repeated: which one would be a guess
            found = value
    if found is not None and _VALID_ID.fullmatch(found):
        return found.decode("ascii")
    return new_request_id()


# Request ids need to be unique, not secret: a generator seeded from the OS (in each process:
# uvicorn's workers are new interpreters) costs no system call per request.
_RANDOM: Final = random.Random(os.urandom(32))


def new_request_id() -> str:
    return f"{_RANDOM.getrandbits(128):032x}"


class RequestObserver:
    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Sequence[BaseRoute],
        metrics: Metrics | None,
        log_requests: bool,
    ) -> None:
        self.app = app
        self._routes = routes
        self._metrics = metrics
        self._log_requests = log_requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started_s = time.perf_counter()
        request_id = request_id_of(scope["headers"])
        token = REQUEST_ID.set(request_id)
        header = (HEADER, request_id.encode("ascii"))
        status = NO_ANSWER

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self._done(scope, status, time.perf_counter() - started_s, request_id)
            REQUEST_ID.reset(token)

    def _done(self, scope: Scope, status: int, seconds: float, request_id: str) -> None:
        route = scope.get("route")
        if route is None:
            route, path_params = self._match(scope)
        else:
            path_params = scope.get("path_params")
        template: str = getattr(route, "path", UNMATCHED_ROUTE) if route else UNMATCHED_ROUTE
        method: str = scope["method"]
        if self._metrics is not None:
            self._metrics.request(template, method, status, seconds)
        if self._log_requests and log.isEnabledFor(logging.INFO):
            self._log(scope, template, method, status, seconds, request_id, path_params)

    def _match(self, scope: Scope) -> tuple[BaseRoute | None, dict[str, Any] | None]:
        """The route of a request answered before the router ran (a limit refused it)."""
        partial: tuple[BaseRoute | None, dict[str, Any] | None] = (None, None)
        for route in self._routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                return route, child.get("path_params")
            if match is Match.PARTIAL and partial[0] is None:
                partial = (route, child.get("path_params"))
        return partial

    @staticmethod
    def _log(
        scope: Scope,
        template: str,
        method: str,
        status: int,
        seconds: float,
        request_id: str,
        path_params: dict[str, Any] | None,
    ) -> None:
        account = path_params.get("account_id") if path_params else None
        state = scope.get("state")
        key = state.get("api_key") if state else None
        client = scope.get("client")
        fields = {
            "request_id": request_id,
            "method": method,
            "route": template,
            "path": scope["path"][:LOGGED_TEXT_MAX],
            "account": account[:LOGGED_TEXT_MAX] if isinstance(account, str) else None,
            "status": status,
            "latency_ms": round(seconds * 1000.0, 3),
            "key_id": key.key_id if isinstance(key, KeyRecord) else None,
            "client": client[0] if client else None,
        }
        log.info("%s %s %d", method, template, status, extra={FIELDS_ATTR: fields})
