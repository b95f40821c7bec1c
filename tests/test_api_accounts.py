"""Accounts: created by their first write, 404 to every read before it (creating nothing),
independent of each other; which ``account_id`` values are valid, and that an invalid one is
refused wherever it appears without bringing a look-alike account into existence."""

from __future__ import annotations

import httpx
import pytest

from tests.support.api import (
    JSON,
    all_entries,
    assert_absent,
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

_UNKNOWN_ACCOUNT_READS: list[tuple[str, dict[str, str]]] = [
    ("balance", {}),
    ("balance", {"timestamp": "5"}),
    ("grants", {}),
    ("grants/1", {}),
    ("ledger", {}),
    ("ledger", {"after": "3", "limit": "2"}),
]


async def test_reading_an_unknown_account_is_404_and_creates_nothing(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    for tail, params in _UNKNOWN_ACCOUNT_READS:
        with subtests.test(tail=tail, params=params):
            r = await client.get(url("ghost", tail), params=params)
            problem = assert_problem(r, 404)
            assert problem["type"].endswith("account-not-found")
            await assert_absent(client, "ghost")
    # No read advanced a clock either: a write at 0 is fine and starts the ledger.
    body = ok(await grant(client, 1, 0, 1, account_id="ghost"), 201)
    expect(body, {"grant_id": 1, "sequence": 1, "timestamp": 0})


async def test_accounts_are_independent(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 10, 100, 200, account_id="a"), 201)
    ok(await grant(client, 20, 0, 5, account_id="b"), 201)  # b's clock is its own
    assert ok(await balance(client, account_id="a"))["balance"] == 10
    assert ok(await balance(client, account_id="b"))["balance"] == 20
    assert ok(await consume(client, 25, 1, account_id="b"))["debt"] == 5
    assert ok(await balance(client, account_id="a"))["balance"] == 10


async def test_valid_account_ids(client: httpx.AsyncClient, subtests: pytest.Subtests) -> None:
    for account_id in ["a" * 128, "Z", "0", "Team-A.b_c:9-x", "9.:_-"]:
        with subtests.test(account_id=account_id):
            body = ok(await grant(client, 3, 0, 9, account_id=account_id), 201)
            assert body["account_id"] == account_id
            assert ok(await balance(client, account_id=account_id))["balance"] == 3
            assert len(await all_entries(client, account_id)) == 1


# (raw path segment, whether it reaches the route (422) or misses every route (404), a valid
# id that looks like it and must not spring into existence)
_BAD_ACCOUNT_IDS: list[tuple[str, bool, str]] = [
    ("a" * 129, True, "a" * 128),
    (".abc", True, "abc"),
    ("-abc", True, "abc"),
    ("_abc", True, "abc"),
    (":abc", True, "abc"),
    ("a%2Fb", False, "ab"),  # an encoded '/': a route miss
    ("a b", True, "ab"),
    ("a%20b", True, "ab"),
    ("caf\u00e9", True, "caf"),
    ("\u0430bc", True, "abc"),  # Cyrillic a
    ("a%00b", True, "ab"),
    ("a!b", True, "ab"),
    ("a*b", True, "ab"),
    ("a%25b", True, "ab"),
]


_ACCOUNT_ROUTES: list[tuple[str, str, JSON | None]] = [
    ("POST", "grants", {"amount": 10, "timestamp": 5, "expiry": 10}),
    ("POST", "consumptions", {"amount": 10, "timestamp": 5}),
    ("GET", "balance", None),
    ("GET", "grants", None),
    ("GET", "grants/1", None),
    ("GET", "ledger", None),
]


@before_storage
async def test_invalid_account_id_is_rejected_and_creates_nothing(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    for raw, reaches_route, lookalike in _BAD_ACCOUNT_IDS:
        for method, tail, body in _ACCOUNT_ROUTES:
            with subtests.test(account_id=raw, method=method, tail=tail):
                r = await client.request(method, f"/v1/accounts/{raw}/{tail}", json=body)
                if reaches_route:
                    problem = assert_problem(r, 422)
                    assert ["path", "account_id"] in error_locs(problem)
                else:
                    problem = assert_problem(r, 404)
                    assert problem["type"].endswith(":not-found"), problem  # no route
                await assert_absent(client, lookalike)
