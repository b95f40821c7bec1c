"""``GET /v1/accounts/{id}/balance[?timestamp=T]``: reads are safe (they never move the
clock); at or after the clock a projection, before it the state as of then, without ``T``
the state at the clock; and the query parameters it refuses."""

from __future__ import annotations

import httpx
import pytest

from tests.support.api import (
    ACCOUNT,
    JSON,
    MAX,
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


async def test_balance_reads_never_move_the_clock(client: httpx.AsyncClient) -> None:
    """Issue 9, item 2: a read-only key read at 2^53-1 and moved the clock there for good,
    so every credit expired and every later grant was refused. Reads are safe now."""
    ok(await grant(client, 100, 0, 50), 201)
    before = await snapshot(client)
    far = ok(await balance(client, MAX))
    assert far == {
        "account_id": ACCOUNT,
        "timestamp": MAX,
        "balance": 0,  # projected: the grant has expired by then
        "available": 0,
        "debt": 0,
        "resource": None,
        "watermark": 0,  # the clock (a lateness window of 0)
        "final": False,  # the future is never final
    }
    assert ok(await balance(client, 7))["timestamp"] == 7
    assert await snapshot(client) == before
    assert ok(await balance(client))["timestamp"] == 0

    # Writes at any time from the clock on are still accepted, and nothing expired.
    assert ok(await grant(client, 1, 6, 60), 201)["balance"] == 101
    assert ok(await consume(client, 1, 6))["balance"] == 100
    problem = assert_problem(await consume(client, 1, 5), 409)
    assert problem["account_timestamp"] == 6


async def test_balance_before_the_clock_is_the_state_as_of_then(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, 100, 2, 10), 201)
    ok(await grant(client, 50, 4, 8), 201)
    ok(await consume(client, 70, 5), 200)  # 50 from expiry 8, 20 from expiry 10: 80 left
    ok(await consume(client, 90, 12), 200)  # everything expired at 10: 90 debt
    ok(await grant(client, 30, 20, 40), 201)  # settles 30: 60 debt
    before = await snapshot(client)

    def view(timestamp: int, available: int, debt: int) -> JSON:
        return {
            "account_id": ACCOUNT,
            "timestamp": timestamp,
            "balance": available - debt,
            "available": available,
            "debt": debt,
            "resource": None,
            "watermark": 20,
            "final": timestamp < 20,  # before the watermark (the clock: a window of 0)
        }

    expected = {
        0: view(0, 0, 0),  # before the account's first write
        1: view(1, 0, 0),
        2: view(2, 100, 0),
        3: view(3, 100, 0),
        4: view(4, 150, 0),
        5: view(5, 80, 0),
        9: view(9, 80, 0),
        10: view(10, 0, 0),  # the grant of expiry 10 expired at 10
        11: view(11, 0, 0),
        12: view(12, 0, 90),
        19: view(19, 0, 90),
        20: view(20, 0, 60),  # the clock: the current state
        30: view(30, 0, 60),  # a projection
    }
    for timestamp, want in expected.items():
        assert ok(await balance(client, timestamp)) == want, timestamp
    assert await snapshot(client) == before


async def test_balance_without_timestamp_changes_nothing(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 50, 3, 5), 201)
    before = await snapshot(client)
    for _ in range(3):
        body = ok(await balance(client))
        assert body == {
            "account_id": ACCOUNT,
            "timestamp": 3,
            "balance": 50,
            "available": 50,
            "debt": 0,
            "resource": None,
            "watermark": 3,
            "final": False,
        }
    assert await snapshot(client) == before
    # The clock is still 3: a grant at 3 is accepted, and the grant of 50 is still live at 4.
    ok(await grant(client, 1, 3, 9), 201)
    assert ok(await balance(client, 4))["balance"] == 51


async def test_balance_at_an_expiry_drops_the_live_grant(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 50, 0, 5), 201)
    ok(await grant(client, 7, 0, 6), 201)
    assert ok(await balance(client, 4))["available"] == 57
    assert ok(await balance(client, 5))["available"] == 7  # expiry is exclusive
    assert ok(await balance(client, 6))["available"] == 0
    # Reads projected; nothing moved the clock, so at the clock both grants are live.
    assert ok(await balance(client))["available"] == 57


async def test_largest_balance_timestamp_is_accepted(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 100, 3, 50), 201)
    assert ok(await balance(client, MAX)) == {
        "account_id": ACCOUNT,
        "timestamp": MAX,
        "balance": 0,
        "available": 0,
        "debt": 0,
        "resource": None,
        "watermark": 3,
        "final": False,
    }


@before_storage
async def test_invalid_balance_timestamp_query_is_422(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    ok(await grant(client, 100, 3, 50), 201)
    before = await snapshot(client)
    for raw in ["1.0", "-1", "abc", "+5", "", " 5", "05", "1e3", "0x10", "1_000", str(2**53)]:
        with subtests.test(timestamp=raw):
            r = await client.get(url(ACCOUNT, "balance"), params={"timestamp": raw})
            assert ["query", "timestamp"] in error_locs(assert_problem(r, 422))
            assert await snapshot(client) == before
            r = await client.get(url("fresh", "balance"), params={"timestamp": raw})
            assert ["query", "timestamp"] in error_locs(assert_problem(r, 422))
            await assert_absent(client, "fresh")


@before_storage
@pytest.mark.parametrize(
    ("query", "name"),
    [
        ("timestmap=5", "timestmap"),
        ("timestamp=3&timestamp=4", "timestamp"),
        ("timestamp=3&extra=1", "extra"),
    ],
)
async def test_unknown_or_repeated_query_parameters_are_422_and_change_nothing(
    client: httpx.AsyncClient, query: str, name: str
) -> None:
    assert (await grant(client, 10, 1, 50)).status_code == 201
    before = await snapshot(client)
    problem = assert_problem(await client.get(f"{url(ACCOUNT, 'balance')}?{query}"), 422)
    assert ["query", name] in error_locs(problem)
    assert await snapshot(client) == before
    # The clock did not move: a grant at t=1 is still accepted.
    assert (await grant(client, 1, 1, 50)).status_code == 201
