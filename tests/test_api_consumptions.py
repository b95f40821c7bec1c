"""``POST /v1/accounts/{id}/consumptions``: 200 with what active credits covered and the
debt; the largest amounts and times."""

from __future__ import annotations

import httpx

from tests.support.api import (
    ACCOUNT,
    MAX,
    consume,
    expect,
    grant,
    ok,
)


async def test_consumption_is_200(client: httpx.AsyncClient) -> None:
    r = await consume(client, 5, 0)
    assert r.status_code == 200
    assert "location" not in r.headers
    expect(
        ok(r),
        {
            "account_id": ACCOUNT,
            "timestamp": 0,
            "balance": -5,
            "available": 0,
            "debt": 5,
            "consumed": 0,
            "debt_added": 5,
            "sequence": 1,
            "allocation": [],
        },
    )


async def test_largest_values_are_accepted(client: httpx.AsyncClient) -> None:
    body = ok(await grant(client, MAX, MAX - 1, MAX), 201)
    expect(body, {"balance": MAX, "available": MAX, "timestamp": MAX - 1, "expiry": MAX})
    body = ok(await consume(client, MAX, MAX))
    # The grant expired at MAX: everything becomes debt.
    expect(body, {"balance": -MAX, "debt": MAX, "consumed": 0, "timestamp": MAX})
