"""The one place where errors become HTTP: every domain and service error, every validation
error, unknown route and wrong method is answered with an RFC 9457 problem document
(``application/problem+json``). Routes raise; they never build error responses themselves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute

from app.api.auth import AuthError, Unauthenticated
from app.api.routing import UnsupportedMediaType
from app.api.schemas import Problem
from app.domain import (
    ClassLimit,
    InvalidInput,
    LedgerError,
    LiveGrantLimit,
    TimestampRegression,
    TotalOverflow,
)
from app.logs import REQUEST_ID
from app.service.errors import (
    AccountLimit,
    AccountNotFound,
    BatchReplayTooLarge,
    ClassAsOfUnsupported,
    CursorGone,
    EventIdReused,
    GrantAlreadyVoided,
    GrantNotFound,
    IdempotencyKeyReused,
    IdempotencyKeysFull,
    OutcomeUnknown,
    QuotaExceeded,
    ServiceError,
    ServiceUnavailable,
)

PROBLEM_MEDIA_TYPE = "application/problem+json"
_TYPE_PREFIX = "tag:gpu-credits,2026:problem:"
log = logging.getLogger("app.errors")


@dataclass(frozen=True, slots=True)
class ProblemType:
    slug: str
    title: str
    status: int

    @property
    def uri(self) -> str:
        return _TYPE_PREFIX + self.slug


MALFORMED_JSON = ProblemType("malformed-json", "Request body is not valid JSON", 400)
NOT_FOUND = ProblemType("not-found", "Not found", 404)
ACCOUNT_NOT_FOUND = ProblemType("account-not-found", "Account not found", 404)
GRANT_NOT_FOUND = ProblemType("grant-not-found", "Grant not found", 404)
GRANT_ALREADY_VOIDED = ProblemType("grant-already-voided", "Grant already voided", 409)
CURSOR_GONE = ProblemType("cursor-gone", "Ledger cursor names an undone entry", 409)
CLASS_LIMIT = ProblemType("class-limit", "Too many GPU classes on the account", 409)
UNSUPPORTED_MEDIA_TYPE = ProblemType("unsupported-media-type", "Body must be JSON", 415)
METHOD_NOT_ALLOWED = ProblemType("method-not-allowed", "Method not allowed", 405)
TIMESTAMP_REGRESSION = ProblemType(
    "timestamp-regression", "Timestamp before the account's watermark", 409
)
VALIDATION = ProblemType("validation-error", "Request is invalid", 422)
INVALID_INPUT = ProblemType("invalid-input", "Input outside the allowed domain", 422)
TOTAL_OVERFLOW = ProblemType("total-overflow", "A total would exceed 2^53-1", 422)
IDEMPOTENCY_KEY_REUSED = ProblemType(
    "idempotency-key-reused", "Idempotency-Key reused with a different request", 422
)
BATCH_REPLAY_TOO_LARGE = ProblemType(
    "batch-replay-too-large", "The batch's late writes would replay too much", 422
)
EVENT_ID_REUSED = ProblemType(
    "event-id-reused", "Event id already applied to a different operation", 422
)
UNAUTHENTICATED = ProblemType("unauthenticated", "Missing or invalid API key", 401)
FORBIDDEN = ProblemType("forbidden", "The API key may not do this", 403)
LIVE_GRANT_LIMIT = ProblemType("live-grant-limit", "Too many live grants on the account", 409)
ACCOUNT_LIMIT = ProblemType("account-limit", "Too many accounts", 409)
QUOTA_EXCEEDED = ProblemType("quota-exceeded", "A quota is reached", 409)
IDEMPOTENCY_KEYS_FULL = ProblemType("idempotency-keys-full", "Too many Idempotency-Keys", 503)
UNAVAILABLE = ProblemType("unavailable", "Service unavailable", 503)
OUTCOME_UNKNOWN = ProblemType(
    "outcome-unknown", "Outcome unknown: retry with the same Idempotency-Key", 503
)
INTERNAL = ProblemType("internal-error", "Internal server error", 500)


def problem_response(
    kind: ProblemType,
    detail: str,
    headers: dict[str, str] | None = None,
    status: int | None = None,
    **extra: Any,
) -> JSONResponse:
    # A detail can quote the caller's input; keep it encodable whatever that input was.
    detail = detail.encode("utf-8", "backslashreplace").decode("utf-8")
    body = Problem(
        type=kind.uri,
        title=kind.title,
        status=status or kind.status,
        detail=detail,
        # The request's id, as in its X-Request-ID header and its log line (app.api.requests).
        request_id=REQUEST_ID.get(),
        **extra,
    )
    return JSONResponse(
        body.model_dump(mode="json", exclude_none=True),
        status_code=status or kind.status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=headers,
    )


@dataclass(frozen=True, slots=True)
class Described:
    kind: ProblemType
    detail: str
    extra: dict[str, Any]
    headers: dict[str, str] | None = None

    def body(self) -> dict[str, Any]:
        """The problem document as a dict (what a batch result carries)."""
        return {
            "type": self.kind.uri,
            "title": self.kind.title,
            "status": self.kind.status,
            "detail": self.detail,
            **self.extra,
        }


def describe(exc: Exception) -> Described:
    """The problem a domain or service error stands for: the one mapping, used by the
    exception handlers and by batch results alike."""
    detail = str(exc)
    if isinstance(exc, TimestampRegression):
        # SPEC sections 3 and 6: the account's clock, and the watermark writes must reach
        # (the clock itself with a lateness window of 0).
        watermark = getattr(exc, "watermark", exc.account_timestamp)
        return Described(
            TIMESTAMP_REGRESSION,
            detail,
            {"account_timestamp": exc.account_timestamp, "watermark": watermark},
        )
    if isinstance(exc, TotalOverflow):
        return Described(TOTAL_OVERFLOW, detail, {})
    if isinstance(exc, LiveGrantLimit):
        return Described(LIVE_GRANT_LIMIT, detail, {"limit": exc.limit})
    if isinstance(exc, ClassLimit):
        return Described(CLASS_LIMIT, detail, {"limit": exc.limit})
    if isinstance(exc, InvalidInput):
        issue = {"loc": ["body", exc.field], "message": exc.message, "type": "invalid_input"}
        return Described(INVALID_INPUT, detail, {"errors": [issue]})
    if isinstance(exc, LedgerError):
        return Described(INVALID_INPUT, detail, {})
    if isinstance(exc, AccountNotFound):
        return Described(ACCOUNT_NOT_FOUND, detail, {})
    if isinstance(exc, GrantNotFound):
        return Described(GRANT_NOT_FOUND, detail, {})
    if isinstance(exc, ClassAsOfUnsupported):
        issue = {"loc": ["query", "timestamp"], "message": detail, "type": "class_as_of"}
        return Described(VALIDATION, detail, {"errors": [issue]})
    if isinstance(exc, CursorGone):
        return Described(CURSOR_GONE, detail, {})
    if isinstance(exc, GrantAlreadyVoided):
        return Described(GRANT_ALREADY_VOIDED, detail, {"voided_at": exc.voided_at})
    if isinstance(exc, IdempotencyKeyReused):
        return Described(IDEMPOTENCY_KEY_REUSED, detail, {})
    if isinstance(exc, EventIdReused):
        return Described(EVENT_ID_REUSED, detail, {"sequence": exc.sequence})
    if isinstance(exc, BatchReplayTooLarge):
        return Described(BATCH_REPLAY_TOO_LARGE, detail, {"limit": exc.limit})
    if isinstance(exc, AccountLimit):
        return Described(ACCOUNT_LIMIT, detail, {})
    if isinstance(exc, QuotaExceeded):
        members: dict[str, Any] = {"quota": exc.quota, "limit": exc.limit}
        if exc.tenant is not None:
            members["tenant"] = exc.tenant
        return Described(QUOTA_EXCEEDED, detail, members)
    if isinstance(exc, IdempotencyKeysFull):
        return Described(IDEMPOTENCY_KEYS_FULL, detail, {}, {"Retry-After": "60"})
    if isinstance(exc, ServiceUnavailable):
        return Described(UNAVAILABLE, detail, {}, {"Retry-After": "5"})
    if isinstance(exc, OutcomeUnknown):
        return Described(OUTCOME_UNKNOWN, detail, {}, {"Retry-After": "5"})
    log.error("unmapped error", exc_info=exc)
    return Described(INTERNAL, "the server could not complete the request", {})


class Disabled(Exception):
    """A feature this service was configured without (``GET /metrics`` with metrics off):
    404, like a route that does not exist, with the reason."""


def _disabled(request: Request, exc: Exception) -> JSONResponse:
    return problem_response(NOT_FOUND, str(exc))


def _domain_error(request: Request, exc: Exception) -> JSONResponse:
    d = describe(exc)
    return problem_response(d.kind, d.detail, d.headers, **d.extra)


def _storage_error(request: Request, exc: Exception) -> JSONResponse:
    # The service maps the storage failures it expects (ServiceUnavailable, OutcomeUnknown).
    # One that got past it is still the database's or the network's, never a reason for a
    # 500. (On PostgreSQL nothing was committed: the store raises nothing once a COMMIT has
    # answered, and a COMMIT in doubt is OutcomeUnknown.) Logged in full all the same: it
    # may also be a bug, a bad query say.
    log.error("storage error not mapped by the service", exc_info=exc)
    return problem_response(UNAVAILABLE, "storage failed; retry later", {"Retry-After": "5"})


def _auth_error(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, Unauthenticated):
        return problem_response(
            UNAUTHENTICATED, str(exc), headers={"WWW-Authenticate": 'Bearer realm="gpu-credits"'}
        )
    # 401s are counted where they are found (app.api.auth.authenticate); 403s of requests
    # here. Not counted: a usage stream's per-line 403 (a result line, the stream goes on)
    # and the account page's (an HTML page).
    observer = getattr(request.app.state, "observer", None)
    if observer is not None:
        observer.auth_failed("forbidden")
    return problem_response(FORBIDDEN, str(exc))


def _media_type_error(request: Request, exc: Exception) -> JSONResponse:
    accept = exc.accept if isinstance(exc, UnsupportedMediaType) else "application/json"
    return problem_response(UNSUPPORTED_MEDIA_TYPE, str(exc), headers={"Accept": accept})


def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    for e in errors:
        if e.get("type") == "json_invalid":
            reason = str((e.get("ctx") or {}).get("error", "")).strip()
            detail = "the request body could not be parsed as JSON"
            return problem_response(MALFORMED_JSON, f"{detail}: {reason}" if reason else detail)
    fields, listed = validation_summary(errors)
    return problem_response(VALIDATION, f"invalid request: {fields}", **listed)


# Issues a validation problem lists, and fields its detail names. Pydantic reports every
# mistake in a body: unbounded, one body of many (a 10,000-operation batch of bad amounts, a
# 128 KiB stream line of unknown members: 12,000 issues, 1.4 MB) would be answered about ten
# times its own size. The first ones tell a client what to fix; the count says how many.
MAX_LISTED_ISSUES: Final = 100
MAX_NAMED_FIELDS: Final = 10


def validation_summary(
    errors: Sequence[Mapping[str, Any]], *, prefix: tuple[str, ...] = (), whole: str = ""
) -> tuple[str, dict[str, Any]]:
    """What a validation problem says of pydantic's ``errors`` (in its order): the fields its
    detail names (the first MAX_NAMED_FIELDS, each its ``loc`` joined by dots, ``whole`` for
    an empty one; then how many more), and its members: ``errors``, the first
    MAX_LISTED_ISSUES as issues (``validation_issue``, their ``loc`` after ``prefix``), and
    ``errors_total`` when that is not all of them."""
    issues = [validation_issue(e, prefix=prefix) for e in errors[:MAX_LISTED_ISSUES]]
    skip = len(prefix)
    names = [".".join(str(p) for p in i["loc"][skip:]) or whole for i in issues[:MAX_NAMED_FIELDS]]
    fields = ", ".join(names)
    if len(errors) > MAX_NAMED_FIELDS:
        fields += f" and {len(errors) - MAX_NAMED_FIELDS:,} more"
    listed: dict[str, Any] = {"errors": issues}
    if len(errors) > MAX_LISTED_ISSUES:
        listed["errors_total"] = len(errors)
    return fields, listed


def validation_issue(error: Mapping[str, Any], *, prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    """One of pydantic's validation errors as an item of a problem's ``errors``. A member a
    batch operation or stream line does not have is "unexpected_keyword_argument" to
    pydantic (they are dataclasses, see ``app.api.schemas``): it is reported as a model's
    extra member is, "extra_forbidden", one name for one mistake wherever it is made."""
    kind = str(error.get("type", "invalid"))
    message = str(error.get("msg", "invalid"))
    if kind == "unexpected_keyword_argument":
        kind, message = "extra_forbidden", "Extra inputs are not permitted"
    return {
        "loc": [*prefix, *(p if isinstance(p, int) else str(p) for p in error.get("loc", ()))],
        "message": message,
        "type": kind,
    }


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers) if exc.headers else None
    if exc.status_code == 404:
        return problem_response(NOT_FOUND, f"no route for {request.url.path}", headers)
    if exc.status_code == 405:
        # Starlette's Allow names only the first route matching the path; a path can be
        # served by several (GET and POST .../grants), and RFC 9110 wants them all.
        allowed = _allowed_methods(request)
        headers = {**(headers or {}), "Allow": ", ".join(allowed)} if allowed else headers
        return problem_response(
            METHOD_NOT_ALLOWED,
            f"{request.method} is not allowed on {request.url.path}",
            headers,
        )
    kind = ProblemType("http-error", str(exc.detail), exc.status_code)
    return problem_response(kind, str(exc.detail), headers)


def _allowed_methods(request: Request) -> list[str]:
    methods: set[str] = set()
    for pattern, route_methods in request.app.state.route_methods:
        if pattern.match(request.url.path):
            methods |= route_methods
    return sorted(methods)


def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("unhandled error", exc_info=exc)
    return problem_response(INTERNAL, "the server could not complete the request")


def install(
    app: FastAPI,
    routes: Sequence[BaseRoute],
    storage_errors: Sequence[type[Exception]] = (),
) -> None:
    """Map every error to a problem document; ``routes`` are the API's own, whose methods a
    405 lists in ``Allow``; ``storage_errors`` are what the storage driver raises (503, as
    OSError is)."""
    app.state.route_methods = [
        (r.path_regex, set(r.methods)) for r in routes if isinstance(r, APIRoute) and r.methods
    ]
    app.add_exception_handler(LedgerError, _domain_error)
    app.add_exception_handler(ServiceError, _domain_error)
    # Registered by class, not left to the catch-all for Exception: Starlette answers that
    # one and then re-raises, so the server would also drop the keep-alive connection.
    errors: list[type[Exception]] = [OSError, *storage_errors]
    for storage_error in errors:
        app.add_exception_handler(storage_error, _storage_error)
    app.add_exception_handler(AuthError, _auth_error)
    app.add_exception_handler(Disabled, _disabled)
    app.add_exception_handler(UnsupportedMediaType, _media_type_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)


# What each status means in the OpenAPI file; every route documents the ones it can return.
STATUS_DESCRIPTIONS: dict[int, str] = {
    400: "Malformed JSON body: not UTF-8, not JSON, duplicate member names, NaN, or nested "
    "too deeply.",
    413: "Request body larger than the limit (GPU_CREDITS_MAX_BODY_BYTES).",
    415: "The body is not `application/json`.",
    401: "Missing or unknown API key (only when keys are configured).",
    403: "The API key lacks the scope, or may not touch this account.",
    404: "Unknown account (reads create nothing) or grant.",
    409: "Timestamp earlier than the account's watermark (`watermark`; `account_timestamp` is "
    "its latest), a grant already voided (`voided_at`), or a limit reached: live grants per "
    "account, accounts.",
    422: "Input outside the domain, unknown field, a total past 2^53-1, a reused "
    "Idempotency-Key with a different body, or a batch whose late writes would replay too "
    "many provisional writes (`batch-replay-too-large`, with its `limit`).",
    503: "Retry later (`Retry-After`). `unavailable`: storage failed or the database is "
    "unreachable (on PostgreSQL: nothing was changed). `outcome-unknown` (writes on "
    "PostgreSQL): the database connection was lost while the change was being committed, so "
    "it may or may not have been applied; retry with the same Idempotency-Key to get its "
    "answer. `idempotency-keys-full`: too many Idempotency-Keys held.",
}


def documented(*statuses: int) -> dict[int | str, dict[str, Any]]:
    return {s: {"model": Problem, "description": STATUS_DESCRIPTIONS[s]} for s in statuses}
