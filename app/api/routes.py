"""The endpoints: each binds its parameters, makes one service call and returns. Errors are
raised and mapped to problem documents in ``app.api.problems``; idempotent POSTs are handled in
``app.api.idempotent``, rendering in ``app.api.render``, OpenAPI examples in ``app.api.docs``."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Annotated, Any, Final

from fastapi import APIRouter, Body, Path, Query, Request, Response
from prometheus_client.exposition import choose_encoder

from app.api import render
from app.api.auth import (
    SECURITY_SCHEME_NAME,
    Authenticator,
    Forbidden,
    authenticate,
    authorize,
    visible_prefix,
)
from app.api.docs import (
    BATCH_EXAMPLES,
    CONSUME_EXAMPLES,
    EVENTS_ANSWER_EXAMPLE,
    EVENTS_EXAMPLE,
    GRANT_EXAMPLES,
    SETTINGS_EXAMPLES,
    VOID_EXAMPLES,
)
from app.api.dry_run import DRY_RUN_PARAMETER, dry_run_of
from app.api.events import (
    EVENTS_PATH,
    NDJSON,
    EventStream,
    StreamLimits,
    is_ndjson_media_type,
    may_stream,
)
from app.api.idempotent import (
    IDEMPOTENCY_KEY_PARAMETER,
    REPLAYED_HEADER,
    WITH_IDEMPOTENCY_KEY,
    idempotency_of,
    refuse_idempotency_key,
    replayed,
)
from app.api.problems import Disabled, ProblemType, describe, documented, problem_response
from app.api.routing import ANY_SCOPE, LedgerRoute, UnsupportedMediaType, public, requires
from app.api.schemas import (
    ACCOUNT_ID_MAX_CHARS,
    ACCOUNT_PAGE_MAX,
    ACCOUNT_PREFIX_PATTERN,
    CLASS_NAME_PATTERN,
    LEDGER_PAGE_MAX,
    AccountId,
    AccountPage,
    AccountSettingsRequest,
    AccountSettingsResponse,
    BalanceOperation,
    BalanceResponse,
    BatchRequest,
    BatchResponse,
    ConsumeOperation,
    ConsumeRequest,
    ConsumeResponse,
    ForecastResponse,
    GrantDetailResponse,
    GrantOperation,
    GrantRequest,
    GrantResponse,
    Health,
    LedgerPage,
    LiveGrantsResponse,
    Problem,
    QueryInt,
    ResourceQuery,
    VersionInfo,
    VoidOperation,
    VoidRequest,
    VoidResponse,
)
from app.collector import COLLECTOR
from app.domain import MAX_CLASS_NAME_LENGTH, MAX_VALUE
from app.keys import Scope
from app.metrics import Metrics
from app.service.commands import BalanceOp, ConsumeOp, GrantOp, Operation, VoidOp
from app.service.errors import ServiceUnavailable
from app.service.idempotency import Idempotency, batch_scope
from app.service.journal import Label
from app.service.ledger import Ledger, Replay

router = APIRouter(route_class=LedgerRoute)
log = logging.getLogger("app.api")


def _ledger(request: Request) -> Ledger:
    ledger = request.app.state.ledger
    assert isinstance(ledger, Ledger)
    return ledger


def _json(body: bytes, status_code: int, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status_code, media_type="application/json", headers=headers)


def _grant_location(account_id: str, grant_id: int) -> str:
    return f"/v1/accounts/{account_id}/grants/{grant_id}"


@router.post(
    "/v1/accounts/{account_id}/grants",
    operation_id="grantCredits",
    openapi_extra=WITH_IDEMPOTENCY_KEY,
    summary="Grant credits that expire",
    status_code=201,
    response_model=GrantResponse,
    responses={
        201: {
            "headers": {
                "Location": {
                    "description": "The grant's URL.",
                    "schema": {"type": "string"},
                },
                **REPLAYED_HEADER,
            }
        },
        **documented(400, 401, 403, 409, 413, 415, 422, 503),
    },
    tags=["credits"],
)
@requires(Scope.GRANT)
async def grant_credits(
    account_id: AccountId,
    body: Annotated[GrantRequest, Body(openapi_examples=GRANT_EXAMPLES)],
    request: Request,
) -> Any:
    """Grant `amount` credits usable from `timestamp` until `expiry` (exclusive). Outstanding
    debt is settled first; only the rest is kept. Creates the account if it is new."""
    idem = idempotency_of(request, "grant", account_id, body)
    label = Label(body.name, body.metadata)
    result = await _ledger(request).grant(
        account_id, body.amount, body.timestamp, body.expiry, idem, label, body.resources
    )
    if isinstance(result, Replay):
        grant_id = int(json.loads(result.body)["grant_id"])
        return replayed(result, {"Location": _grant_location(account_id, grant_id)})
    location = _grant_location(account_id, result.grant_id)
    return _json(render.grant(result), render.GRANT_STATUS, {"Location": location})


@router.post(
    "/v1/accounts/{account_id}/consumptions",
    operation_id="consumeCredits",
    openapi_extra={"parameters": [DRY_RUN_PARAMETER, IDEMPOTENCY_KEY_PARAMETER]},
    summary="Consume credits, earliest expiry first",
    status_code=200,
    response_model=ConsumeResponse,
    responses={
        200: {"headers": REPLAYED_HEADER},
        **documented(400, 401, 403, 409, 413, 415, 422, 503),
    },
    tags=["credits"],
)
@requires(Scope.CONSUME)
async def consume_credits(
    account_id: AccountId,
    body: Annotated[ConsumeRequest, Body(openapi_examples=CONSUME_EXAMPLES)],
    request: Request,
) -> Any:
    """Consume `amount` credits at `timestamp`, earliest-expiring first. What active credits
    cannot cover becomes debt. `debt` in the answer is the total outstanding debt. With
    `?dry_run=true`, nothing is consumed: the answer is what the consumption would do."""
    if dry_run_of(request):
        receipt = await _ledger(request).consume_dry_run(
            account_id, body.amount, body.timestamp, body.resource
        )
        return _json(render.consumption_dry_run(receipt), render.CONSUME_STATUS)
    idem = idempotency_of(request, "consume", account_id, body)
    result = await _ledger(request).consume(
        account_id, body.amount, body.timestamp, idem, body.resource
    )
    if isinstance(result, Replay):
        return replayed(result)
    return _json(render.consumption(result), render.CONSUME_STATUS)


@router.get(
    "/v1/accounts/{account_id}/balance",
    operation_id="getBalance",
    summary="Balance at a time",
    response_model=BalanceResponse,
    responses=documented(401, 403, 404, 422, 503),
    tags=["credits"],
)
@requires(Scope.READ)
async def get_balance(
    account_id: AccountId,
    request: Request,
    timestamp: Annotated[
        int | None,
        Query(
            ge=0,
            le=MAX_VALUE,
            description=(
                "Answer at this time; a read never changes the account. At or after the "
                "account's latest timestamp: the projected state (credits expiring at or "
                "before it no longer count). Before it: the state as of then, from the "
                "account's history. Omitted: the state at the account's latest timestamp."
            ),
        ),
        QueryInt,  # after Query: the bounds then publish as minimum/maximum
    ] = None,
    resource: ResourceQuery = None,
) -> Any:
    """`balance` = active credits - outstanding debt, in total or for one GPU class.
    Unknown accounts are 404."""
    view = await _ledger(request).balance(account_id, timestamp, resource)
    return _json(render.balance(view), 200)


@router.get(
    "/v1/accounts/{account_id}/grants",
    operation_id="listGrants",
    summary="Live grants, in the order they will be consumed",
    response_model=LiveGrantsResponse,
    responses=documented(401, 403, 404, 422, 503),
    tags=["credits"],
)
@requires(Scope.READ)
async def list_grants(
    account_id: AccountId, request: Request, resource: ResourceQuery = None
) -> Any:
    """The grants with credits left at the account's latest timestamp, in the order they will
    be consumed: earliest expiry first, then the narrower class set (unrestricted last), then
    grant order; the upcoming expirations. With `resource`, only those a consumption of that
    class could draw, and the balance of that class. Changes nothing."""
    view, grants = await _ledger(request).live_grants(account_id, resource)
    return render.live_grants(view, grants)


@router.get(
    "/v1/accounts/{account_id}/forecast",
    operation_id="getForecast",
    summary="Forecast a constant burn: when credits run out, what expires unused",
    response_model=ForecastResponse,
    responses=documented(401, 403, 404, 422, 503),
    tags=["credits"],
)
@requires(Scope.READ)
async def get_forecast(
    account_id: AccountId,
    request: Request,
    burn_rate: Annotated[
        int,
        Query(
            ge=1,
            le=MAX_VALUE,
            description=(
                "Credits consumed per timestamp unit: a consumption of `burn_rate` at every "
                "integer time from the account's clock. 1 to 2^53-1."
            ),
            examples=[10],
        ),
        QueryInt,
    ],
    resource: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=MAX_CLASS_NAME_LENGTH,
            pattern=CLASS_NAME_PATTERN,
            description=(
                "The GPU class the burn runs on: unrestricted grants and those listing it pay. "
                "Omitted: no class, so unrestricted grants alone pay."
            ),
        ),
    ] = None,
) -> Any:
    """If the account consumed `burn_rate` credits (of class `resource`) at every integer
    time from its clock on, and nothing else happened: when the credits it can draw run out
    (`run_out_at`, the first step not covered in full) and, grant by grant in the order they
    would be drawn, how much the burn draws and how much expires unused at the grant's
    expiry. Exact integers, the ledger's own rules (earliest expiry first). Debt is not
    settled by a burn, only by grants. Changes nothing; unknown accounts are 404."""
    view = await _ledger(request).forecast(account_id, burn_rate, resource)
    return _json(render.forecast(view), 200)


@router.get(
    "/v1/accounts/{account_id}/grants/{grant_id}",
    operation_id="getGrant",
    summary="One grant",
    response_model=GrantDetailResponse,
    responses=documented(401, 403, 404, 422, 503),
    tags=["credits"],
)
@requires(Scope.READ)
async def get_grant(
    account_id: AccountId,
    grant_id: Annotated[int, Path(ge=1, le=MAX_VALUE), QueryInt],
    request: Request,
) -> Any:
    return await _ledger(request).grant_view(account_id, grant_id)


@router.post(
    "/v1/accounts/{account_id}/grants/{grant_id}/void",
    operation_id="voidGrant",
    openapi_extra=WITH_IDEMPOTENCY_KEY,
    summary="Void a grant",
    status_code=200,
    response_model=VoidResponse,
    responses={
        200: {"headers": REPLAYED_HEADER},
        **documented(400, 401, 403, 404, 409, 413, 415, 422, 503),
    },
    tags=["credits"],
)
@requires(Scope.GRANT)
async def void_grant(
    account_id: AccountId,
    grant_id: Annotated[int, Path(ge=1, le=MAX_VALUE), QueryInt],
    body: Annotated[VoidRequest, Body(openapi_examples=VOID_EXAMPLES)],
    request: Request,
) -> Any:
    """Remove what is left of a grant issued by mistake, at `timestamp` (a `void` ledger
    entry records the amount removed). Credits it already paid and debt it already settled
    stay as they were. Unknown account or grant: 404; already voided: 409 (`grant-already-
    voided`); `timestamp` before the grant's own: 422. A write like any other: it moves the
    account's clock, takes an `Idempotency-Key`, and is a batch operation (`void`)."""
    idem = idempotency_of(request, f"void/{grant_id}", account_id, body)
    result = await _ledger(request).void(account_id, grant_id, body.timestamp, idem)
    if isinstance(result, Replay):
        return replayed(result)
    return _json(render.void(result), render.VOID_STATUS)


@router.get(
    "/v1/accounts/{account_id}/ledger",
    operation_id="listLedgerEntries",
    summary="Ledger history, cursor-paginated",
    response_model=LedgerPage,
    responses={
        **documented(401, 403, 404, 422, 503),
        409: {
            "model": Problem,
            "description": (
                "`cursor-gone`: `after` names an entry a late write undid (an expiration that "
                "no longer happens): page again from an earlier cursor or from the start."
            ),
        },
    },
    tags=["credits"],
)
@requires(Scope.READ)
async def list_ledger_entries(
    account_id: AccountId,
    request: Request,
    after: Annotated[
        int,
        Query(ge=0, le=MAX_VALUE, description="Return entries with sequence > after."),
        QueryInt,
    ] = 0,
    limit: Annotated[
        int, Query(ge=1, le=LEDGER_PAGE_MAX, description="Page size, 1 to 1000."), QueryInt
    ] = 100,
) -> Any:
    """Every change to the account in order (grants, consumptions, expirations), each with
    the balance, available credits and debt right after it."""
    entries, watermark = await _ledger(request).entries(account_id, after, limit + 1)
    more = len(entries) > limit
    page = entries[:limit]
    return {
        "account_id": account_id,
        "entries": [render.entry(e, watermark) for e in page],
        "next_after": page[-1].sequence if more else None,
    }


@router.put(
    "/v1/accounts/{account_id}/settings",
    operation_id="putAccountSettings",
    summary="Set the account's lateness window",
    response_model=AccountSettingsResponse,
    responses=documented(401, 403, 404, 422, 503),
    tags=["credits"],
)
@requires(Scope.ADMIN)
async def put_account_settings(
    account_id: AccountId,
    request: Request,
    body: Annotated[AccountSettingsRequest, Body(openapi_examples=SETTINGS_EXAMPLES)],
) -> Any:
    """SPEC section 6: how far behind its clock the account accepts writes (null: the
    service's setting). Lowering the window moves the watermark forward at once (writes it
    passes become final); raising it never moves the watermark back. Setting the same value
    again changes nothing. Unknown accounts are 404 (settings do not create accounts)."""
    settings = await _ledger(request).set_lateness_window(account_id, body.lateness_window)
    return dataclasses.asdict(settings)


@router.get(
    "/v1/accounts/{account_id}/settings",
    operation_id="getAccountSettings",
    summary="The account's lateness window and watermark",
    response_model=AccountSettingsResponse,
    responses=documented(401, 403, 404, 422, 503),
    tags=["credits"],
)
@requires(Scope.READ)
async def get_account_settings(account_id: AccountId, request: Request) -> Any:
    """The lateness window in force (and whether it is the service's), the clock and the
    watermark. Changes nothing."""
    return dataclasses.asdict(await _ledger(request).settings(account_id))


@router.get(
    "/v1/accounts",
    operation_id="listAccounts",
    summary="Accounts, in byte order of their id, cursor-paginated",
    response_model=AccountPage,
    responses={
        **documented(401, 403, 422, 503),
        403: {
            "model": Problem,
            "description": (
                "The API key lacks the scope credits:read. (A key limited to an account "
                "prefix is not refused: it is shown the accounts within its prefix.)"
            ),
        },
        422: {
            "model": Problem,
            "description": "A query parameter is invalid, out of range, unknown or repeated.",
        },
    },
    tags=["credits"],
)
@requires(Scope.READ)
async def list_accounts(
    request: Request,
    prefix: Annotated[
        str,
        Query(
            max_length=ACCOUNT_ID_MAX_CHARS,
            pattern=ACCOUNT_PREFIX_PATTERN,
            description=(
                "Only accounts whose id starts with this (case-sensitive; empty or omitted: "
                "every account). Empty, or the start of a valid account id."
            ),
            examples=["team-a:"],
        ),
    ] = "",
    after: Annotated[
        str,
        Query(
            max_length=ACCOUNT_ID_MAX_CHARS,
            pattern=ACCOUNT_PREFIX_PATTERN,
            description=(
                "Only accounts whose id comes after this one in byte order: the previous "
                "page's `next_after`. Empty or omitted: from the first."
            ),
        ),
    ] = "",
    limit: Annotated[
        int, Query(ge=1, le=ACCOUNT_PAGE_MAX, description="Page size, 1 to 1000."), QueryInt
    ] = 100,
) -> Any:
    """The accounts that exist (a write was accepted on them; a failed request creates
    none), in byte order of `account_id` (ASCII: `-` `.` digits `:` upper case `_` lower
    case, so `A` before `a` and `team-a-x` before `team-a:x`), each with its balance,
    available credits and debt at its clock, as getBalance answers without `timestamp`.
    Pages of at most 1,000: pass `next_after` as `after` for the next page.

    An API key limited to an account prefix lists only the accounts within it: the accounts
    listed start with both the key's prefix and `prefix`. When the two exclude each other
    (a key for `team-a:` asking for `prefix=team-b:`) the answer is an empty page, not an
    error. Changes nothing."""
    visible = visible_prefix(request.state.api_key, prefix)
    if visible is None:
        return {"accounts": [], "next_after": None}
    page = await _ledger(request).accounts(visible, after, limit)
    return dataclasses.asdict(page)


# -- probes and version: public, no API key ---------------------------------------------

NOT_READY: dict[int | str, dict[str, Any]] = {
    503: {
        "model": Problem,
        "description": "Not ready: storage failed and the process needs a restart, or the "
        "database is unreachable; `detail` says which. Also when the process is overloaded.",
    }
}
OVERLOADED_ONLY: dict[int | str, dict[str, Any]] = {
    503: {
        "model": Problem,
        "description": "Only when the process is overloaded (every connection busy); never "
        "because of storage.",
    }
}


@router.get(
    "/livez",
    operation_id="getLiveness",
    summary="Liveness: the process answers",
    response_model=Health,
    responses=OVERLOADED_ONLY,
    tags=["operations"],
)
@public
async def livez() -> Any:
    """200 while the process runs and its event loop answers. Never touches storage: a
    database outage makes the service unready (`/readyz`), not dead, so an orchestrator
    that restarts on a failed liveness probe does not restart every replica because the
    database is down."""
    return {"status": "ok"}


async def _readiness(request: Request) -> Any:
    ledger = _ledger(request)
    if not await ledger.ready():
        raise ServiceUnavailable(ledger.failure or "the database is unreachable")
    return {"status": "ok"}


@router.get(
    "/readyz",
    operation_id="getReadiness",
    summary="Readiness: storage reachable, service not degraded",
    response_model=Health,
    responses=NOT_READY,
    tags=["operations"],
)
@public
async def readyz(request: Request) -> Any:
    """200 when the service can serve: its storage is reachable (PostgreSQL answers a
    trivial query) and it is not degraded (an embedded store whose database file was
    deleted or replaced, or whose commit failed, refuses everything until a restart).
    Otherwise 503, a problem document whose `detail` says why."""
    return await _readiness(request)


@router.get(
    "/healthz",
    operation_id="getHealth",
    summary="Readiness (alias of /readyz)",
    response_model=Health,
    responses=NOT_READY,
    tags=["operations"],
)
@public
async def healthz(request: Request) -> Any:
    """The same answer as `/readyz`, kept for the probes and clients that use this path."""
    return await _readiness(request)


@dataclasses.dataclass(frozen=True, slots=True)
class About:
    """What ``GET /version`` answers, fixed when the service starts."""

    version: str
    storage: str
    schema_version: int | None


@router.get(
    "/version",
    operation_id="getVersion",
    summary="Service version and storage schema version",
    response_model=VersionInfo,
    responses=OVERLOADED_ONLY,
    tags=["operations"],
)
@public
async def version(request: Request) -> Any:
    """The installed gpu-credits version, the storage backend, and the schema version the
    storage was at when this process started, after applying its migrations (null for
    `memory`, which has no schema). Read once at startup: this never touches storage."""
    about = request.app.state.about
    assert isinstance(about, About)
    return dataclasses.asdict(about)


# -- metrics ------------------------------------------------------------------------------

METRICS_MEDIA_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@router.get(
    "/metrics",
    operation_id="getMetrics",
    summary="Prometheus metrics of this process",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition format (OpenMetrics when the `Accept` "
            "header asks for `application/openmetrics-text`).",
            "content": {
                METRICS_MEDIA_TYPE: {"schema": {"type": "string"}},
                "application/openmetrics-text; version=1.0.0; charset=utf-8": {
                    "schema": {"type": "string"}
                },
            },
        },
        401: {
            "model": Problem,
            "description": "Missing or unknown API key (when keys are configured and "
            "GPU_CREDITS_METRICS_PUBLIC is false, the default).",
        },
        403: {
            "model": Problem,
            "description": "The API key lacks the scope metrics:read, or is limited to an "
            "account prefix (metrics are over every account).",
        },
        404: {"model": Problem, "description": "Metrics are off (GPU_CREDITS_METRICS=false)."},
    },
    tags=["operations"],
    # An API key with metrics:read, or none when GPU_CREDITS_METRICS_PUBLIC is true.
    openapi_extra={"security": [{SECURITY_SCHEME_NAME: []}, {}]},
)
@public
async def metrics(request: Request) -> Response:
    """Counters and histograms of this process, for Prometheus: requests by route template,
    method and status with their latency; ledger operations by kind and result; credits
    granted, consumed, expired and voided; debt outstanding; idempotent replays;
    authentication failures; storage commit latency and group sizes; batch sizes; late
    writes and restatements. No label holds an account id. Needs an API key with the scope
    `metrics:read` and no account prefix, unless GPU_CREDITS_METRICS_PUBLIC is true. Each
    process answers for itself (see README, Metrics)."""
    found = request.app.state.metrics
    if found is None:
        raise Disabled("metrics are off in this service (GPU_CREDITS_METRICS=false)")
    assert isinstance(found, Metrics)
    if not request.app.state.metrics_public:
        _authorize_metrics(request)
    try:
        found.debt = await _ledger(request).outstanding_debt()
    except Exception as exc:  # the database is down: the other metrics still answer
        log.warning("debt outstanding not read for /metrics: %s", exc)
        found.debt = None
    encoder, media_type = choose_encoder(request.headers.get("accept", ""))
    return Response(encoder(found.registry), media_type=media_type)


def _authorize_metrics(request: Request) -> None:
    """What ``LedgerRoute`` does for a scope, here because it depends on a setting."""
    auth = request.app.state.authenticator
    assert isinstance(auth, Authenticator)
    peer = request.client
    key = authenticate(
        auth,
        request.headers.get("authorization"),
        f"{peer.host}:{peer.port}" if peer else "unknown",
    )
    authorize(key, Scope.METRICS, None)
    if key is not None and key.account_prefix:
        raise Forbidden(
            "metrics are over every account: a key limited to an account prefix may not read them"
        )
    request.scope.setdefault("state", {})["api_key"] = key


# -- batches ------------------------------------------------------------------------------

_SCOPE_OF = {
    "grant": Scope.GRANT,
    "consume": Scope.CONSUME,
    "void": Scope.GRANT,
    "balance": Scope.READ,
}
BATCH_ABORTED = ProblemType("batch-aborted", "Atomic batch not applied", 0)


def _to_operation(
    op: GrantOperation | ConsumeOperation | VoidOperation | BalanceOperation,
) -> Operation:
    # Grants and consumptions first: most of a batch.
    if isinstance(op, GrantOperation):
        return GrantOp(
            op.account_id,
            op.amount,
            op.timestamp,
            op.expiry,
            op.name,
            op.metadata,
            op.resources,
        )
    if isinstance(op, ConsumeOperation):
        return ConsumeOp(op.account_id, op.amount, op.timestamp, op.resource)
    if isinstance(op, VoidOperation):
        return VoidOp(op.account_id, op.grant_id, op.timestamp)
    return BalanceOp(op.account_id, op.timestamp, op.resource)


BATCH_PATH = "/v1/batch"


@router.post(
    BATCH_PATH,
    operation_id="applyBatch",
    openapi_extra=WITH_IDEMPOTENCY_KEY,
    summary="Many grants, consumptions and balance reads in one request",
    status_code=200,
    response_model=BatchResponse,
    responses={
        200: {"headers": REPLAYED_HEADER},
        **documented(400, 401, 403, 404, 409, 413, 415, 422, 503),
    },
    tags=["credits"],
)
@requires(ANY_SCOPE)
async def apply_batch(
    body: Annotated[BatchRequest, Body(openapi_examples=BATCH_EXAMPLES)],
    request: Request,
) -> Any:
    """Up to 10,000 operations, each naming its account, applied in the order given and made
    durable with one commit. Each result carries the status and body the single endpoint
    would have answered; one failure does not stop the others. With `"atomic": true` the
    batch is all or nothing: on the first failure nothing is applied, and the answer is a
    problem document with the failing operation's status, `operation_index` and
    `operation_problem`. The key needs the scope of every operation in the batch; an
    `Idempotency-Key` on a batch is scoped to batches."""
    api_key = request.state.api_key
    if api_key is not None:  # None: authentication off, nothing to check
        for index, op in enumerate(body.operations):
            authorize(api_key, _SCOPE_OF[op.op], op.account_id, where=f"operation {index}: ")
    operations = [_to_operation(op) for op in body.operations]
    scope = batch_scope(api_key.key_id if api_key is not None else None)
    idem = idempotency_of(request, "batch", "", body, scope)
    with COLLECTOR.batch_in_flight(len(operations)):
        return await _answer_batch(request, operations, body.atomic, idem)


async def _answer_batch(
    request: Request, operations: list[Operation], atomic: bool, idem: Idempotency | None
) -> Response:
    result = await _ledger(request).batch(operations, atomic, idem)
    if isinstance(result, Replay):
        return replayed(result)
    if result.failed_index is not None:
        index = result.failed_index
        error = result.results[0]
        assert isinstance(error, Exception)
        inner = describe(error)
        return problem_response(
            BATCH_ABORTED,
            f"operation {index} failed, so no operation was applied: {inner.detail}",
            status=inner.kind.status,
            operation_index=index,
            operation_problem=inner.body(),
        )
    if result.answer is not None:  # encoded already, for its Idempotency-Key
        return _json(result.answer.body, result.answer.status_code)
    return _json(render.batch(result), render.BATCH_STATUS)


# -- usage streams ----------------------------------------------------------------------------


def _ndjson(line_schema: str, example: str) -> dict[str, Any]:
    return {
        "schema": {
            "type": "string",
            "format": "binary",
            "description": f"NDJSON: one `{line_schema}` per line.",
        },
        "x-ndjson-line": {"$ref": f"#/components/schemas/{line_schema}"},
        "example": example,
    }


EVENTS_REQUEST_BODY: dict[str, Any] = {
    "required": True,
    "description": (
        "NDJSON (`application/x-ndjson`): one operation per line, each an `EventLine` (a "
        "batch operation `grant`, `consume` or `void` with the client's `id`). Blank lines "
        "are skipped. Limits: GPU_CREDITS_MAX_EVENT_STREAM_BYTES (body), "
        "GPU_CREDITS_MAX_EVENT_LINE_BYTES (line), GPU_CREDITS_MAX_EVENT_LINES (lines)."
    ),
    # NDJSON is a sequence of JSON texts: the body is described as bytes (what a client
    # sends, and what a generated client takes), each line's schema as the extension
    # ``x-ndjson-line`` (OpenAPI 3.2's ``itemSchema``, which 3.1 lacks).
    "content": {NDJSON: _ndjson("EventLine", EVENTS_EXAMPLE)},
}


_STREAM_REFUSES_KEY: Final = (
    "a usage stream takes no Idempotency-Key: each line's id makes a line sent again "
    "harmless (it answers duplicate); resend from the first line without a result"
)


@router.post(
    EVENTS_PATH,
    operation_id="streamEvents",
    summary="A usage stream: one operation per NDJSON line, answered line by line",
    status_code=200,
    openapi_extra={"requestBody": EVENTS_REQUEST_BODY},
    response_class=Response,
    responses={
        200: {
            "description": (
                "NDJSON: one `EventResultLine` per line that is not blank, in order, written "
                "as the lines are committed. A limit reached, a pause longer than "
                "GPU_CREDITS_BODY_TIMEOUT_S or a storage failure ends the stream with an error "
                "line at the line it concerns; the lines answered before it stay committed."
            ),
            "content": {NDJSON: _ndjson("EventResultLine", EVENTS_ANSWER_EXAMPLE)},
        },
        **documented(401, 403, 413, 415, 422, 503),
    },
    tags=["credits"],
)
@requires(ANY_SCOPE)
async def stream_events(request: Request) -> Any:
    """Usage in volume: each line a grant, consumption or void naming its account, with the
    client's `id` for it (unique per account). Lines are applied in order and committed in
    chunks; the answer streams one result line per line as its chunk commits: the status and
    body the single endpoint would answer, a problem document for a line that is invalid,
    forbidden or refused (the stream goes on), or `"duplicate": true` for an id the account
    already applied (nothing changes). A client resumes after a failure by sending again
    from the first line without a result (the lines' ids make that safe: the stream takes
    no `Idempotency-Key`, 422). Each line needs its operation's scope and account; the key
    needs `credits:grant` or `credits:consume`."""
    key = request.state.api_key
    if not may_stream(key):
        raise Forbidden("the API key lacks the scopes credits:grant and credits:consume")
    if not is_ndjson_media_type(request.headers.get("content-type")):
        raise UnsupportedMediaType("the request body must be NDJSON: application/x-ndjson", NDJSON)
    refuse_idempotency_key(request, _STREAM_REFUSES_KEY)
    ledger = _ledger(request)
    if ledger.failure is not None:
        raise ServiceUnavailable(ledger.failure)
    limits = request.app.state.event_stream_limits
    assert isinstance(limits, StreamLimits)
    return EventStream(ledger, key, limits)
