"""HTTP API v1 (SPEC section 3), driven only through HTTP against every storage backend.

Every test gets a fresh app (see ``tests/conftest.py``): the ``client`` fixture runs once per
backend (memory, sqlite on a real file), so each behaviour here is checked on both.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import pytest

from tests.support.api import (
    ACCOUNT,
    JSON,
    MAX,
    PROBLEM_JSON,
    all_entries,
    assert_absent,
    assert_problem,
    balance,
    check_entry_totals,
    consume,
    error_locs,
    expect,
    grant,
    ok,
    paginate,
    snapshot,
    subset,
    url,
)
from tests.support.model import Account
from tests.support.spec_examples import EXAMPLES, Example, Step

# -- SPEC examples -----------------------------------------------------------------------


async def _send(client: httpx.AsyncClient, step: Step) -> httpx.Response:
    args = step.args
    if step.op == "grant":
        return await grant(client, args["amount"], args["timestamp"], args["expiry"])
    if step.op == "consume":
        return await consume(client, args["amount"], args["timestamp"])
    return await balance(client, args["timestamp"])


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
async def test_spec_example(client: httpx.AsyncClient, example: Example) -> None:
    for step in example.steps:
        r = await _send(client, step)
        assert ok(r, step.status) == step.body(ACCOUNT), step
        if step.op == "grant":
            assert r.headers["location"] == url(ACCOUNT, f"grants/{step.answer['grant_id']}")
    assert await all_entries(client) == example.ledger()
    live = ok(await client.get(url(ACCOUNT, "grants")))
    assert live["grants"] == example.live_grants


# -- status codes, Location, unknown accounts --------------------------------------------


async def test_grant_is_201_with_location_of_the_grant(client: httpx.AsyncClient) -> None:
    first = await grant(client, 100, 0, 10)
    second = await grant(client, 40, 1, 20)
    assert first.status_code == 201
    assert second.status_code == 201
    assert first.headers["location"] == f"/v1/accounts/{ACCOUNT}/grants/1"
    assert second.headers["location"] == f"/v1/accounts/{ACCOUNT}/grants/2"

    assert ok(await consume(client, 30, 2))["allocation"] == [
        {"grant_id": 1, "expiry": 10, "amount": 30}
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
        "remaining": 70,
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


# -- the clock and balance reads ---------------------------------------------------------


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
        }
    assert await snapshot(client) == before
    # The clock is still 3: a grant at 3 is accepted, and the batch is still live at 4.
    ok(await grant(client, 1, 3, 9), 201)
    assert ok(await balance(client, 4))["balance"] == 51


async def test_balance_at_an_expiry_drops_the_batch(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 50, 0, 5), 201)
    ok(await grant(client, 7, 0, 6), 201)
    assert ok(await balance(client, 4))["available"] == 57
    assert ok(await balance(client, 5))["available"] == 7  # expiry is exclusive
    assert ok(await balance(client, 6))["available"] == 0
    # Reads projected; nothing moved the clock, so at the clock both grants are live.
    assert ok(await balance(client))["available"] == 57


# -- 409: timestamp regression -----------------------------------------------------------


async def _regress(client: httpx.AsyncClient, operation: str, timestamp: int) -> httpx.Response:
    if operation == "grant":
        return await grant(client, 5, timestamp, timestamp + 100)
    assert operation == "consume"
    return await consume(client, 5, timestamp)


# Balance reads are not here: a read before the clock is as-of (SPEC section 3), never 409.
@pytest.mark.parametrize("operation", ["grant", "consume"])
async def test_timestamp_regression_is_409_and_changes_nothing(
    client: httpx.AsyncClient, operation: str
) -> None:
    ok(await grant(client, 100, 0, 1240), 201)
    ok(await grant(client, 100, 1, 5000), 201)
    ok(await consume(client, 10, 1234), 200)
    before = await snapshot(client)

    for timestamp in (1233, 1, 0):
        r = await _regress(client, operation, timestamp)
        problem = assert_problem(r, 409)
        assert r.headers["content-type"] == PROBLEM_JSON
        assert problem["type"].endswith("timestamp-regression")
        assert problem["account_timestamp"] == 1234
        assert "1234" in problem["detail"]
        assert await snapshot(client) == before

    # The same timestamp is fine (non-decreasing, not increasing).
    assert (await _regress(client, operation, 1234)).status_code == (
        201 if operation == "grant" else 200
    )


async def test_timestamp_regression_with_idempotency_key_stores_nothing(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, 1, 10, 20), 201)
    assert_problem(await grant(client, 1, 5, 20, key="k"), 409)
    # The rejected request did not claim the key: a different body with it is accepted.
    r = await grant(client, 2, 10, 20, key="k")
    assert ok(r, 201)["amount"] == 2
    assert "idempotent-replayed" not in r.headers


# -- 422: input outside the domain -------------------------------------------------------

GOOD_GRANT: JSON = {"amount": 10, "timestamp": 5, "expiry": 10}
GOOD_CONSUME: JSON = {"amount": 10, "timestamp": 5}
_BAD_VALUES: list[tuple[str, Any]] = [
    ("true", True),
    ("false", False),
    ("float", 1.0),
    ("float-fraction", 1.5),
    ("string", "5"),
    ("null", None),
    ("list", [5]),
    ("object", {"value": 5}),
    ("zero", 0),
    ("negative", -1),
    ("past-max", 2**53),
    ("huge", 10**100),
]


def _invalid_bodies(base: JSON, name: str) -> list[tuple[str, JSON]]:
    """(label, body) pairs in which only the member ``name`` of ``base`` is invalid."""
    cases = [(label, {**base, name: value}) for label, value in _BAD_VALUES]
    if name == "timestamp":
        cases = [(label, body) for label, body in cases if label != "zero"]  # 0 is valid
    cases.append(("missing", {k: v for k, v in base.items() if k != name}))
    return cases


_EXTRA_INVALID: list[tuple[str, str, JSON, str]] = [
    ("expiry-equals-timestamp", "grants", {**GOOD_GRANT, "expiry": 5}, "expiry"),
    ("expiry-before-timestamp", "grants", {**GOOD_GRANT, "expiry": 4}, "expiry"),
    ("expiry-0", "grants", {"amount": 1, "timestamp": 0, "expiry": 0}, "expiry"),
    ("timestamp-max", "grants", {"amount": 1, "timestamp": MAX, "expiry": MAX}, "expiry"),
    ("unknown-field", "grants", {**GOOD_GRANT, "note": "x"}, "note"),
    ("wrong-case", "grants", {"Amount": 10, "timestamp": 5, "expiry": 10}, "Amount"),
    ("unknown-field", "consumptions", {**GOOD_CONSUME, "note": "x"}, "note"),
    ("consume-with-expiry", "consumptions", {**GOOD_CONSUME, "expiry": 10}, "expiry"),
]


async def _assert_rejected_body(
    client: httpx.AsyncClient, route: str, body: JSON, field_name: str
) -> None:
    # On an account that does not exist yet: it is not created.
    problem = assert_problem(await client.post(url("fresh", route), json=body), 422)
    assert ["body", field_name] in error_locs(problem), problem
    await assert_absent(client, "fresh")
    # On an existing account: nothing changes, not even the clock.
    before = await snapshot(client)
    problem = assert_problem(await client.post(url(ACCOUNT, route), json=body), 422)
    assert ["body", field_name] in error_locs(problem), problem
    assert await snapshot(client) == before


@pytest.mark.parametrize(
    ("route", "base", "field_name"),
    [
        ("grants", GOOD_GRANT, "amount"),
        ("grants", GOOD_GRANT, "timestamp"),
        ("grants", GOOD_GRANT, "expiry"),
        ("consumptions", GOOD_CONSUME, "amount"),
        ("consumptions", GOOD_CONSUME, "timestamp"),
    ],
)
async def test_invalid_member_is_422_naming_it_and_changes_nothing(
    client: httpx.AsyncClient, subtests: pytest.Subtests, route: str, base: JSON, field_name: str
) -> None:
    ok(await grant(client, 100, 0, 50), 201)
    for label, body in _invalid_bodies(base, field_name):
        with subtests.test(label, body=body):
            await _assert_rejected_body(client, route, body, field_name)


async def test_other_invalid_bodies_are_422_and_change_nothing(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    ok(await grant(client, 100, 0, 50), 201)
    for label, route, body, field_name in _EXTRA_INVALID:
        with subtests.test(label, route=route, body=body):
            await _assert_rejected_body(client, route, body, field_name)


async def test_body_that_is_not_an_object_is_rejected(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    headers = {"content-type": "application/json"}
    for route in ("grants", "consumptions"):
        for payload in (b"[]", b"5", b'"x"', b"null", b"true", b"", b"{}"):
            with subtests.test(route=route, payload=payload):
                r = await client.post(url("fresh", route), content=payload, headers=headers)
                assert r.status_code in (400, 422), r.text  # "" may count as malformed
                assert_problem(r)
                await assert_absent(client, "fresh")


async def test_largest_values_are_accepted(client: httpx.AsyncClient) -> None:
    body = ok(await grant(client, MAX, MAX - 1, MAX), 201)
    expect(body, {"balance": MAX, "available": MAX, "timestamp": MAX - 1, "expiry": MAX})
    body = ok(await consume(client, MAX, MAX))
    # The grant expired at MAX: everything becomes debt.
    expect(body, {"balance": -MAX, "debt": MAX, "consumed": 0, "timestamp": MAX})


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
            assert_problem(r)
            await assert_absent(client, "fresh")


async def test_largest_balance_timestamp_is_accepted(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 100, 3, 50), 201)
    assert ok(await balance(client, MAX)) == {
        "account_id": ACCOUNT,
        "timestamp": MAX,
        "balance": 0,
        "available": 0,
        "debt": 0,
    }


async def test_invalid_ledger_query_is_422(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    ok(await grant(client, 100, 3, 50), 201)
    cases = [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"limit": "1.0"}, "limit"),
        ({"limit": "abc"}, "limit"),
        ({"after": "-1"}, "after"),
        ({"after": "x"}, "after"),
        ({"after": str(2**53)}, "after"),
    ]
    for params, name in cases:
        with subtests.test(params=params):
            r = await client.get(url(ACCOUNT, "ledger"), params=params)
            assert ["query", name] in error_locs(assert_problem(r, 422))
    assert (
        len(ok(await client.get(url(ACCOUNT, "ledger"), params={"limit": "1000"}))["entries"]) == 1
    )


async def test_invalid_grant_id_is_422(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    ok(await grant(client, 100, 3, 50), 201)
    for grant_id in ["0", "-1", "abc", "1.0", "01", str(2**53)]:
        with subtests.test(grant_id=grant_id):
            r = await client.get(url(ACCOUNT, f"grants/{grant_id}"))
            assert ["path", "grant_id"] in error_locs(assert_problem(r, 422))


# (raw path segment, whether it reaches the route (422) or misses it (404), a valid id that
# looks like it and must not spring into existence)
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


async def test_invalid_account_id_is_rejected_and_creates_nothing(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    for raw, reaches_route, lookalike in _BAD_ACCOUNT_IDS:
        for method, tail, body in _ACCOUNT_ROUTES:
            with subtests.test(account_id=raw, method=method, tail=tail):
                r = await client.request(method, f"/v1/accounts/{raw}/{tail}", json=body)
                problem = assert_problem(r)
                if reaches_route:
                    assert r.status_code == 422
                    assert ["path", "account_id"] in error_locs(problem)
                else:
                    assert r.status_code in (404, 422)
                await assert_absent(client, lookalike)


# -- 422: totals past 2^53-1 -------------------------------------------------------------


async def test_available_total_overflow_is_422_and_changes_nothing(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, MAX, 0, 100), 201)
    before = await snapshot(client)
    for r in (await grant(client, MAX, 1, 100), await grant(client, 1, 2, 100)):
        problem = assert_problem(r, 422)
        assert problem["type"].endswith("total-overflow")
        assert await snapshot(client) == before
    # The clock did not move to 2: a call at 0 is still allowed.
    assert ok(await consume(client, 1, 0))["available"] == MAX - 1
    assert ok(await grant(client, 1, 0, 100), 201)["available"] == MAX


async def test_overflow_counts_only_live_credits(client: httpx.AsyncClient) -> None:
    ok(await grant(client, MAX - 10, 0, 5), 201)
    ok(await grant(client, 10, 0, 100), 201)
    before = await snapshot(client)
    # At 5 the first batch expires, leaving 10: MAX more would overflow, and is rejected
    # without expiring anything or moving the clock.
    problem = assert_problem(await grant(client, MAX, 5, 100), 422)
    assert problem["type"].endswith("total-overflow")
    assert await snapshot(client) == before
    # MAX - 10 more fits exactly once the first batch has expired.
    body = ok(await grant(client, MAX - 10, 5, 100), 201)
    assert body["available"] == MAX
    kinds = [e["kind"] for e in await all_entries(client)]
    assert kinds == ["grant", "grant", "expiration", "grant"]


async def test_debt_total_overflow_is_422_and_changes_nothing(client: httpx.AsyncClient) -> None:
    assert ok(await consume(client, MAX, 0))["debt"] == MAX
    before = await snapshot(client)
    for r in (await consume(client, 1, 1), await consume(client, MAX, 2)):
        problem = assert_problem(r, 422)
        assert problem["type"].endswith("total-overflow")
        assert await snapshot(client) == before
    body = ok(await grant(client, MAX, 0, 10), 201)
    expect(body, {"debt": 0, "settled_debt": MAX, "retained": 0, "balance": 0})


async def test_debt_overflow_boundary(client: httpx.AsyncClient) -> None:
    ok(await consume(client, MAX - 5, 0))  # debt MAX - 5: 6 more would pass the limit
    before = await snapshot(client)
    assert_problem(await consume(client, 6, 3), 422)
    assert await snapshot(client) == before
    assert ok(await consume(client, 5, 3))["debt"] == MAX


# -- 400, 404, 405 -----------------------------------------------------------------------


async def test_malformed_json_is_400(client: httpx.AsyncClient, subtests: pytest.Subtests) -> None:
    headers = {"content-type": "application/json"}
    for route in ("grants", "consumptions"):
        for payload in (b"{bad", b'{"amount": 1,', b"{'amount': 1}", b"\xff\xfe", b"{} {}"):
            with subtests.test(route=route, payload=payload):
                r = await client.post(url(ACCOUNT, route), content=payload, headers=headers)
                problem = assert_problem(r, 400)
                assert problem["type"].endswith("malformed-json")
                await assert_absent(client, ACCOUNT)


_UNKNOWN_ROUTES = [
    "/",
    "/v1",
    "/v1/accounts",
    "/v1/accounts/",
    "/v1/accounts/a",
    "/v1/accounts//balance",
    "/v1/accounts/a/unknown",
    "/v1/accounts/a/balance/extra",
    "/v1/accounts/a/grants/1/extra",
    "/v2/accounts/a/balance",
    "/openapi.yaml",
]


async def test_unknown_route_is_404_problem(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    for path in _UNKNOWN_ROUTES:
        for method in ("GET", "POST", "DELETE"):
            with subtests.test(method=method, path=path):
                problem = assert_problem(await client.request(method, path, json={}), 404)
                assert problem["type"].endswith("not-found")


_WRONG_METHODS: list[tuple[str, str]] = [
    ("DELETE", "/v1/accounts/a/grants"),
    ("PUT", "/v1/accounts/a/grants"),
    ("GET", "/v1/accounts/a/consumptions"),
    ("DELETE", "/v1/accounts/a/consumptions"),
    ("POST", "/v1/accounts/a/balance"),
    ("PATCH", "/v1/accounts/a/balance"),
    ("POST", "/v1/accounts/a/ledger"),
    ("DELETE", "/v1/accounts/a/grants/1"),
    ("POST", "/healthz"),
]


async def test_wrong_method_is_405_problem(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    for method, path in _WRONG_METHODS:
        with subtests.test(method=method, path=path):
            r = await client.request(method, path, json=GOOD_GRANT)
            problem = assert_problem(r, 405)
            assert problem["type"].endswith("method-not-allowed")
            assert method in problem["detail"]
            assert r.headers["allow"]
            await assert_absent(client, "a")


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        pytest.param(
            "DELETE",
            "/v1/accounts/a/grants",
            {"GET", "POST"},
        ),
        ("GET", "/v1/accounts/a/consumptions", {"POST"}),
        ("POST", "/v1/accounts/a/balance", {"GET"}),
        ("POST", "/v1/accounts/a/ledger", {"GET"}),
        ("DELETE", "/v1/accounts/a/grants/1", {"GET"}),
        ("POST", "/healthz", {"GET"}),
    ],
)
async def test_405_allow_header_lists_every_allowed_method(
    client: httpx.AsyncClient, method: str, path: str, allowed: set[str]
) -> None:
    """RFC 9110 §15.5.6: a 405 carries Allow with the target resource's supported methods."""
    r = await client.request(method, path, json=GOOD_GRANT)
    assert_problem(r, 405)
    assert {m.strip() for m in r.headers["allow"].split(",")} == allowed


# -- Idempotency-Key ---------------------------------------------------------------------


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
    ok(await grant(client, 10, 0, 5), 201)  # an existing batch that expires before the retry
    first = await _write(client, operation, key="retry-1")
    assert first.status_code in (200, 201)
    assert "idempotent-replayed" not in first.headers
    entries = await all_entries(client)

    # Later operations move the account on (and past the original timestamp).
    ok(await balance(client, 20))
    after = await snapshot(client)

    second = await _write(client, operation, key="retry-1")
    assert second.status_code == first.status_code
    assert second.content == first.content
    assert second.headers["idempotent-replayed"] == "true"
    assert second.headers["content-type"] == first.headers["content-type"]
    assert second.headers.get("location") == first.headers.get("location")
    assert await snapshot(client) == after
    assert (await all_entries(client))[: len(entries)] == entries

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


# -- ledger history ----------------------------------------------------------------------


async def test_ledger_kinds_and_expiration_entries(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 100, 0, 5), 201)
    ok(await grant(client, 20, 1, 7), 201)
    ok(await grant(client, 30, 1, 5), 201)
    ok(await consume(client, 60, 2))  # 60 from grant 1 (expiry 5, granted first)
    assert ok(await balance(client, 6))["available"] == 20
    consumed = ok(await consume(client, 25, 8))  # grant 2 expired at 7; 25 become debt

    entries = await all_entries(client)
    assert [e["sequence"] for e in entries] == list(range(1, len(entries) + 1))
    assert [(e["kind"], e["timestamp"]) for e in entries] == [
        ("grant", 0),
        ("grant", 1),
        ("grant", 1),
        ("consumption", 2),
        ("expiration", 5),  # grant 1's remaining 40
        ("expiration", 5),  # grant 3's 30, same expiry: grant order
        ("expiration", 7),
        ("consumption", 8),
    ]
    expect(
        entries[3],
        {
            "amount": 60,
            "consumed": 60,
            "debt_added": 0,
            "available": 90,
            "debt": 0,
            "allocation": [{"grant_id": 1, "expiry": 5, "amount": 60}],
        },
    )
    expect(
        entries[4],
        {
            "grant_id": 1,
            "expiry": 5,
            "amount": 40,
            "available": 50,
            "debt": 0,
            "balance": 50,
        },
    )
    expect(entries[5], {"grant_id": 3, "expiry": 5, "amount": 30, "available": 20})
    expect(entries[6], {"grant_id": 2, "expiry": 7, "amount": 20, "available": 0})
    consumption = entries[7]
    for name in ("sequence", "timestamp", "balance", "available", "debt", "amount", "consumed"):
        assert consumption[name] == consumed[name], name
    assert consumption["allocation"] == consumed["allocation"] == []
    assert consumption["debt_added"] == 25
    for entry in entries:
        check_entry_totals(entry)


async def test_expiration_without_any_read_is_recorded_by_the_next_write(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, 50, 0, 5), 201)
    ok(await grant(client, 10, 9, 20), 201)
    entries = await all_entries(client)
    assert [(e["kind"], e["timestamp"], e["sequence"]) for e in entries] == [
        ("grant", 0, 1),
        ("expiration", 5, 2),
        ("grant", 9, 3),
    ]
    assert ok(await client.get(url(ACCOUNT, "grants/2")))["sequence"] == 3


async def test_ledger_pagination(client: httpx.AsyncClient) -> None:
    for i in range(12):
        ok(await grant(client, 1, i, 100), 201)
    full = await all_entries(client)
    assert [e["sequence"] for e in full] == list(range(1, 13))
    for limit in (1, 3, 4, 5, 12, 13, 1000):
        assert await paginate(client, limit) == full, limit

    page = ok(await client.get(url(ACCOUNT, "ledger"), params={"limit": "5", "after": "5"}))
    assert [e["sequence"] for e in page["entries"]] == [6, 7, 8, 9, 10]
    assert page["next_after"] == 10
    page = ok(await client.get(url(ACCOUNT, "ledger"), params={"limit": "5", "after": "10"}))
    assert [e["sequence"] for e in page["entries"]] == [11, 12]
    assert page["next_after"] is None
    page = ok(await client.get(url(ACCOUNT, "ledger"), params={"after": "12"}))
    assert page == {"account_id": ACCOUNT, "entries": [], "next_after": None}
    page = ok(await client.get(url(ACCOUNT, "ledger"), params={"after": str(MAX)}))
    assert page["entries"] == []
    # The default page holds up to 100.
    page = ok(await client.get(url(ACCOUNT, "ledger")))
    assert len(page["entries"]) == 12


async def test_ledger_default_page_size_is_100(client: httpx.AsyncClient) -> None:
    for i in range(101):
        ok(await consume(client, 1, i))
    page = ok(await client.get(url(ACCOUNT, "ledger")))
    assert len(page["entries"]) == 100
    assert page["next_after"] == 100
    assert len(await paginate(client, 1000)) == 101


@pytest.mark.parametrize("seed", [7, 2026])
async def test_ledger_reconciles_with_balances(client: httpx.AsyncClient, seed: int) -> None:
    rng = random.Random(seed)
    model = Account(ACCOUNT)
    t = 0
    expect(ok(await grant(client, 50, 0, 10), 201), model.grant(50, 0, 10))
    for _ in range(300):
        t += rng.choice([0, 0, 1, 1, 2, 3, 8])
        roll = rng.random()
        if roll < 0.45:
            amount, expiry = rng.randint(1, 100), t + rng.randint(1, 12)
            body = ok(await grant(client, amount, t, expiry), 201)
            expect(body, model.grant(amount, t, expiry))
        elif roll < 0.75:
            amount = rng.randint(1, 120)
            body = ok(await consume(client, amount, t))
            expect(body, model.consume(amount, t))
        elif roll < 0.86:
            body = ok(await balance(client, t))
            assert body == model.read_balance(t)  # a projection
        elif roll < 0.92:
            asked = rng.randint(0, max(model.clock, 1))
            assert ok(await balance(client, asked)) == model.read_balance(asked)
        elif roll < 0.96:
            assert ok(await balance(client)) == model.read_balance()
        elif model.clock > 0:
            problem = assert_problem(await consume(client, 1, model.clock - 1), 409)
            assert problem["account_timestamp"] == model.clock

    entries = await paginate(client, 97)
    assert {e["kind"] for e in entries} == {"grant", "consumption", "expiration"}
    assert any(e["debt"] > 0 for e in entries), "the run should include debt"
    assert any(e["kind"] == "grant" and e["settled_debt"] > 0 for e in entries)
    assert [e["sequence"] for e in entries] == list(range(1, len(entries) + 1))
    assert len(entries) == len(model.entries)
    for got, expected in zip(entries, model.entries, strict=True):
        assert subset(got, expected) == expected

    # Replaying the entries from zero reproduces every entry's totals and the final balance.
    available = debt = 0
    last_timestamp = 0
    for entry in entries:
        kind = entry["kind"]
        if kind == "grant":
            assert entry["settled_debt"] + entry["retained"] == entry["amount"]
            assert entry["settled_debt"] <= debt
            available += entry["retained"]
            debt -= entry["settled_debt"]
        elif kind == "consumption":
            assert entry["consumed"] + entry["debt_added"] == entry["amount"]
            assert sum(a["amount"] for a in entry["allocation"]) == entry["consumed"]
            available -= entry["consumed"]
            debt += entry["debt_added"]
        else:
            assert kind == "expiration"
            assert entry["timestamp"] == entry["expiry"]
            available -= entry["amount"]
        assert entry["timestamp"] >= last_timestamp, "entries are in time order"
        last_timestamp = entry["timestamp"]
        assert (entry["available"], entry["debt"]) == (available, debt), entry
        check_entry_totals(entry)
    final = ok(await balance(client))
    assert (final["available"], final["debt"], final["balance"]) == (
        available,
        debt,
        available - debt,
    )
    assert final == model.read_balance()
    live = ok(await client.get(url(ACCOUNT, "grants")))
    assert live == model.live_grants()


# -- live grants -------------------------------------------------------------------------


async def test_live_grants_in_consumption_order(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 10, 0, 30), 201)  # 1
    ok(await grant(client, 20, 0, 10), 201)  # 2
    ok(await grant(client, 30, 0, 30), 201)  # 3
    ok(await grant(client, 40, 1, 5), 201)  # 4
    ok(await grant(client, 50, 1, 10), 201)  # 5
    body = ok(await client.get(url(ACCOUNT, "grants")))
    expect(
        body,
        {
            "account_id": ACCOUNT,
            "timestamp": 1,
            "balance": 150,
            "available": 150,
            "debt": 0,
        },
    )
    assert body["grants"] == [
        {"grant_id": 4, "expiry": 5, "remaining": 40},
        {"grant_id": 2, "expiry": 10, "remaining": 20},
        {"grant_id": 5, "expiry": 10, "remaining": 50},
        {"grant_id": 1, "expiry": 30, "remaining": 10},
        {"grant_id": 3, "expiry": 30, "remaining": 30},
    ]

    # 25 used from grant 4 (15 left); at 6 grant 4 has expired; then grant 2 used up and
    # 5 taken from grant 5.
    ok(await consume(client, 25, 2))
    ok(await consume(client, 25, 6))
    body = ok(await client.get(url(ACCOUNT, "grants")))
    assert body["grants"] == [
        {"grant_id": 5, "expiry": 10, "remaining": 45},
        {"grant_id": 1, "expiry": 30, "remaining": 10},
        {"grant_id": 3, "expiry": 30, "remaining": 30},
    ]
    assert body["available"] == 85
    # Reading changes nothing.
    assert ok(await client.get(url(ACCOUNT, "grants"))) == body

    # A read at 10 projects grant 5's expiry; the list (at the clock, 6) is unchanged.
    assert ok(await balance(client, 10))["available"] == 40
    assert [g["grant_id"] for g in ok(await client.get(url(ACCOUNT, "grants")))["grants"]] == [
        5,
        1,
        3,
    ]
    ok(await consume(client, 100, 11))
    body = ok(await client.get(url(ACCOUNT, "grants")))
    assert body["grants"] == []
    expect(body, {"balance": -60, "available": 0, "debt": 60})


# -- health ------------------------------------------------------------------------------


async def test_healthz(client: httpx.AsyncClient) -> None:
    r = await client.get("/healthz")
    assert ok(r) == {"status": "ok"}


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
