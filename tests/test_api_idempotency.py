"""``Idempotency-Key`` on grants and consumptions: a retry replays the first answer byte for
byte and changes nothing; another body with the key is 422; keys are per account, case
sensitive and validated; a refused request claims no key; concurrent duplicates apply once,
concurrent distinct writes all apply, in order."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.api.idempotent import _fingerprinted
from app.api.schemas import BatchRequest
from app.service.idempotency import fingerprint
from tests.support.api import (
    ACCOUNT,
    GOOD_CONSUME,
    GOOD_GRANT,
    JSON,
    all_entries,
    assert_absent,
    assert_problem,
    balance,
    before_storage,
    consume,
    error_locs,
    grant,
    ok,
    snapshot,
    url,
)


async def _write(
    client: httpx.AsyncClient, operation: str, account_id: str = ACCOUNT, key: str | None = None
) -> httpx.Response:
    if operation == "grant":
        return await grant(client, 100, 1, 50, account_id=account_id, key=key)
    return await consume(client, 30, 1, account_id=account_id, key=key)


@pytest.mark.parametrize("operation", ["grant", "consume"])
async def test_idempotent_retry_replays_the_response(
    client: httpx.AsyncClient, operation: str
) -> None:
    ok(await grant(client, 10, 0, 5), 201)  # an existing grant that expires before the retry
    first = await _write(client, operation, key="retry-1")
    assert first.status_code == (201 if operation == "grant" else 200)
    assert "idempotent-replayed" not in first.headers
    entries = await all_entries(client)

    # Later operations move the account on, its clock past the original timestamp (only a
    # write does: reads are safe), so a retry that were not a replay would be a 409.
    ok(await balance(client, 20))
    ok(await grant(client, 1, 20, 30), 201)
    after = await snapshot(client)

    second = await _write(client, operation, key="retry-1")
    assert second.status_code == first.status_code
    assert second.content == first.content
    assert second.headers["idempotent-replayed"] == "true"
    assert second.headers["content-type"] == first.headers["content-type"]
    assert second.headers.get("location") == first.headers.get("location")
    assert await snapshot(client) == after
    # The same entries, now final: the watermark (the clock) has moved past them.
    assert (await all_entries(client))[: len(entries)] == [{**e, "final": True} for e in entries]

    third = await _write(client, operation, key="retry-1")
    assert third.content == first.content


async def test_idempotency_key_with_another_body_is_422(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 100, 1, 50, key="k1"), 201)
    ok(await consume(client, 5, 1, key="k2"))
    before = await snapshot(client)
    for r in (
        await grant(client, 101, 1, 50, key="k1"),
        await grant(client, 100, 2, 50, key="k1"),
        await grant(client, 100, 1, 51, key="k1"),
        await consume(client, 6, 1, key="k2"),
        # The same key on the other operation.
        await consume(client, 100, 1, key="k1"),
        await grant(client, 5, 1, 50, key="k2"),
    ):
        problem = assert_problem(r, 422)
        assert problem["type"].endswith("idempotency-key-reused")
        assert await snapshot(client) == before


async def test_idempotency_key_on_grants_then_consumptions_is_422(
    client: httpx.AsyncClient,
) -> None:
    ok(await consume(client, 7, 0, key="shared"))
    before = await snapshot(client)
    problem = assert_problem(await grant(client, 7, 0, 10, key="shared"), 422)
    assert problem["type"].endswith("idempotency-key-reused")
    assert await snapshot(client) == before


async def test_idempotency_keys_are_scoped_to_the_account(client: httpx.AsyncClient) -> None:
    a = await grant(client, 100, 1, 50, account_id="a", key="same")
    b = await grant(client, 100, 1, 50, account_id="b", key="same")
    assert a.status_code == b.status_code == 201
    assert "idempotent-replayed" not in b.headers
    assert ok(b, 201)["account_id"] == "b"
    assert b.headers["location"] == "/v1/accounts/b/grants/1"
    assert len(await all_entries(client, "a")) == 1
    assert len(await all_entries(client, "b")) == 1
    # A different body on another account is not a reuse either.
    ok(await consume(client, 1, 1, account_id="c", key="same"))


async def test_idempotency_key_is_case_sensitive(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 1, 0, 50, key="Key"), 201)
    r = await grant(client, 1, 0, 50, key="key")
    assert ok(r, 201)["grant_id"] == 2
    assert "idempotent-replayed" not in r.headers


_INVALID_KEYS: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("256-chars", b"a" * 256),
    ("control", b"a\x01b"),
    ("del", b"ab\x7f"),
    ("tab", b"a\tb"),
    ("non-ascii", "caf\u00e9".encode()),
]


@before_storage
async def test_invalid_idempotency_key_is_422(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    for label, key in _INVALID_KEYS:
        for route, body in (("grants", GOOD_GRANT), ("consumptions", GOOD_CONSUME)):
            with subtests.test(label, route=route):
                headers = {b"idempotency-key": key}
                r = await client.post(url(ACCOUNT, route), json=body, headers=headers)
                assert ["header", "Idempotency-Key"] in error_locs(assert_problem(r, 422))
                await assert_absent(client, ACCOUNT)


async def test_valid_idempotency_keys(client: httpx.AsyncClient, subtests: pytest.Subtests) -> None:
    for i, key in enumerate(["a" * 255, "!", "~ key with spaces ~", "0"]):
        with subtests.test(key=key):
            first = await grant(client, 5, i, 10 + i, key=key)
            second = await grant(client, 5, i, 10 + i, key=key)
            assert ok(first, 201) == ok(second, 201)
            assert "idempotent-replayed" not in first.headers
            assert second.headers["idempotent-replayed"] == "true"
    assert len(await all_entries(client)) == 4


async def test_idempotency_fingerprint_ignores_member_order(client: httpx.AsyncClient) -> None:
    first = await client.post(
        url(ACCOUNT, "grants"),
        content=b'{"amount": 5, "timestamp": 0, "expiry": 10}',
        headers={"content-type": "application/json", "idempotency-key": "order"},
    )
    second = await client.post(
        url(ACCOUNT, "grants"),
        content=b'{"expiry":10,"timestamp":0,"amount":5}',
        headers={"content-type": "application/json", "idempotency-key": "order"},
    )
    assert ok(first, 201) == ok(second, 201)
    assert second.headers["idempotent-replayed"] == "true"
    assert len(await all_entries(client)) == 1


_GRANT_OP: JSON = {"op": "grant", "account_id": "a"}
_CONSUME_OP: JSON = {"op": "consume", "account_id": "b"}


@pytest.mark.parametrize(
    ("body", "stored"),
    [
        (
            {"operations": [{**_GRANT_OP, "amount": 5, "timestamp": 1, "expiry": 9}]},
            "e992ea640cb370070f335701dd9d93ba0e10797e594110716c3d923328413957",
        ),
        (
            {
                "atomic": True,
                "operations": [
                    {
                        **_GRANT_OP,
                        "amount": 5,
                        "timestamp": 1,
                        "expiry": 9,
                        "resources": ["H100"],
                        "name": "n",
                        "metadata": {"k": "v"},
                    },
                    {**_CONSUME_OP, "amount": 3, "timestamp": 2, "resource": "A100"},
                    {"op": "void", "account_id": "a", "grant_id": 1, "timestamp": 3},
                    {"op": "balance", "account_id": "a"},
                    {"op": "balance", "account_id": "a", "timestamp": 4, "resource": "H100"},
                ],
            },
            "fbd0632bf0f2c95b34000c0b76eb5a6a41927f7cc20422760cb5372f6dd083ad",
        ),
    ],
)
def test_a_batch_fingerprint_is_what_earlier_releases_stored(body: JSON, stored: str) -> None:
    """A batch's Idempotency-Key is matched by the fingerprint stored with it: a retry across
    an upgrade must compute the same one (these are what the release before the operations
    became dataclasses computed), whatever classes validate the body."""
    validated = BatchRequest.model_validate(body)
    assert fingerprint("batch", "", _fingerprinted(validated)) == stored


async def test_timestamp_regression_with_idempotency_key_stores_nothing(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, 1, 10, 20), 201)
    assert_problem(await grant(client, 1, 5, 20, key="k"), 409)
    # The rejected request did not claim the key: a different body with it is accepted.
    r = await grant(client, 2, 10, 20, key="k")
    assert ok(r, 201)["amount"] == 2
    assert "idempotent-replayed" not in r.headers


# -- concurrency --------------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["grant", "consume"])
async def test_concurrent_duplicates_apply_once(client: httpx.AsyncClient, operation: str) -> None:
    ok(await grant(client, 10, 0, 100), 201)
    responses = await asyncio.gather(
        *(_write(client, operation, key="concurrent") for _ in range(20))
    )
    statuses = {r.status_code for r in responses}
    assert statuses == {201 if operation == "grant" else 200}
    assert len({r.content for r in responses}) == 1
    replayed = [r.headers.get("idempotent-replayed") for r in responses]
    assert replayed.count("true") == 19
    entries = await all_entries(client)
    assert len(entries) == 2
    expected_available = 110 if operation == "grant" else 0
    assert ok(await balance(client))["available"] == expected_available


async def test_concurrent_duplicates_on_a_new_account(client: httpx.AsyncClient) -> None:
    responses = await asyncio.gather(
        *(grant(client, 7, 0, 9, account_id="new", key="k") for _ in range(20))
    )
    assert {r.status_code for r in responses} == {201}
    assert len({r.content for r in responses}) == 1
    assert len(await all_entries(client, "new")) == 1
    assert ok(await balance(client, account_id="new"))["balance"] == 7


async def test_concurrent_distinct_writes_all_apply_in_order(client: httpx.AsyncClient) -> None:
    responses = await asyncio.gather(
        *(grant(client, i + 1, 0, 100, key=f"k{i}") for i in range(20))
    )
    bodies = [ok(r, 201) for r in responses]
    assert sorted(b["sequence"] for b in bodies) == list(range(1, 21))
    assert sorted(b["grant_id"] for b in bodies) == list(range(1, 21))
    entries = await all_entries(client)
    assert [e["sequence"] for e in entries] == list(range(1, 21))
    running = 0
    for e in entries:
        running += e["amount"]
        assert e["available"] == running
    assert ok(await balance(client))["available"] == sum(range(1, 21))
