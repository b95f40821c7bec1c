"""Credits scoped to GPU classes over HTTP (SPEC section 5), on every backend: Example 3 step
by step, per-class reads, the classes in every answer and entry, batches, limits."""

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
    error_locs,
    ok,
    snapshot,
    url,
)


async def grant(
    client: httpx.AsyncClient,
    amount: int,
    timestamp: int,
    expiry: int,
    resources: list[str] | None = None,
) -> httpx.Response:
    body: dict[str, Any] = {"amount": amount, "timestamp": timestamp, "expiry": expiry}
    if resources is not None:
        body["resources"] = resources
    return await client.post(url(ACCOUNT, "grants"), json=body)


async def consume(
    client: httpx.AsyncClient, amount: int, timestamp: int, resource: str | None = None
) -> httpx.Response:
    body: dict[str, Any] = {"amount": amount, "timestamp": timestamp}
    if resource is not None:
        body["resource"] = resource
    return await client.post(url(ACCOUNT, "consumptions"), json=body)


async def balance(
    client: httpx.AsyncClient, timestamp: int | None = None, resource: str | None = None
) -> dict[str, Any]:
    params = {}
    if timestamp is not None:
        params["timestamp"] = str(timestamp)
    if resource is not None:
        params["resource"] = resource
    return ok(await client.get(url(ACCOUNT, "balance"), params=params))


async def test_example_3(client: httpx.AsyncClient) -> None:
    first = ok(await grant(client, 100, 0, 50, ["h100"]), 201)
    assert first["resources"] == ["h100"]
    assert ok(await grant(client, 40, 0, 30), 201)["resources"] is None

    a100 = ok(await consume(client, 30, 1, "a100"))
    assert (a100["debt"], a100["resource"]) == (0, "a100")
    assert a100["allocation"] == [{"grant_id": 2, "expiry": 30, "amount": 30, "resources": None}]

    h100 = ok(await consume(client, 120, 2, "h100"))
    assert (h100["consumed"], h100["debt_added"], h100["debt"]) == (110, 10, 10)
    assert h100["allocation"] == [
        {"grant_id": 2, "expiry": 30, "amount": 10, "resources": None},
        {"grant_id": 1, "expiry": 50, "amount": 100, "resources": ["h100"]},
    ]

    assert (await balance(client, 3))["balance"] == -10
    assert (await balance(client, 3, "a100"))["balance"] == 0
    kept = ok(await grant(client, 25, 4, 60, ["a100"]), 201)
    assert (kept["settled_debt"], kept["retained"]) == (0, 25)
    at5 = await balance(client, 5)
    assert (at5["balance"], at5["available"], at5["debt"]) == (15, 25, 10)
    h100_at5 = await balance(client, 5, "h100")
    assert (h100_at5["balance"], h100_at5["available"], h100_at5["debt"]) == (-10, 0, 10)
    assert h100_at5["resource"] == "h100"
    settles = ok(await grant(client, 15, 6, 70), 201)
    assert (settles["settled_debt"], settles["retained"]) == (10, 5)
    assert (await balance(client, 6, "h100"))["balance"] == 5
    assert (await balance(client, 6, "a100"))["balance"] == 30
    assert (await balance(client, 6))["balance"] == 30

    # The live grants a class can draw, in the order it would draw them.
    a100_grants = ok(await client.get(url(ACCOUNT, "grants"), params={"resource": "a100"}))
    assert [(g["grant_id"], g["remaining"], g["resources"]) for g in a100_grants["grants"]] == [
        (3, 25, ["a100"]),
        (4, 5, None),
    ]
    assert (a100_grants["available"], a100_grants["debt"]) == (30, 0)
    everything = ok(await client.get(url(ACCOUNT, "grants")))
    assert [g["grant_id"] for g in everything["grants"]] == [3, 4]

    entries = await all_entries(client)
    assert [e.get("resources", e.get("resource")) for e in entries] == [
        ["h100"],
        None,
        "a100",
        "h100",
        ["a100"],
        None,
    ]


async def test_equal_expiry_draws_the_narrower_grant_first(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 10, 0, 50), 201)  # 1: unrestricted
    ok(await grant(client, 10, 0, 50, ["h100", "a100"]), 201)  # 2: two classes
    ok(await grant(client, 10, 0, 50, ["h100"]), 201)  # 3: one class
    drawn = ok(await consume(client, 25, 1, "h100"))["allocation"]
    assert [(a["grant_id"], a["amount"]) for a in drawn] == [(3, 10), (2, 10), (1, 5)]


async def test_a_restricted_grant_settles_only_its_classes_debt(
    client: httpx.AsyncClient,
) -> None:
    ok(await consume(client, 10, 0))  # debt of no class
    ok(await consume(client, 5, 1, "h100"))  # h100 debt
    restricted = ok(await grant(client, 20, 2, 50, ["h100"]), 201)
    assert (restricted["settled_debt"], restricted["retained"]) == (5, 15)
    at3 = await balance(client, 3)
    assert (at3["available"], at3["debt"]) == (15, 10)  # both can be > 0 now
    free = ok(await grant(client, 20, 3, 50), 201)
    assert (free["settled_debt"], free["retained"]) == (10, 10)


async def test_a_consumption_without_a_class_is_paid_by_unrestricted_grants_only(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, 50, 0, 50, ["h100"]), 201)
    answer = ok(await consume(client, 10, 1))
    assert (answer["consumed"], answer["debt"], answer["resource"]) == (0, 10, None)


async def test_batches_and_replays_carry_the_classes(client: httpx.AsyncClient) -> None:
    operations = [
        {
            "op": "grant",
            "account_id": ACCOUNT,
            "amount": 10,
            "timestamp": 0,
            "expiry": 9,
            "resources": ["l4"],
        },
        {"op": "consume", "account_id": ACCOUNT, "amount": 4, "timestamp": 1, "resource": "l4"},
        {"op": "balance", "account_id": ACCOUNT, "timestamp": 2, "resource": "l4"},
    ]
    headers = {"Idempotency-Key": "classes-1"}
    first = await client.post("/v1/batch", json={"operations": operations}, headers=headers)
    again = await client.post("/v1/batch", json={"operations": operations}, headers=headers)
    assert first.status_code == again.status_code == 200
    assert again.content == first.content
    results = first.json()["results"]
    assert results[0]["body"]["resources"] == ["l4"]
    assert results[1]["body"]["resource"] == "l4"
    assert (results[2]["body"]["resource"], results[2]["body"]["balance"]) == ("l4", 6)


async def test_at_most_64_classes_per_account(client: httpx.AsyncClient) -> None:
    for i in range(4):
        classes = [f"c{i * 16 + j}" for j in range(16)]
        ok(await grant(client, 1, 0, 10, classes), 201)
    before = await snapshot(client)
    problem = assert_problem(await grant(client, 1, 0, 10, ["c64"]), 409)
    assert problem["limit"] == 64
    assert_problem(await consume(client, 1, 0, "c65"), 409)
    assert await snapshot(client) == before
    ok(await grant(client, 1, 0, 10, ["c0", "c63"]), 201)  # classes in use: fine


@before_storage
@pytest.mark.parametrize(
    ("body", "loc"),
    [
        pytest.param({"resources": []}, ["body", "resources"], id="empty-list"),
        pytest.param({"resources": [f"c{i}" for i in range(17)]}, ["body", "resources"], id="17"),
        pytest.param({"resources": ["h100", "h100"]}, ["body", "resources"], id="duplicate"),
        pytest.param({"resources": ["-h100"]}, ["body", "resources", 0], id="leading-dash"),
        pytest.param({"resources": ["h100:x"]}, ["body", "resources", 0], id="colon"),
        pytest.param({"resources": ["x" * 33]}, ["body", "resources", 0], id="too-long"),
        pytest.param({"resources": [""]}, ["body", "resources", 0], id="empty-name"),
        pytest.param({"resources": "h100"}, ["body", "resources"], id="not-a-list"),
    ],
)
async def test_bad_resources_are_422(
    client: httpx.AsyncClient, body: dict[str, Any], loc: list[str | int]
) -> None:
    grant_body = {"amount": 1, "timestamp": 0, "expiry": 5, **body}
    problem = assert_problem(await client.post(url(ACCOUNT, "grants"), json=grant_body), 422)
    assert loc in error_locs(problem)
    await assert_absent(client, ACCOUNT)


@before_storage
@pytest.mark.parametrize("resource", ["", "a b", "é", "x" * 33, 5])
async def test_a_bad_resource_is_422(client: httpx.AsyncClient, resource: Any) -> None:
    body = {"amount": 1, "timestamp": 0, "resource": resource}
    problem = assert_problem(await client.post(url(ACCOUNT, "consumptions"), json=body), 422)
    assert ["body", "resource"] in error_locs(problem)
    await assert_absent(client, ACCOUNT)
    if isinstance(resource, str):
        response = await client.get(url(ACCOUNT, "balance"), params={"resource": resource})
        assert ["query", "resource"] in error_locs(assert_problem(response, 422))
