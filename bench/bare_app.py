"""The framework's ceiling for bench/http.py: a bare FastAPI endpoint that takes a body of
the same shape as a grant (the same pydantic model) and answers a body of the same size,
with no ledger, storage, auth, limits or middleware behind it."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from app.api.schemas import GrantRequest

app = FastAPI()


@app.post("/v1/accounts/{account_id}/grants", status_code=201)
async def grant(account_id: str, body: GrantRequest) -> dict[str, Any]:
    return {
        "account_id": account_id,
        "grant_id": 1,
        "sequence": 1,
        "timestamp": body.timestamp,
        "amount": body.amount,
        "expiry": body.expiry,
        "balance": body.amount,
        "available": body.amount,
        "debt": 0,
        "settled_debt": 0,
        "retained": body.amount,
    }
