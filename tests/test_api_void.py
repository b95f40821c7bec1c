"""``POST /v1/accounts/{id}/grants/{grant_id}/void`` (SPEC section 7): the grant's live
remainder is removed at the void's timestamp; what it already paid or settled stays. A write
like any other: clock, idempotency, batches (op ``void``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.api import (
    ACCOUNT,
    all_entries,
    assert_absent,
    assert_problem,
    before_storage,
    consume,
    error_locs,
    grant,
    ok,
    snapshot,
    url,
)


async def void(
    client: httpx.AsyncClient,
    grant_id: int | str,
    timestamp: Any,
    account_id: str = ACCOUNT,
    key: str | None = None,
) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return await client.post(
        url(account_id, f"grants/{grant_id}/void"), json={"timestamp": timestamp}, headers=headers
    )


async def test_void_removes_the_live_remainder_and_keeps_what_was_paid(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, 100, 0, 10), 201)
    ok(await grant(client, 40, 0, 20), 201)
    paid = ok(await consume(client, 30, 1))
    answer = ok(await void(client, 1, 2))
    assert answer == {
        "account_id": ACCOUNT,
        "grant_id": 1,
        "sequence": 4,
        "timestamp": 2,
        "amount": 70,
        "balance": 40,
        "available": 40,
        "debt": 0,
        "watermark": 2,
        "restated": 0,
    }
    entries = await all_entries(client)
    assert (
        entries[2]["allocation"]
        == paid["allocation"]
        == [{"grant_id": 1, "expiry": 10, "amount": 30, "resources": None}]
    )
    assert entries[3] == {
        "sequence": 4,
        "kind": "void",
        "timestamp": 2,
        "balance": 40,
        "available": 40,
        "debt": 0,
        "grant_id": 1,
        "amount": 70,
        "revision": 0,
        "final": False,
    }
    listed = ok(await client.get(url(ACCOUNT, "grants")))
    assert [g["grant_id"] for g in listed["grants"]] == [2]
    assert ok(await client.get(url(ACCOUNT, "grants/1")))["remaining"] == 0
    # The next consumption draws from what is left: grant 2 only.
    assert ok(await consume(client, 50, 3))["debt"] == 10


async def test_debt_a_grant_settled_stays_settled(client: httpx.AsyncClient) -> None:
    ok(await consume(client, 50, 0))
    settled = ok(await grant(client, 80, 1, 10), 201)
    assert (settled["settled_debt"], settled["retained"]) == (50, 30)
    answer = ok(await void(client, 1, 2))
    assert (answer["amount"], answer["available"], answer["debt"]) == (30, 0, 0)


async def test_a_used_up_or_expired_grant_voids_with_nothing_to_remove(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, 10, 0, 5), 201)
    ok(await grant(client, 10, 0, 50), 201)
    ok(await consume(client, 15, 1))  # grant 1 used up, 5 left of grant 2
    assert ok(await void(client, 1, 2))["amount"] == 0
    ok(await grant(client, 7, 3, 6), 201)  # grant 3 expires at 6
    answer = ok(await void(client, 3, 8))
    assert (answer["amount"], answer["available"]) == (0, 5)
    kinds = [(e["kind"], e.get("grant_id")) for e in await all_entries(client)]
    assert kinds[-2:] == [("expiration", 3), ("void", 3)]


async def test_refusals_change_nothing(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 100, 5, 50), 201)
    before = await snapshot(client)

    assert_problem(await void(client, 2, 6), 404)  # never granted
    assert_problem(await void(client, 1, 4), 422)  # before the grant's own timestamp
    ok(await consume(client, 1, 10))
    before = await snapshot(client)
    problem = assert_problem(await void(client, 1, 9), 409)  # before the account's clock
    assert problem["account_timestamp"] == 10
    assert await snapshot(client) == before

    ok(await void(client, 1, 10))
    before = await snapshot(client)
    again = assert_problem(await void(client, 1, 11), 409)
    assert again["type"].endswith("grant-already-voided")
    assert again["voided_at"] == 10
    assert await snapshot(client) == before


async def test_an_unknown_account_is_404_and_not_created(client: httpx.AsyncClient) -> None:
    assert_problem(await void(client, 1, 0, account_id="nobody"), 404)
    await assert_absent(client, "nobody")


async def test_an_idempotent_void_replays_its_answer(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 100, 0, 10), 201)
    first = await void(client, 1, 1, key="v-1")
    again = await void(client, 1, 1, key="v-1")
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    assert again.headers.get("idempotent-replayed") == "true"
    assert_problem(await void(client, 1, 2, key="v-1"), 422)  # same key, another request
    assert [e["kind"] for e in await all_entries(client)] == ["grant", "void"]


async def test_voids_in_a_batch_see_the_batch_so_far(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 10, 0, 100), 201)
    operations = [
        {"op": "grant", "account_id": ACCOUNT, "amount": 50, "timestamp": 1, "expiry": 100},
        {"op": "void", "account_id": ACCOUNT, "grant_id": 2, "timestamp": 2},
        {"op": "void", "account_id": ACCOUNT, "grant_id": 2, "timestamp": 2},
        {"op": "void", "account_id": ACCOUNT, "grant_id": 1, "timestamp": 3},
        {"op": "void", "account_id": ACCOUNT, "grant_id": 3, "timestamp": 3},
        {"op": "void", "account_id": "nobody", "grant_id": 1, "timestamp": 3},
    ]
    body = ok(await client.post("/v1/batch", json={"operations": operations}))
    assert [(r["op"], r["status"]) for r in body["results"]] == [
        ("grant", 201),
        ("void", 200),
        ("void", 409),
        ("void", 200),
        ("void", 404),
        ("void", 404),
    ]
    assert [r["body"].get("amount") for r in body["results"][1:4:2]] == [50, 10]
    assert ok(await client.get(url(ACCOUNT, "balance")))["available"] == 0
    await assert_absent(client, "nobody")


async def test_an_atomic_batch_with_a_failed_void_applies_nothing(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, 10, 0, 100), 201)
    before = await snapshot(client)
    operations = [
        {"op": "void", "account_id": ACCOUNT, "grant_id": 1, "timestamp": 1},
        {"op": "void", "account_id": ACCOUNT, "grant_id": 1, "timestamp": 1},
    ]
    response = await client.post("/v1/batch", json={"atomic": True, "operations": operations})
    problem = assert_problem(response, 409)
    assert problem["operation_index"] == 1
    assert await snapshot(client) == before


@before_storage
@pytest.mark.parametrize(
    ("grant_id", "body", "loc"),
    [
        pytest.param(1, {}, ["body", "timestamp"], id="no-timestamp"),
        pytest.param(1, {"timestamp": -1}, ["body", "timestamp"], id="negative-timestamp"),
        pytest.param(1, {"timestamp": "1"}, ["body", "timestamp"], id="string-timestamp"),
        pytest.param(1, {"timestamp": 1, "x": 1}, ["body", "x"], id="unknown-member"),
        pytest.param(0, {"timestamp": 1}, ["path", "grant_id"], id="grant-id-zero"),
        pytest.param("1.0", {"timestamp": 1}, ["path", "grant_id"], id="grant-id-not-integer"),
    ],
)
async def test_bad_requests_are_422(
    client: httpx.AsyncClient, grant_id: int | str, body: dict[str, Any], loc: list[str]
) -> None:
    ok(await grant(client, 10, 0, 100), 201)
    before = await snapshot(client)
    response = await client.post(url(ACCOUNT, f"grants/{grant_id}/void"), json=body)
    assert loc in error_locs(assert_problem(response, 422))
    assert await snapshot(client) == before
