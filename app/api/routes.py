"""Thin HTTP routes: parse and validate (pydantic), call the ledger service, shape the answer.
Errors are raised and mapped to problem documents in ``app.api.problems``."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Header, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from app.api.auth import require
from app.api.problems import documented
from app.api.schemas import (
    LEDGER_PAGE_MAX,
    AccountId,
    BalanceResponse,
    ConsumeRequest,
    ConsumeResponse,
    GrantDetailResponse,
    GrantRequest,
    GrantResponse,
    Health,
    LedgerPage,
    LiveGrantsResponse,
    QueryInt,
)
from app.api.strict_json import StrictJsonRoute
from app.domain import MAX_VALUE
from app.keys import Scope
from app.ledger import Idempotency, Ledger, Replay, ServiceUnavailable, fingerprint
from app.storage.base import Entry


def reject_unknown_query(request: Request) -> None:
    """Unknown or repeated query parameters are 422, like unknown body members: a typo such
    as ``?timestmap=5`` must not silently answer at another time."""
    route = request.scope.get("route")
    declared = {p.alias for p in route.dependant.query_params} if route is not None else set()
    issues = []
    seen: set[str] = set()
    for name, _ in request.query_params.multi_items():
        if name not in declared:
            issues.append(("query", name, "Unknown query parameter", "extra_forbidden"))
        elif name in seen:
            issues.append(("query", name, "Query parameter given more than once", "repeated"))
        seen.add(name)
    if issues:
        raise RequestValidationError(
            [{"loc": (where, name), "msg": msg, "type": kind} for where, name, msg, kind in issues]
        )


router = APIRouter(route_class=StrictJsonRoute)

IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7e][\x20-\x7e]{0,254}$"

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description=(
            "Optional, 1 to 255 printable ASCII characters, scoped to the account. A retry with "
            "the same key and body returns the original response with `Idempotent-Replayed: "
            "true` and changes nothing; the same key with another body is 422. Keys are kept "
            "for at least 24 hours (GPU_CREDITS_IDEMPOTENCY_TTL_HOURS)."
        ),
    ),
]

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


def get_ledger(request: Request) -> Ledger:
    ledger = request.app.state.ledger
    assert isinstance(ledger, Ledger)
    return ledger


LedgerDep = Annotated[Ledger, Depends(get_ledger)]


def _replayed(
    replay: Replay, model: type[BaseModel], headers: dict[str, str] | None = None
) -> JSONResponse:
    # Through the response model, so the replay is byte-for-byte the original body.
    return JSONResponse(
        model.model_validate(replay.body).model_dump(mode="json"),
        status_code=replay.status_code,
        headers={"Idempotent-Replayed": "true", **(headers or {})},
    )


def _grant_location(account_id: str, grant_id: int) -> str:
    return f"/v1/accounts/{account_id}/grants/{grant_id}"


@router.post(
    "/v1/accounts/{account_id}/grants",
    operation_id="grantCredits",
    dependencies=[Depends(require(Scope.GRANT)), Depends(reject_unknown_query)],
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
async def grant_credits(
    account_id: AccountId,
    body: Annotated[GrantRequest, Body(openapi_examples=GRANT_EXAMPLES)],
    ledger: LedgerDep,
    response: Response,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """Grant `amount` credits usable from `timestamp` until `expiry` (exclusive). Outstanding
    debt is settled first; only the rest is kept. Creates the account if it is new."""
    idem = None
    if idempotency_key is not None:
        idem = Idempotency(
            idempotency_key, fingerprint("grant", account_id, body.model_dump()), 201
        )
    result = await ledger.grant(account_id, body.amount, body.timestamp, body.expiry, idem)
    if isinstance(result, Replay):
        location = _grant_location(account_id, int(result.body["grant_id"]))
        return _replayed(result, GrantResponse, {"Location": location})
    response.headers["Location"] = _grant_location(account_id, result.grant_id)
    return result


@router.post(
    "/v1/accounts/{account_id}/consumptions",
    operation_id="consumeCredits",
    dependencies=[Depends(require(Scope.CONSUME)), Depends(reject_unknown_query)],
    summary="Consume credits, earliest expiry first",
    status_code=200,
    response_model=ConsumeResponse,
    responses={
        200: {"headers": REPLAYED_HEADER},
        **documented(400, 401, 403, 409, 413, 415, 422, 503),
    },
    tags=["credits"],
)
async def consume_credits(
    account_id: AccountId,
    body: Annotated[ConsumeRequest, Body(openapi_examples=CONSUME_EXAMPLES)],
    ledger: LedgerDep,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    """Consume `amount` credits at `timestamp`, earliest-expiring first. What active credits
    cannot cover becomes debt. `debt` in the answer is the total outstanding debt."""
    idem = None
    if idempotency_key is not None:
        idem = Idempotency(
            idempotency_key, fingerprint("consume", account_id, body.model_dump()), 200
        )
    result = await ledger.consume(account_id, body.amount, body.timestamp, idem)
    if isinstance(result, Replay):
        return _replayed(result, ConsumeResponse)
    return result


@router.get(
    "/v1/accounts/{account_id}/balance",
    operation_id="getBalance",
    dependencies=[Depends(require(Scope.READ)), Depends(reject_unknown_query)],
    summary="Balance at a time",
    response_model=BalanceResponse,
    responses=documented(401, 403, 404, 409, 422, 503),
    tags=["credits"],
)
async def get_balance(
    account_id: AccountId,
    ledger: LedgerDep,
    timestamp: Annotated[
        int | None,
        QueryInt,
        Query(
            ge=0,
            le=MAX_VALUE,
            description=(
                "Answer at this time, advancing the account's clock to it. Omitted: answer at "
                "the account's latest timestamp, changing nothing."
            ),
        ),
    ] = None,
) -> Any:
    """`balance` = active credits - outstanding debt. Unknown accounts are 404."""
    return await ledger.balance(account_id, timestamp)


@router.get(
    "/v1/accounts/{account_id}/grants",
    operation_id="listGrants",
    dependencies=[Depends(require(Scope.READ)), Depends(reject_unknown_query)],
    summary="Live grants, in the order they will be consumed",
    response_model=LiveGrantsResponse,
    responses=documented(401, 403, 404, 422, 503),
    tags=["credits"],
)
async def list_grants(account_id: AccountId, ledger: LedgerDep) -> Any:
    """The grants with credits left at the account's latest timestamp, earliest expiry first
    (then grant order): the upcoming expirations. Changes nothing."""
    view, grants = await ledger.live_grants(account_id)
    return {**dataclasses.asdict(view), "grants": grants}


@router.get(
    "/v1/accounts/{account_id}/grants/{grant_id}",
    operation_id="getGrant",
    dependencies=[Depends(require(Scope.READ)), Depends(reject_unknown_query)],
    summary="One grant",
    response_model=GrantDetailResponse,
    responses=documented(401, 403, 404, 422, 503),
    tags=["credits"],
)
async def get_grant(
    account_id: AccountId,
    grant_id: Annotated[int, QueryInt, Path(ge=1, le=MAX_VALUE)],
    ledger: LedgerDep,
) -> Any:
    return await ledger.grant_view(account_id, grant_id)


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
    dependencies=[Depends(require(Scope.READ)), Depends(reject_unknown_query)],
    summary="Ledger history, cursor-paginated",
    response_model=LedgerPage,
    responses=documented(401, 403, 404, 422, 503),
    tags=["credits"],
)
async def list_ledger_entries(
    account_id: AccountId,
    ledger: LedgerDep,
    after: Annotated[
        int,
        QueryInt,
        Query(ge=0, le=MAX_VALUE, description="Return entries with sequence > after."),
    ] = 0,
    limit: Annotated[
        int, QueryInt, Query(ge=1, le=LEDGER_PAGE_MAX, description="Page size, 1 to 1000.")
    ] = 100,
) -> Any:
    """Every change to the account in order (grants, consumptions, expirations), each with
    the balance, available credits and debt right after it."""
    entries = await ledger.entries(account_id, after, limit + 1)
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
    dependencies=[Depends(reject_unknown_query)],
    summary="Liveness and readiness",
    response_model=Health,
    responses=documented(503),
    tags=["operations"],
)
async def healthz(ledger: LedgerDep) -> Any:
    if not ledger.healthy:
        raise ServiceUnavailable("storage failed; restart required")
    return {"status": "ok"}
