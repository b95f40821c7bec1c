"""Thin HTTP routes: parse and validate (pydantic), call the ledger service, shape the answer.
Errors are raised and mapped to problem documents in ``app.api.problems``."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter

from app.api.auth import authorize
from app.api.problems import ProblemType, describe, documented, problem_response
from app.api.routing import ANY_SCOPE, LedgerRoute, public, requires
from app.api.schemas import (
    LEDGER_PAGE_MAX,
    AccountId,
    BalanceOperation,
    BalanceResponse,
    BatchRequest,
    BatchResponse,
    ConsumeOperation,
    ConsumeRequest,
    ConsumeResponse,
    GrantDetailResponse,
    GrantOperation,
    GrantRequest,
    GrantResponse,
    Health,
    LedgerPage,
    LiveGrantsResponse,
    QueryInt,
)
from app.domain import MAX_VALUE
from app.keys import Scope
from app.ledger import (
    BalanceOp,
    BalanceView,
    BatchOutcome,
    ConsumeOp,
    ConsumptionReceipt,
    GrantOp,
    GrantReceipt,
    Idempotency,
    Ledger,
    Operation,
    Replay,
    ServiceUnavailable,
    batch_scope,
    fingerprint,
)
from app.storage.base import Entry

router = APIRouter(route_class=LedgerRoute)

IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e][\x20-\x7e]{0,254}$"

_IDEMPOTENCY_KEY_RE = re.compile(IDEMPOTENCY_KEY_PATTERN)
# Declared in OpenAPI by hand and read by ``idempotency_key``: a FastAPI Header parameter
# costs a good share of a request in dependency solving (see README, Performance).
IDEMPOTENCY_KEY_PARAMETER: dict[str, Any] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        "Optional, 1 to 255 printable ASCII characters. A retry with the same key and body "
        "returns the original response with `Idempotent-Replayed: true` and changes nothing; "
        "the same key with another body is 422. Scoped to the account (on /v1/batch: to the "
        "API key). Kept for at least 24 hours (GPU_CREDITS_IDEMPOTENCY_TTL_HOURS)."
    ),
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "pattern": IDEMPOTENCY_KEY_PATTERN,
    },
}
WITH_IDEMPOTENCY_KEY: dict[str, Any] = {"parameters": [IDEMPOTENCY_KEY_PARAMETER]}


def idempotency_key(request: Request) -> str | None:
    values = request.headers.getlist("idempotency-key")
    if not values:
        return None
    if len(values) > 1 or not _IDEMPOTENCY_KEY_RE.fullmatch(values[0]):
        raise RequestValidationError(
            [
                {
                    "loc": ("header", "Idempotency-Key"),
                    "msg": "must be one value of 1 to 255 printable ASCII characters",
                    "type": "idempotency_key",
                }
            ]
        )
    return values[0]


REPLAYED_HEADER = {
    "Idempotent-Replayed": {
        "description": "Present and `true` when this is a stored response to a retry.",
        "schema": {"type": "string", "enum": ["true"]},
    }
}

GRANT_EXAMPLES: dict[str, Any] = {
    "example1-first": {
        "summary": "SPEC Example 1: first grant",
        "value": {"amount": 100, "timestamp": 0, "expiry": 10},
    },
    "example1-second": {
        "summary": "SPEC Example 1: a shorter-lived grant",
        "value": {"amount": 50, "timestamp": 2, "expiry": 5},
    },
    "example1-settles-debt": {
        "summary": "SPEC Example 1: a grant that settles 10 of debt",
        "value": {"amount": 30, "timestamp": 12, "expiry": 20},
    },
    "example2": {
        "summary": "SPEC Example 2: a grant that expires at t=5",
        "value": {"amount": 50, "timestamp": 0, "expiry": 5},
    },
}
CONSUME_EXAMPLES: dict[str, Any] = {
    "example1-draws-two-batches": {
        "summary": "SPEC Example 1: 50 from the expiry-5 batch, 20 from expiry-10",
        "value": {"amount": 70, "timestamp": 3},
    },
    "example1-into-debt": {
        "summary": "SPEC Example 1: 80 consumed, 10 become debt",
        "value": {"amount": 90, "timestamp": 8},
    },
    "example2-after-expiry": {
        "summary": "SPEC Example 2: all credits expired, 20 become debt",
        "value": {"amount": 20, "timestamp": 6},
    },
}


def _ledger(request: Request) -> Ledger:
    ledger = request.app.state.ledger
    assert isinstance(ledger, Ledger)
    return ledger


def _json(body: bytes, status_code: int, headers: dict[str, str] | None = None) -> Response:
    return Response(body, status_code=status_code, media_type="application/json", headers=headers)


def _replayed(replay: Replay, headers: dict[str, str] | None = None) -> Response:
    """The stored first answer, byte for byte."""
    return _json(
        replay.body, replay.status_code, {"Idempotent-Replayed": "true", **(headers or {})}
    )


# Receipts are serialised by pydantic straight from the service's dataclasses: the declared
# response models document the same shape (tests hold the two together), and skipping the
# validate-then-serialise round trip FastAPI would do keeps the hot path lean.
_GRANT_JSON: TypeAdapter[GrantReceipt] = TypeAdapter(GrantReceipt)
_CONSUME_JSON: TypeAdapter[ConsumptionReceipt] = TypeAdapter(ConsumptionReceipt)
_BALANCE_JSON: TypeAdapter[BalanceView] = TypeAdapter(BalanceView)


def _render_grant(receipt: GrantReceipt) -> bytes:
    return _GRANT_JSON.dump_json(receipt)


def _render_consume(receipt: ConsumptionReceipt) -> bytes:
    return _CONSUME_JSON.dump_json(receipt)


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
    idem = None
    key = idempotency_key(request)
    if key is not None:
        fp = fingerprint("grant", account_id, body.model_dump())
        idem = Idempotency(key, fp, 201, _render_grant)
    result = await _ledger(request).grant(
        account_id, body.amount, body.timestamp, body.expiry, idem
    )
    if isinstance(result, Replay):
        grant_id = int(json.loads(result.body)["grant_id"])
        return _replayed(result, {"Location": _grant_location(account_id, grant_id)})
    location = _grant_location(account_id, result.grant_id)
    return _json(_render_grant(result), 201, {"Location": location})


@router.post(
    "/v1/accounts/{account_id}/consumptions",
    operation_id="consumeCredits",
    openapi_extra=WITH_IDEMPOTENCY_KEY,
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
    cannot cover becomes debt. `debt` in the answer is the total outstanding debt."""
    idem = None
    key = idempotency_key(request)
    if key is not None:
        fp = fingerprint("consume", account_id, body.model_dump())
        idem = Idempotency(key, fp, 200, _render_consume)
    result = await _ledger(request).consume(account_id, body.amount, body.timestamp, idem)
    if isinstance(result, Replay):
        return _replayed(result)
    return _json(_render_consume(result), 200)


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
) -> Any:
    """`balance` = active credits - outstanding debt. Unknown accounts are 404."""
    return _json(
        _BALANCE_JSON.dump_json(await _ledger(request).balance(account_id, timestamp)), 200
    )


@router.get(
    "/v1/accounts/{account_id}/grants",
    operation_id="listGrants",
    summary="Live grants, in the order they will be consumed",
    response_model=LiveGrantsResponse,
    responses=documented(401, 403, 404, 422, 503),
    tags=["credits"],
)
@requires(Scope.READ)
async def list_grants(account_id: AccountId, request: Request) -> Any:
    """The grants with credits left at the account's latest timestamp, earliest expiry first
    (then grant order): the upcoming expirations. Changes nothing."""
    view, grants = await _ledger(request).live_grants(account_id)
    return {**dataclasses.asdict(view), "grants": grants}


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


def _entry_body(entry: Entry) -> dict[str, Any]:
    return {
        "sequence": entry.seq,
        "kind": entry.kind,
        "timestamp": entry.timestamp,
        "balance": entry.available - entry.debt,
        "available": entry.available,
        "debt": entry.debt,
        **entry.details,
    }


@router.get(
    "/v1/accounts/{account_id}/ledger",
    operation_id="listLedgerEntries",
    summary="Ledger history, cursor-paginated",
    response_model=LedgerPage,
    responses=documented(401, 403, 404, 422, 503),
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
    entries = await _ledger(request).entries(account_id, after, limit + 1)
    more = len(entries) > limit
    page = entries[:limit]
    return {
        "account_id": account_id,
        "entries": [_entry_body(e) for e in page],
        "next_after": page[-1].seq if more else None,
    }


@router.get(
    "/healthz",
    operation_id="getHealth",
    summary="Liveness and readiness",
    response_model=Health,
    responses=documented(503),
    tags=["operations"],
)
@public
async def healthz(request: Request) -> Any:
    ledger = _ledger(request)
    if not await ledger.ready():
        raise ServiceUnavailable(ledger.failure or "the database is unreachable")
    return {"status": "ok"}


# -- batches ------------------------------------------------------------------------------

_SCOPE_OF = {"grant": Scope.GRANT, "consume": Scope.CONSUME, "balance": Scope.READ}
_SUCCESS_STATUS = {GrantReceipt: 201, ConsumptionReceipt: 200, BalanceView: 200}
_OP_NAME = {GrantReceipt: "grant", ConsumptionReceipt: "consume", BalanceView: "balance"}

BatchBodyItem = GrantReceipt | ConsumptionReceipt | BalanceView | dict[str, Any]


@dataclasses.dataclass(slots=True)
class _BatchItem:
    op: str
    status: int
    body: BatchBodyItem


@dataclasses.dataclass(slots=True)
class _BatchBody:
    succeeded: int
    failed: int
    results: list[_BatchItem]


_BATCH_JSON: TypeAdapter[_BatchBody] = TypeAdapter(_BatchBody)

BATCH_ABORTED = ProblemType("batch-aborted", "Atomic batch not applied", 0)

_EXAMPLE_1_OPERATIONS: list[dict[str, Any]] = [
    {"op": "grant", "account_id": "a1", "amount": 100, "timestamp": 0, "expiry": 10},
    {"op": "grant", "account_id": "a1", "amount": 50, "timestamp": 2, "expiry": 5},
    {"op": "consume", "account_id": "a1", "amount": 70, "timestamp": 3},
    {"op": "balance", "account_id": "a1", "timestamp": 4},
    {"op": "consume", "account_id": "a1", "amount": 90, "timestamp": 8},
    {"op": "balance", "account_id": "a1", "timestamp": 8},
    {"op": "grant", "account_id": "a1", "amount": 30, "timestamp": 12, "expiry": 20},
    {"op": "balance", "account_id": "a1", "timestamp": 12},
]
BATCH_EXAMPLES: dict[str, Any] = {
    "example1": {
        "summary": "SPEC Example 1 in one request",
        "value": {"atomic": False, "operations": _EXAMPLE_1_OPERATIONS},
    },
    "atomic": {
        "summary": "All or nothing: usage of two jobs reported together",
        "value": {
            "atomic": True,
            "operations": [
                {"op": "consume", "account_id": "team-a:job-1", "amount": 5, "timestamp": 100},
                {"op": "consume", "account_id": "team-a:job-2", "amount": 7, "timestamp": 100},
            ],
        },
    },
}


def _to_operation(op: GrantOperation | ConsumeOperation | BalanceOperation) -> Operation:
    if isinstance(op, GrantOperation):
        return GrantOp(op.account_id, op.amount, op.timestamp, op.expiry)
    if isinstance(op, ConsumeOperation):
        return ConsumeOp(op.account_id, op.amount, op.timestamp)
    return BalanceOp(op.account_id, op.timestamp)


def _op_name(op: Operation) -> str:
    if isinstance(op, GrantOp):
        return "grant"
    return "consume" if isinstance(op, ConsumeOp) else "balance"


def _render_batch(outcome: BatchOutcome, operations: list[Operation]) -> bytes:
    if outcome.failed_index is not None:
        return b""  # an aborted atomic batch answers with a problem document instead
    items: list[_BatchItem] = []
    failed = 0
    for op, result in zip(operations, outcome.results, strict=True):
        if isinstance(result, Exception):
            failed += 1
            described = describe(result)
            name = _op_name(op)
            items.append(_BatchItem(name, described.kind.status, described.body()))
        else:
            kind = type(result)
            items.append(_BatchItem(_OP_NAME[kind], _SUCCESS_STATUS[kind], result))
    return _BATCH_JSON.dump_json(_BatchBody(len(items) - failed, failed, items))


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
    for index, op in enumerate(body.operations):
        authorize(api_key, _SCOPE_OF[op.op], op.account_id, where=f"operation {index}: ")
    operations = [_to_operation(op) for op in body.operations]

    def render(outcome: BatchOutcome) -> bytes:
        return _render_batch(outcome, operations)

    idem = None
    key = idempotency_key(request)
    if key is not None:
        fp = fingerprint("batch", "", body.model_dump())
        scope = batch_scope(api_key.key_id if api_key is not None else None)
        idem = Idempotency(key, fp, 200, lambda _: b"", scope)  # batch bodies come from render
    result = await _ledger(request).batch(operations, body.atomic, idem, render)
    if isinstance(result, Replay):
        return _replayed(result)
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
    return _json(result.body, 200)
