"""``LedgerRoute``: what every API route does before FastAPI parses the request.

In this order, each step failing fast with a problem document:
1. authenticate and authorize (401/403) — before a byte of the body is parsed, so an
   anonymous caller learns nothing from how its body is judged;
2. reject unknown or repeated query parameters (422) — a typo such as ``?timestmap=5`` must
   not silently answer at another time;
3. require ``application/json`` on a body (415), then parse it strictly (``strict_json``).

Doing this in the route class rather than as FastAPI dependencies keeps it off the
dependency-injection machinery, which the profile showed to be a large share of each request
(see README, Performance). Each endpoint declares its policy with ``@requires(scope)``,
``@requires(ANY_SCOPE)`` (authenticated; the endpoint checks scopes itself) or ``@public``; an
endpoint without one is refused at startup rather than left open by accident.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from app.api.auth import Authenticator, authenticate, authorize
from app.api.strict_json import StrictJsonRequest, is_json_media_type
from app.keys import Scope

_POLICY_ATTR: Final = "__gpu_credits_policy__"
PUBLIC: Final = "public"
ANY_SCOPE: Final = "any-scope"
Policy = Scope | str

_F = TypeVar("_F", bound=Callable[..., Any])


class UnsupportedMediaType(Exception):
    def __init__(self, detail: str, accept: str = "application/json") -> None:
        super().__init__(detail)
        self.accept = accept  # the media type the body must have


def requires(policy: Policy) -> Callable[[_F], _F]:
    def mark(endpoint: _F) -> _F:
        setattr(endpoint, _POLICY_ATTR, policy)
        return endpoint

    return mark


def public(endpoint: _F) -> _F:
    return requires(PUBLIC)(endpoint)


def is_public(route: APIRoute) -> bool:
    return getattr(route.endpoint, _POLICY_ATTR, None) == PUBLIC


class LedgerRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        policy = getattr(self.endpoint, _POLICY_ATTR, None)
        if policy is None:
            raise RuntimeError(f"{self.path}: the endpoint declares no access policy")
        declared_query = {p.alias for p in self.dependant.query_params} | _hand_declared(self)
        expects_body = self.body_field is not None

        async def guarded(request: Request) -> Response:
            if policy != PUBLIC:
                auth = request.app.state.authenticator
                assert isinstance(auth, Authenticator)
                peer = request.client
                key = authenticate(
                    auth,
                    request.headers.get("authorization"),
                    f"{peer.host}:{peer.port}" if peer else "unknown",
                )
                if isinstance(policy, Scope):
                    account_id = request.path_params.get("account_id")
                    authorize(key, policy, account_id if isinstance(account_id, str) else None)
                request.scope.setdefault("state", {})["api_key"] = key
            if request.scope.get("query_string"):
                _check_query(request, declared_query)
            if expects_body and not is_json_media_type(request.headers.get("content-type")):
                raise UnsupportedMediaType(
                    "the request body must be JSON: Content-Type: application/json"
                )
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return guarded


def _hand_declared(route: APIRoute) -> set[str]:
    """Query parameters declared in ``openapi_extra`` and read by the endpoint itself (not
    FastAPI ``Query`` parameters, whose dependency solving costs every request)."""
    extra = route.openapi_extra or {}
    return {p["name"] for p in extra.get("parameters", ()) if p.get("in") == "query"}


def _check_query(request: Request, declared: set[str]) -> None:
    issues = []
    seen: set[str] = set()
    for name, _ in request.query_params.multi_items():
        if name not in declared:
            issues.append((name, "Unknown query parameter", "extra_forbidden"))
        elif name in seen:
            issues.append((name, "Query parameter given more than once", "repeated"))
        seen.add(name)
    if issues:
        raise RequestValidationError(
            [{"loc": ("query", name), "msg": msg, "type": kind} for name, msg, kind in issues]
        )
