"""``POST /v1/accounts/{id}/grants`` and ``GET .../grants/{grant_id}``: 201 with the grant's
``Location``, what a grant kept, and grant ids that are not ids."""

from __future__ import annotations

import httpx
import pytest

from tests.support.api import (
    ACCOUNT,
    assert_problem,
    balance,
    before_storage,
    consume,
    error_locs,
    expect,
    grant,
    ok,
    url,
)


async def test_grant_is_201_with_location_of_the_grant(client: httpx.AsyncClient) -> None:
    first = await grant(client, 100, 0, 10)
    second = await grant(client, 40, 1, 20)
    assert first.status_code == 201
    assert second.status_code == 201
    assert first.headers["location"] == f"/v1/accounts/{ACCOUNT}/grants/1"
    assert second.headers["location"] == f"/v1/accounts/{ACCOUNT}/grants/2"

    assert ok(await consume(client, 30, 2))["allocation"] == [
        {"grant_id": 1, "expiry": 10, "amount": 30, "resources": None}
    ]
    detail = ok(await client.get(first.headers["location"]))
    assert detail == {
        "account_id": ACCOUNT,
        "grant_id": 1,
        "sequence": 1,
        "timestamp": 0,
        "amount": 100,
        "expiry": 10,
        "settled_debt": 0,
        "retained": 100,
        "resources": None,
        "remaining": 70,
        "name": None,
        "metadata": None,
    }
    expect(
        ok(await client.get(second.headers["location"])),
        {
            "grant_id": 2,
            "sequence": 2,
            "timestamp": 1,
            "amount": 40,
            "expiry": 20,
            "remaining": 40,
            "name": None,
            "metadata": None,
        },
    )

    # A read at the expiry projects it and changes nothing; once a write moves the clock
    # there, the grant is still there, with nothing remaining.
    assert ok(await balance(client, 10))["available"] == 40
    assert ok(await client.get(first.headers["location"]))["remaining"] == 70
    ok(await consume(client, 1, 10))
    assert ok(await client.get(first.headers["location"]))["remaining"] == 0
    problem = assert_problem(await client.get(url(ACCOUNT, "grants/3")), 404)
    assert problem["type"].endswith("grant-not-found")


async def test_grant_swallowed_by_debt_keeps_nothing(client: httpx.AsyncClient) -> None:
    ok(await consume(client, 50, 0))
    r = await grant(client, 30, 1, 10)
    body = ok(r, 201)
    expect(
        body,
        {
            "balance": -20,
            "available": 0,
            "debt": 20,
            "settled_debt": 30,
            "retained": 0,
        },
    )
    detail = ok(await client.get(r.headers["location"]))
    expect(detail, {"settled_debt": 30, "retained": 0, "remaining": 0})
    assert ok(await client.get(url(ACCOUNT, "grants")))["grants"] == []


@before_storage
async def test_invalid_grant_id_is_422(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    ok(await grant(client, 100, 3, 50), 201)
    for grant_id in ["0", "-1", "abc", "1.0", "01", str(2**53)]:
        with subtests.test(grant_id=grant_id):
            r = await client.get(url(ACCOUNT, f"grants/{grant_id}"))
            assert ["path", "grant_id"] in error_locs(assert_problem(r, 422))
