"""Refusals of writes, each a problem document that changes nothing: 409 for a timestamp
before the account's clock, 422 for input outside the domain and for totals past 2^53-1, 400
for malformed JSON, 404 for unknown routes, 405 (with ``Allow``) for wrong methods."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.api import (
    ACCOUNT,
    GOOD_CONSUME,
    GOOD_GRANT,
    JSON,
    MAX,
    PROBLEM_JSON,
    all_entries,
    assert_absent,
    assert_problem,
    before_storage,
    consume,
    error_locs,
    expect,
    grant,
    ok,
    snapshot,
    url,
)

# -- 409: timestamp regression ------------------------------------------------------------


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
        assert problem["watermark"] == 1234  # a lateness window of 0: the clock
        assert "1234" in problem["detail"]
        assert await snapshot(client) == before

    # The same timestamp is fine (non-decreasing, not increasing).
    assert (await _regress(client, operation, 1234)).status_code == (
        201 if operation == "grant" else 200
    )


# -- 422: input outside the domain --------------------------------------------------------


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


@before_storage
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


@before_storage
async def test_other_invalid_bodies_are_422_and_change_nothing(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    ok(await grant(client, 100, 0, 50), 201)
    for label, route, body, field_name in _EXTRA_INVALID:
        with subtests.test(label, route=route, body=body):
            await _assert_rejected_body(client, route, body, field_name)


@before_storage
async def test_body_that_is_not_an_object_is_rejected(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    headers = {"content-type": "application/json"}
    for route in ("grants", "consumptions"):
        for payload in (b"[]", b"5", b'"x"', b"null", b"true", b"", b"{}"):
            with subtests.test(route=route, payload=payload):
                r = await client.post(url("fresh", route), content=payload, headers=headers)
                # Well-formed JSON (an empty body counts as none) that is not the object: 422.
                assert_problem(r, 422)
                await assert_absent(client, "fresh")


# -- 422: totals past 2^53-1 --------------------------------------------------------------


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
    # At 5 the first grant expires, leaving 10: MAX more would overflow, and is rejected
    # without expiring anything or moving the clock.
    problem = assert_problem(await grant(client, MAX, 5, 100), 422)
    assert problem["type"].endswith("total-overflow")
    assert await snapshot(client) == before
    # MAX - 10 more fits exactly once the first grant has expired.
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


# -- 400, 404, 405 ------------------------------------------------------------------------


@before_storage
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
    "/v1/accounts/",
    "/v1/accounts/a",
    "/v1/accounts//balance",
    "/v1/accounts/a/unknown",
    "/v1/accounts/a/balance/extra",
    "/v1/accounts/a/grants/1/extra",
    "/v2/accounts/a/balance",
    "/openapi.yaml",
]


@before_storage
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
    ("POST", "/v1/accounts"),
    ("DELETE", "/v1/accounts"),
    ("POST", "/healthz"),
]


@before_storage
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


@before_storage
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
        ("POST", "/v1/accounts", {"GET"}),
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


# -- many mistakes in one body ------------------------------------------------------------


@before_storage
async def test_a_body_of_many_mistakes_lists_the_first_hundred_and_counts_them_all(
    client: httpx.AsyncClient,
) -> None:
    """A 422 lists the first 100 offending fields (``errors_total`` counts them all) and its
    detail names the first 10: an answer stays small whatever the body holds (before the
    cap, 150 bad operations answered 150 issues and a detail naming each)."""
    operations = [
        {"op": "grant", "account_id": f"a{n}", "amount": -1, "timestamp": 1, "expiry": 5}
        for n in range(150)
    ]
    problem = assert_problem(await client.post("/v1/batch", json={"operations": operations}), 422)
    assert problem["errors_total"] == 150
    assert [e["loc"] for e in problem["errors"]] == [
        ["body", "operations", n, "grant", "amount"] for n in range(100)
    ]
    named = ", ".join(f"body.operations.{n}.grant.amount" for n in range(10))
    assert problem["detail"] == f"invalid request: {named} and 140 more"
    for n in (0, 149):
        await assert_absent(client, f"a{n}")
    # At the cap, all are listed and none is counted apart.
    problem = assert_problem(
        await client.post("/v1/batch", json={"operations": operations[:100]}), 422
    )
    assert len(problem["errors"]) == 100
    assert "errors_total" not in problem
    assert problem["detail"].endswith(" and 90 more")
