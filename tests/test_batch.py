"""POST /v1/batch (issue 5, item 1), driven only through HTTP against every storage backend.

The reference for every batch result is the single endpoint: the same operations sent one by
one to ``/v1/accounts/...`` must answer the same status and body, and leave the same ledger.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from app.api import render
from app.api.problems import describe
from app.main import create_app
from app.service.results import BatchOutcome
from app.settings import Settings
from tests.support.api import (
    JSON,
    MAX,
    PROBLEM_JSON,
    assert_absent,
    assert_problem,
    before_storage,
    error_locs,
    ok,
    paginate,
    snapshot,
    url,
)
from tests.support.app_runner import make_settings, running
from tests.support.spec_examples import EXAMPLE_1

BATCH = "/v1/batch"
ROOT = Path(__file__).resolve().parent.parent
DEFAULT_BATCH_CAP = 4 * 1024 * 1024


# -- helpers -----------------------------------------------------------------------------


def g(account_id: str, amount: int, timestamp: int, expiry: int) -> JSON:
    return {
        "op": "grant",
        "account_id": account_id,
        "amount": amount,
        "timestamp": timestamp,
        "expiry": expiry,
    }


def c(account_id: str, amount: int, timestamp: int) -> JSON:
    return {"op": "consume", "account_id": account_id, "amount": amount, "timestamp": timestamp}


def b(account_id: str, timestamp: int | None = None) -> JSON:
    op: JSON = {"op": "balance", "account_id": account_id}
    if timestamp is not None:
        op["timestamp"] = timestamp
    return op


def batch_body(ops: list[JSON], atomic: bool | None = None) -> JSON:
    body: JSON = {"operations": ops}
    if atomic is not None:
        body["atomic"] = atomic
    return body


async def post_batch(
    client: httpx.AsyncClient,
    ops: list[JSON],
    atomic: bool | None = None,
    key: str | None = None,
) -> httpx.Response:
    headers = {} if key is None else {"Idempotency-Key": key}
    return await client.post(BATCH, json=batch_body(ops, atomic), headers=headers)


def batch_ok(response: httpx.Response, n: int | None = None) -> JSON:
    """A 200 batch answer whose counts agree with its results."""
    body = ok(response)
    assert set(body) == {"succeeded", "failed", "results"}, body
    results = body["results"]
    assert isinstance(results, list)
    if n is not None:
        assert len(results) == n
    good = sum(1 for r in results if 200 <= r["status"] < 300)
    assert (body["succeeded"], body["failed"]) == (good, len(results) - good), body
    for r in results:
        assert set(r) == {"op", "status", "body"}, r
        if r["status"] >= 400:
            assert r["body"]["status"] == r["status"], r
            for member in ("type", "title", "detail"):
                assert r["body"][member], r
    return body


async def single(client: httpx.AsyncClient, op: JSON) -> httpx.Response:
    """The same operation through its single endpoint."""
    account_id = op["account_id"]
    if op["op"] == "grant":
        body = {k: op[k] for k in ("amount", "timestamp", "expiry")}
        return await client.post(url(account_id, "grants"), json=body)
    if op["op"] == "consume":
        body = {k: op[k] for k in ("amount", "timestamp")}
        return await client.post(url(account_id, "consumptions"), json=body)
    params = {"timestamp": str(op["timestamp"])} if "timestamp" in op else {}
    return await client.get(url(account_id, "balance"), params=params)


def single_result(op: JSON, response: httpx.Response) -> JSON:
    """What the batch should say for ``op`` given the single endpoint's ``response``."""
    media = response.headers["content-type"].split(";")[0].strip()
    expected_media = PROBLEM_JSON if response.status_code >= 400 else "application/json"
    assert media == expected_media, response.text
    body = response.json()
    if response.status_code >= 400:
        # The id of the request that answered it: a batch's results are no requests of
        # their own (the batch's id is in its X-Request-ID header).
        assert body.pop("request_id") == response.headers["x-request-id"]
    return {"op": op["op"], "status": response.status_code, "body": body}


def with_prefix(ops: list[JSON], prefix: str) -> list[JSON]:
    return [{**op, "account_id": prefix + op["account_id"]} for op in ops]


def normalise(value: Any, prefix: str) -> Any:
    """``value`` with the account-name prefix taken off every string (ids and details)."""
    if isinstance(value, str):
        return re.sub(rf"(?<![A-Za-z0-9._:-]){re.escape(prefix)}(?=[A-Za-z0-9])", "", value)
    if isinstance(value, list):
        return [normalise(v, prefix) for v in value]
    if isinstance(value, dict):
        return {k: normalise(v, prefix) for k, v in value.items()}
    return value


async def account_state(client: httpx.AsyncClient, account_id: str) -> JSON:
    """Everything observable about an account without changing it, incl. each grant."""
    state = dataclasses.asdict(await snapshot(client, account_id))
    if state["ledger_status"] == 200:
        entries = await paginate(client, 1000, account_id)
        state["entries"] = entries
        details = []
        for entry in entries:
            if entry["kind"] == "grant":
                r = await client.get(url(account_id, f"grants/{entry['grant_id']}"))
                details.append(ok(r))
        state["grant_details"] = details
    return state


async def states(client: httpx.AsyncClient, names: list[str], prefix: str) -> JSON:
    return {n: normalise(await account_state(client, prefix + n), prefix) for n in names}


def random_ops(rng: random.Random, n: int, accounts: list[str], failures: bool) -> list[JSON]:
    """A mixed sequence on a few accounts. ``failures``: include timestamp regressions,
    totals past 2^53-1, reads of unknown accounts (all valid by schema, refused by the
    ledger); without: every operation succeeds."""
    clocks = dict.fromkeys(accounts, 0)
    written: set[str] = set()
    ops: list[JSON] = []
    while len(ops) < n:
        if failures and rng.random() < 0.04:
            ops.append(b(f"ghost{rng.randint(0, 1)}", rng.choice([None, 0, 5])))
            continue
        a = rng.choice(accounts)
        if failures and clocks[a] > 0 and rng.random() < 0.08:
            ts = rng.randint(0, clocks[a] - 1)  # a regression (if the clock got there)
        else:
            ts = clocks[a] + rng.choice([0, 0, 1, 1, 2, 3, 7])
            clocks[a] = ts
        roll = rng.random()
        big = failures and rng.random() < 0.03
        if roll < 0.42:
            amount = MAX - rng.randint(0, 5) if big else rng.randint(1, 100)
            ops.append(g(a, amount, ts, ts + rng.randint(1, 12)))
            written.add(a)
        elif roll < 0.75:
            amount = MAX - rng.randint(0, 5) if big else rng.randint(1, 120)
            ops.append(c(a, amount, ts))
            written.add(a)
        elif not failures and a not in written:
            continue  # a read of an account never written is a 404
        elif roll < 0.92:
            ops.append(b(a, ts))
        else:
            ops.append(b(a))
    return ops


# -- every result is what the single endpoint answers -----------------------------------


@pytest.mark.parametrize("seed", [11, 2026])
async def test_results_equal_single_endpoints(client: httpx.AsyncClient, seed: int) -> None:
    rng = random.Random(seed)
    names = ["acct0", "acct1", "acct2"]
    ops = random_ops(rng, 260, names, failures=True)

    expected = []
    for op in with_prefix(ops, "s-"):
        expected.append(normalise(single_result(op, await single(client, op)), "s-"))
    statuses = {r["status"] for r in expected}
    assert {200, 201, 404, 409, 422} <= statuses, "the sequence should exercise every outcome"
    kinds = {r["body"].get("type", "").rsplit(":", 1)[-1] for r in expected}
    assert {"timestamp-regression", "total-overflow", "account-not-found"} <= kinds

    body = batch_ok(await post_batch(client, with_prefix(ops, "b-")), len(ops))
    got = [normalise(r, "b-") for r in body["results"]]
    for index, (want, have) in enumerate(zip(expected, got, strict=True)):
        assert have == want, (index, ops[index])
    good = sum(1 for r in expected if r["status"] < 300)
    assert (body["succeeded"], body["failed"]) == (good, len(ops) - good)

    all_names = [*names, "ghost0", "ghost1"]
    assert await states(client, all_names, "b-") == await states(client, all_names, "s-")


@pytest.mark.parametrize("seed", [5, 99])
async def test_atomic_batch_that_succeeds_applies_everything(
    client: httpx.AsyncClient, seed: int
) -> None:
    rng = random.Random(seed)
    names = ["acct0", "acct1", "acct2", "acct3"]
    ops = random_ops(rng, 150, names, failures=False)

    expected = []
    for op in with_prefix(ops, "s-"):
        result = normalise(single_result(op, await single(client, op)), "s-")
        assert result["status"] < 300, result
        expected.append(result)

    body = batch_ok(await post_batch(client, with_prefix(ops, "b-"), atomic=True), len(ops))
    assert (body["succeeded"], body["failed"]) == (len(ops), 0)
    assert [normalise(r, "b-") for r in body["results"]] == expected
    assert await states(client, names, "b-") == await states(client, names, "s-")


async def test_one_failure_does_not_stop_the_others(client: httpx.AsyncClient) -> None:
    ops = [
        g("a", 100, 5, 10),  # 0: 201
        c("a", 10, 3),  # 1: 409, clock is 5
        b("ghost", 1),  # 2: 404
        g("a", MAX, 5, 10),  # 3: 422, available would pass 2^53-1
        c("a", 30, 6),  # 4: 200
        b("a"),  # 5: 200
        g("n", 1, 0, 1),  # 6: 201, a new account
        b("n", 1),  # 7: 200, the grant expired at 1
        b("a", 4),  # 8: 200, as of 4: before the grant at 5
    ]
    body = batch_ok(await post_batch(client, ops), len(ops))
    results = body["results"]
    assert [(r["op"], r["status"]) for r in results] == [
        ("grant", 201),
        ("consume", 409),
        ("balance", 404),
        ("grant", 422),
        ("consume", 200),
        ("balance", 200),
        ("grant", 201),
        ("balance", 200),
        ("balance", 200),
    ]
    assert (body["succeeded"], body["failed"]) == (6, 3)
    assert results[1]["body"]["account_timestamp"] == 5
    assert results[1]["body"]["type"].endswith(":timestamp-regression")
    assert results[2]["body"]["type"].endswith(":account-not-found")
    assert results[3]["body"]["type"].endswith(":total-overflow")
    assert results[8]["body"] == {
        "account_id": "a",
        "timestamp": 4,
        "balance": 0,
        "available": 0,
        "debt": 0,
        "resource": None,
        "watermark": 6,
        "final": True,  # before the watermark: the clock, with a lateness window of 0
    }
    consumed = results[4]["body"]
    assert (consumed["sequence"], consumed["balance"], consumed["consumed"]) == (2, 70, 30)
    assert results[5]["body"] == {
        "account_id": "a",
        "timestamp": 6,
        "balance": 70,
        "available": 70,
        "debt": 0,
        "resource": None,
        "watermark": 6,
        "final": False,
    }
    assert results[7]["body"]["balance"] == 0

    state = await account_state(client, "a")
    assert [(e["kind"], e["timestamp"]) for e in state["entries"]] == [
        ("grant", 5),
        ("consumption", 6),
    ]
    assert state["balance"]["balance"] == 70
    await assert_absent(client, "ghost")


async def test_the_answer_is_byte_for_byte_the_whole_body_dumped_at_once(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # render.batch writes grants' and consumptions' items itself, in one pass: the bytes
    # must be what pydantic makes of the whole body, for every kind of result.
    outcomes: list[BatchOutcome] = []
    one_pass = render.batch

    def recorded(outcome: BatchOutcome) -> bytes:
        outcomes.append(outcome)
        return one_pass(outcome)

    monkeypatch.setattr(render, "batch", recorded)
    labelled = g("r", 50, 1, 100) | {
        "name": 'Q3 \u00e9t\u00e9 "promo"',
        "metadata": {"k": "v\n"},
        "resources": ["h100", "a100"],
    }
    ops = [
        g("r", 100, 1, 100),
        labelled,
        c("r", 30, 2),
        c("r", 10, 3) | {"resource": "h100"},
        c("r", 500, 4),  # into debt
        c("r", 1, 1),  # 409: before the clock
        {"op": "void", "account_id": "r", "grant_id": 2, "timestamp": 5},
        {"op": "void", "account_id": "r", "grant_id": 9, "timestamp": 5},  # 404
        b("r"),
        b("r", 2),
        b("ghost"),  # 404
        g("s", 7, 1, 2),
    ]
    response = await post_batch(client, ops)
    batch_ok(response, len(ops))
    [outcome] = outcomes
    items = []
    for op, result in zip(outcome.operations, outcome.results, strict=True):
        name, status = render._name_and_status(op)
        if isinstance(result, Exception):
            described = describe(result)
            items.append(render._BatchItem(name, described.kind.status, described.body()))
        else:
            items.append(render._BatchItem(name, status, result))
    failed = sum(isinstance(r, Exception) for r in outcome.results)
    whole = render._BatchBody(len(items) - failed, failed, items)
    assert response.content == TypeAdapter(render._BatchBody).dump_json(whole)


async def test_timed_reads_in_a_batch_change_nothing_and_see_the_batch_so_far(
    client: httpx.AsyncClient,
) -> None:
    """Reads are safe inside a batch too: at or after the clock a projection, before it the
    state as of then, from the stored history or from the batch's own earlier entries."""
    ok(await single(client, g("a", 100, 2, 10)), 201)  # stored history: 100 from t=2
    ops = [
        b("a", 1),  # 0: before the account's first entry
        b("a", 50),  # 1: projection: the grant expires at 10
        g("a", 40, 5, 30),  # 2
        c("a", 150, 12),  # 3: the first grant expired at 10: 40 consumed, 110 debt
        b("a", 3),  # 4: stored history, though the clock has moved past it in this batch
        b("a", 6),  # 5: after the batch's own grant at 5
        b("a", 10),  # 6: the batch's own expiration entry at 10
        b("a", 11),
        b("a", 12),  # 8: the clock
        g("n", 7, 4, 9),  # 9: a new account
        b("n", 3),  # 10: before its first entry
        b("n", 9),  # 11: projection: expired at 9
    ]
    body = batch_ok(await post_batch(client, ops), len(ops))
    figures = {
        i: (r["body"]["timestamp"], r["body"]["available"], r["body"]["debt"])
        for i, r in enumerate(body["results"])
        if r["op"] == "balance"
    }
    assert figures == {
        0: (1, 0, 0),
        1: (50, 0, 0),
        4: (3, 100, 0),
        5: (6, 140, 0),
        6: (10, 40, 0),
        7: (11, 40, 0),
        8: (12, 0, 110),
        10: (3, 0, 0),
        11: (9, 0, 0),
    }
    # The same reads, one by one after the batch, agree: history does not depend on how
    # it was read. (Not read 1: a projection past a clock the batch then moved.)
    for i, (timestamp, available, debt) in figures.items():
        if i == 1:
            continue
        account = ops[i]["account_id"]
        got = ok(await single(client, b(account, timestamp)))
        assert (got["available"], got["debt"]) == (available, debt), (i, got)
    state = await account_state(client, "a")
    assert state["balance"]["timestamp"] == 12  # only the writes moved the clock


async def test_a_batch_of_only_failures_creates_no_account(client: httpx.AsyncClient) -> None:
    body = batch_ok(await post_batch(client, [b("new", 3), b("new")]), 2)
    assert (body["succeeded"], body["failed"]) == (0, 2)
    assert [r["status"] for r in body["results"]] == [404, 404]
    await assert_absent(client, "new")


# -- atomic batches -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failing", "status", "slug", "extra"),
    [
        (c("a", 1, 2), 409, "timestamp-regression", {"account_timestamp": 8}),
        (g("a", MAX, 8, 100), 422, "total-overflow", {}),
        (c("b", MAX, 9), 422, "total-overflow", {}),
        (b("ghost", 1), 404, "account-not-found", {}),
        (b("ghost"), 404, "account-not-found", {}),
        (c("new", 1, 0), 409, "timestamp-regression", {"account_timestamp": 1}),
    ],
)
async def test_atomic_failure_applies_nothing(
    client: httpx.AsyncClient, failing: JSON, status: int, slug: str, extra: JSON
) -> None:
    ok(await single(client, g("a", 100, 0, 50)), 201)
    ok(await single(client, c("b", 10, 0)))  # debt 10
    before = {n: await account_state(client, n) for n in ("a", "b")}

    ops = [
        g("a", 5, 3, 9),
        c("b", 1, 4),
        g("new", 7, 1, 9),
        b("a", 6),  # a read: moves nothing
        g("a", 3, 6, 7),
        c("a", 2, 8),  # grant 3 expired at 7
        failing,
        g("b", 1, 9, 20),
        g("other-new", 1, 1, 2),
    ]
    r = await post_batch(client, ops, atomic=True)
    problem = assert_problem(r, status)
    assert problem["type"].endswith(":batch-aborted"), problem
    assert problem["operation_index"] == 6
    inner = problem["operation_problem"]
    assert isinstance(inner, dict)
    assert inner["type"].endswith(f":{slug}"), inner
    assert inner["status"] == status
    assert inner["title"]
    assert inner["detail"]
    for name, value in extra.items():
        assert inner[name] == value, inner
    assert inner["detail"] in problem["detail"]
    assert "6" in problem["detail"]

    # Nothing applied: every account as it was; new accounts not created.
    assert {n: await account_state(client, n) for n in ("a", "b")} == before
    for name in ("new", "other-new", "ghost"):
        await assert_absent(client, name)
    # The clocks were put back too: writes at earlier times than the batch's still succeed.
    assert ok(await single(client, c("a", 1, 1)))["sequence"] == 2
    assert ok(await single(client, g("b", 1, 1, 5)), 201)["settled_debt"] == 1
    assert ok(await single(client, g("new", 2, 0, 3)), 201)["sequence"] == 1


async def test_atomic_first_failure_is_reported(client: httpx.AsyncClient) -> None:
    ops = [g("a", 1, 5, 9), c("a", 1, 1), b("ghost"), g("a", MAX, 5, 9)]
    problem = assert_problem(await post_batch(client, ops, atomic=True), 409)
    assert problem["operation_index"] == 1
    assert problem["operation_problem"]["account_timestamp"] == 5
    await assert_absent(client, "a")


async def test_atomic_flag_false_is_the_default(client: httpx.AsyncClient) -> None:
    ops = [g("a", 1, 5, 9), c("a", 1, 1)]
    explicit = batch_ok(await post_batch(client, with_prefix(ops, "x-"), atomic=False), 2)
    default = batch_ok(await post_batch(client, with_prefix(ops, "y-")), 2)
    assert normalise(explicit, "x-") == normalise(default, "y-")
    assert [r["status"] for r in default["results"]] == [201, 409]


# -- validation ---------------------------------------------------------------------------

_VALID = g("a", 1, 0, 5)


@before_storage
@pytest.mark.parametrize(
    ("body", "loc"),
    [
        pytest.param({"operations": []}, ["body", "operations"], id="no-operations"),
        pytest.param({"operations": [_VALID] * 10_001}, ["body", "operations"], id="10001"),
        pytest.param({}, ["body", "operations"], id="missing-operations"),
        pytest.param({"operations": _VALID}, ["body", "operations"], id="not-a-list"),
        pytest.param(
            {"operations": [_VALID, {**_VALID, "op": "transfer"}]},
            ["body", "operations", 1],
            id="unknown-op",
        ),
        pytest.param(
            {"operations": [_VALID, {k: v for k, v in _VALID.items() if k != "op"}]},
            ["body", "operations", 1],
            id="no-op",
        ),
        pytest.param(
            {"operations": [_VALID, {**_VALID, "account_id": "-a"}]},
            ["body", "operations", 1, "grant", "account_id"],
            id="account-leading-dash",
        ),
        pytest.param(
            {"operations": [_VALID, c("a b", 1, 1)]},
            ["body", "operations", 1, "consume", "account_id"],
            id="account-space",
        ),
        pytest.param(
            {"operations": [_VALID, b("")]},
            ["body", "operations", 1, "balance", "account_id"],
            id="account-empty",
        ),
        pytest.param(
            {"operations": [_VALID, b("x" * 129)]},
            ["body", "operations", 1, "balance", "account_id"],
            id="account-too-long",
        ),
        pytest.param(
            {"operations": [_VALID, {**_VALID, "account_id": 7}]},
            ["body", "operations", 1, "grant", "account_id"],
            id="account-not-a-string",
        ),
        pytest.param(
            {"operations": [_VALID, {**c("a", 1, 1), "expiry": 9}]},
            ["body", "operations", 1, "consume", "expiry"],
            id="unknown-op-member",
        ),
        pytest.param(
            {"operations": [_VALID], "atomically": True},
            ["body", "atomically"],
            id="unknown-member",
        ),
        pytest.param(
            {"operations": [_VALID], "atomic": "true"}, ["body", "atomic"], id="atomic-str"
        ),
        pytest.param({"operations": [_VALID], "atomic": 1}, ["body", "atomic"], id="atomic-int"),
        pytest.param(
            {"operations": [_VALID], "atomic": None}, ["body", "atomic"], id="atomic-null"
        ),
        pytest.param(
            {"operations": [_VALID, g("a", 0, 1, 5)]},
            ["body", "operations", 1, "grant", "amount"],
            id="amount-zero",
        ),
        pytest.param(
            {"operations": [_VALID, c("a", MAX + 1, 1)]},
            ["body", "operations", 1, "consume", "amount"],
            id="amount-too-big",
        ),
        pytest.param(
            {"operations": [_VALID, g("a", 1, 5, 5)]},
            ["body", "operations", 1, "grant", "expiry"],
            id="expiry-not-after-timestamp",
        ),
        pytest.param(
            {"operations": [_VALID, {**b("a"), "timestamp": "3"}]},
            ["body", "operations", 1, "balance", "timestamp"],
            id="timestamp-string",
        ),
        pytest.param(
            {"operations": [_VALID, {**c("a", 1, 1), "amount": True}]},
            ["body", "operations", 1, "consume", "amount"],
            id="amount-bool",
        ),
    ],
)
async def test_invalid_batches_are_422_and_change_nothing(
    client: httpx.AsyncClient, body: JSON, loc: list[str | int]
) -> None:
    problem = assert_problem(await client.post(BATCH, json=body), 422)
    assert problem["type"].endswith(":validation-error"), problem
    assert loc in error_locs(problem), problem
    await assert_absent(client, "a")


@pytest.mark.parametrize("op", ["grant", "consume", "void", "balance"])
async def test_an_unknown_member_of_an_operation_is_named_as_in_any_body(
    client: httpx.AsyncClient, op: str
) -> None:
    """The operations are pydantic dataclasses, whose own word for a member they do not have
    is "unexpected_keyword_argument": the problem says what a model's would (and a single
    request's does)."""
    operation = {
        "grant": g("a", 1, 1, 5),
        "consume": c("a", 1, 1),
        "void": {"op": "void", "account_id": "a", "grant_id": 1, "timestamp": 1},
        "balance": b("a"),
    }[op]
    problem = assert_problem(
        await client.post(BATCH, json={"operations": [{**operation, "colour": "red"}]}), 422
    )
    assert problem["errors"] == [
        {
            "loc": ["body", "operations", 0, op, "colour"],
            "message": "Extra inputs are not permitted",
            "type": "extra_forbidden",
        }
    ]
    single = {"amount": 1, "timestamp": 1, "expiry": 5, "colour": "red"}
    single_problem = assert_problem(await client.post("/v1/accounts/a/grants", json=single), 422)
    assert [(e["message"], e["type"]) for e in single_problem["errors"]] == [
        ("Extra inputs are not permitted", "extra_forbidden")
    ]
    await assert_absent(client, "a")


async def test_ten_thousand_operations_are_accepted(client: httpx.AsyncClient) -> None:
    ops: list[JSON] = []
    for i in range(10_000):
        account = f"load-{i % 100}"
        ts = i // 100
        ops.append(g(account, 10, ts, ts + 5) if i % 3 else c(account, 7, ts))
    raw = json.dumps(batch_body(ops)).encode()
    assert len(raw) > 64 * 1024, "more than a single request's body cap"

    started = time.perf_counter()
    r = await client.post(BATCH, content=raw, headers={"content-type": "application/json"})
    elapsed = time.perf_counter() - started
    body = batch_ok(r, 10_000)
    assert (body["succeeded"], body["failed"]) == (10_000, 0)
    assert elapsed < 20, f"10,000 operations took {elapsed:.1f} s"

    sequences: dict[str, list[int]] = {}
    for op, result in zip(ops, body["results"], strict=True):
        assert result["body"]["account_id"] == op["account_id"]
        sequences.setdefault(op["account_id"], []).append(result["body"]["sequence"])
    entries = await paginate(client, 1000, "load-7")
    assert [e["sequence"] for e in entries] == list(range(1, len(entries) + 1))
    assert set(sequences["load-7"]) <= {e["sequence"] for e in entries}
    assert len(sequences["load-7"]) == 100


def _padded(ops: list[JSON], size: int) -> bytes:
    """A valid JSON batch body of exactly ``size`` bytes (trailing whitespace)."""
    raw = json.dumps(batch_body(ops)).encode()
    assert len(raw) <= size
    return raw + b" " * (size - len(raw))


async def _post_raw(client: httpx.AsyncClient, raw: bytes) -> httpx.Response:
    return await client.post(BATCH, content=raw, headers={"content-type": "application/json"})


async def test_body_over_the_default_batch_cap_is_413(client: httpx.AsyncClient) -> None:
    ops = [g("a", 1, 0, 5)]
    assert_problem(await _post_raw(client, _padded(ops, DEFAULT_BATCH_CAP + 1)), 413)
    await assert_absent(client, "a")
    batch_ok(await _post_raw(client, _padded(ops, DEFAULT_BATCH_CAP)), 1)
    assert ok(await single(client, b("a")))["balance"] == 1


async def test_batch_cap_is_a_setting(
    backend: str, tmp_path: Path, database_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPU_CREDITS_MAX_BATCH_BODY_BYTES", "2048")
    app = create_app(make_settings(backend, tmp_path / "data", database_url))
    async with running(app) as cl:
        ops = [g("a", 1, 0, 5)]
        problem = assert_problem(await _post_raw(cl, _padded(ops, 2049)), 413)
        assert "2048" in problem["detail"]
        await assert_absent(cl, "a")
        batch_ok(await _post_raw(cl, _padded(ops, 2048)), 1)


# -- Idempotency-Key ----------------------------------------------------------------------

_KEYED_OPS = [g("a", 100, 0, 10), c("b", 5, 1), c("a", 30, 2), b("a", 3), b("ghost")]


async def test_idempotent_batch_replays_byte_for_byte(client: httpx.AsyncClient) -> None:
    first = await post_batch(client, _KEYED_OPS, key="batch-1")
    body = batch_ok(first, len(_KEYED_OPS))
    assert "idempotent-replayed" not in first.headers
    before = {n: await account_state(client, n) for n in ("a", "b")}

    for _ in range(2):
        again = await post_batch(client, _KEYED_OPS, key="batch-1")
        assert again.status_code == 200
        assert again.headers["idempotent-replayed"] == "true"
        assert again.headers["content-type"] == first.headers["content-type"]
        assert again.content == first.content
    # The same body with the members in another order is the same request.
    reordered = {"operations": [dict(reversed(op.items())) for op in _KEYED_OPS]}
    again = await client.post(BATCH, json=reordered, headers={"Idempotency-Key": "batch-1"})
    assert again.headers["idempotent-replayed"] == "true"
    assert again.content == first.content

    assert {n: await account_state(client, n) for n in ("a", "b")} == before
    assert [len(before[n]["entries"]) for n in ("a", "b")] == [2, 1]
    assert body["results"][2]["body"]["sequence"] == 2


@pytest.mark.parametrize(
    "other",
    [
        pytest.param(batch_body([g("a", 101, 0, 10), *_KEYED_OPS[1:]]), id="amount"),
        pytest.param(batch_body(_KEYED_OPS, atomic=True), id="atomic"),
        pytest.param(batch_body(_KEYED_OPS[:-1]), id="one-op-fewer"),
        pytest.param(batch_body(with_prefix(_KEYED_OPS, "z")), id="other-accounts"),
    ],
)
async def test_same_key_other_body_is_422(client: httpx.AsyncClient, other: JSON) -> None:
    batch_ok(await post_batch(client, _KEYED_OPS, key="k"))
    before = {n: await account_state(client, n) for n in ("a", "b", "za", "zb")}
    problem = assert_problem(
        await client.post(BATCH, json=other, headers={"Idempotency-Key": "k"}), 422
    )
    assert problem["type"].endswith(":idempotency-key-reused"), problem
    assert {n: await account_state(client, n) for n in ("a", "b", "za", "zb")} == before


async def test_batch_keys_are_independent_of_account_keys(client: httpx.AsyncClient) -> None:
    headers = {"Idempotency-Key": "shared"}
    grant_body = {"amount": 10, "timestamp": 0, "expiry": 10}
    single_first = await client.post(url("a", "grants"), json=grant_body, headers=headers)
    ok(single_first, 201)

    batch_first = await post_batch(client, [g("a", 20, 1, 10)], key="shared")
    body = batch_ok(batch_first, 1)
    assert "idempotent-replayed" not in batch_first.headers
    assert body["results"][0]["status"] == 201
    assert body["results"][0]["body"]["sequence"] == 2

    single_again = await client.post(url("a", "grants"), json=grant_body, headers=headers)
    assert single_again.headers["idempotent-replayed"] == "true"
    assert single_again.content == single_first.content
    batch_again = await post_batch(client, [g("a", 20, 1, 10)], key="shared")
    assert batch_again.headers["idempotent-replayed"] == "true"
    assert batch_again.content == batch_first.content
    # A key first used by a batch is free on the account, too.
    batch_ok(await post_batch(client, [c("a", 2, 2)], key="batch-only"))
    consumed = await client.post(
        url("a", "consumptions"),
        json={"amount": 1, "timestamp": 2},
        headers={"Idempotency-Key": "batch-only"},
    )
    assert ok(consumed)["sequence"] == 4
    assert "idempotent-replayed" not in consumed.headers
    assert ok(await single(client, b("a")))["balance"] == 27
    assert len((await account_state(client, "a"))["entries"]) == 4


async def test_batch_keys_are_scoped_to_the_api_key(
    keyed: tuple[httpx.AsyncClient, str, str],
) -> None:
    """A batch's Idempotency-Key belongs to the API key that sent it: one namespace for
    every API key would tell one tenant which key names another has used."""
    client, first, second = keyed

    def post(key: str, account: str) -> dict[str, object]:
        return {
            "json": {
                "operations": [
                    {"op": "grant", "account_id": account, "amount": 1, "timestamp": 0, "expiry": 9}
                ]
            },
            "headers": {"authorization": f"Bearer {key}", "idempotency-key": "nightly"},
        }

    a = await client.post("/v1/batch", **post(first, "a"))  # type: ignore[arg-type]
    assert a.status_code == 200
    # Another API key may use the same key name with another body: no 422, no oracle.
    b = await client.post("/v1/batch", **post(second, "b"))  # type: ignore[arg-type]
    assert b.status_code == 200, b.text
    assert b.headers.get("idempotent-replayed") is None
    # Each still replays its own.
    again = await client.post("/v1/batch", **post(first, "a"))  # type: ignore[arg-type]
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.content == a.content


async def test_batch_that_changes_nothing_keeps_no_key(client: httpx.AsyncClient) -> None:
    """Like a failed single request, a batch that changed nothing (only reads, or every
    operation refused) leaves no trace: no stored key (so read-only or failing batches
    cannot fill the key store), and a retry runs again."""
    ops = [b("ghost", 3), b("ghost")]
    first = await post_batch(client, ops, key="reads")
    batch_ok(first, 2)
    again = await post_batch(client, ops, key="reads")
    assert again.content == first.content
    assert again.headers.get("idempotent-replayed") is None
    # The key is free: a batch that does change something may use it, and then keeps it.
    batch_ok(await post_batch(client, [g("ghost", 1, 0, 5)], key="reads"), 1)
    replay = await post_batch(client, [g("ghost", 1, 0, 5)], key="reads")
    assert replay.headers.get("idempotent-replayed") == "true"
    assert_problem(await post_batch(client, ops, key="reads"), 422)


async def test_atomic_failure_with_a_key_applies_nothing(client: httpx.AsyncClient) -> None:
    ops = [g("a", 1, 5, 9), c("a", 1, 1)]
    for _ in range(2):
        problem = assert_problem(await post_batch(client, ops, atomic=True, key="atomic"), 409)
        assert problem["operation_index"] == 1
    await assert_absent(client, "a")


async def test_concurrent_duplicate_batches_apply_once(client: httpx.AsyncClient) -> None:
    ops = [g("a", 5, 0, 10), c("b", 1, 0), g("b", 3, 1, 10)]
    responses = await asyncio.wait_for(
        asyncio.gather(*(post_batch(client, ops, key="dup") for _ in range(12))), timeout=60
    )
    assert {r.status_code for r in responses} == {200}
    assert len({r.content for r in responses}) == 1
    replayed = [r.headers.get("idempotent-replayed") for r in responses]
    assert replayed.count("true") == 11
    assert len((await account_state(client, "a"))["entries"]) == 1
    assert len((await account_state(client, "b"))["entries"]) == 2
    assert ok(await single(client, b("b")))["balance"] == 2


# -- durability ---------------------------------------------------------------------------


async def test_batch_survives_a_restart(tmp_path: Path) -> None:
    settings = make_settings("sqlite", tmp_path / "data")
    names = ["acct0", "acct1", "acct2", "ghost0", "ghost1", "new"]
    ops = random_ops(random.Random(3), 300, names[:3], failures=True)
    keyed = [g("acct0", 1, 1000, 1001), c("acct1", 1, 1000)]

    async with running(create_app(settings)) as cl:
        batch_ok(await post_batch(cl, ops), len(ops))
        # Consumed whole, drawn down and expired within one batch (and so one commit).
        batch_ok(
            await post_batch(
                cl, [g("acct2", 5, 500, 502), c("acct2", 5, 500), g("acct2", 4, 501, 503)]
            )
        )
        batch_ok(await post_batch(cl, [c("acct2", 1, 502), b("acct2", 503)]))
        first = await post_batch(cl, keyed, key="durable")
        batch_ok(first, 2)
        aborted = await post_batch(cl, [g("new", 1, 0, 5), b("ghost0", 1)], atomic=True)
        assert_problem(aborted, 404)
        before = await states(cl, names, "")

    assert before["acct0"]["ledger_status"] == 200
    assert before["new"]["ledger_status"] == 404
    async with running(create_app(settings)) as cl:
        assert await states(cl, names, "") == before
        again = await post_batch(cl, keyed, key="durable")
        assert again.headers["idempotent-replayed"] == "true"
        assert again.content == first.content
        # Sequences continue where they stopped.
        last = before["acct0"]["entries"][-1]["sequence"]
        after = batch_ok(await post_batch(cl, [g("acct0", 1, 1001, 1002), b("acct0")]), 2)
        # The keyed grant expired at 1001: its expiration entry, then the new grant.
        assert after["results"][0]["body"]["sequence"] == last + 2
        entries = await paginate(cl, 1000, "acct0")
        assert [e["sequence"] for e in entries] == list(range(1, last + 3))
        assert [(e["kind"], e["timestamp"]) for e in entries[-2:]] == [
            ("expiration", 1001),
            ("grant", 1001),
        ]


# -- concurrency --------------------------------------------------------------------------

_ABORTED_AMOUNT = 999_999


async def test_concurrent_overlapping_batches(client: httpx.AsyncClient) -> None:
    rng = random.Random(42)
    names = [f"acct{i}" for i in range(6)]
    live_grants: list[list[JSON]] = []
    for _ in range(8):
        order = names[:]
        rng.shuffle(order)
        ops = []
        for i in range(150):
            account = order[i * len(order) // 150]  # accounts in this batch's order
            if rng.random() < 0.5:
                ops.append(g(account, rng.randint(1, 50), 1, 10**6))
            else:
                ops.append(c(account, rng.randint(1, 60), 1))
        live_grants.append(ops)
    aborted = [g(n, _ABORTED_AMOUNT, 1, 10**6) for n in reversed(names)] + [b("ghost")]
    singles = [g(n, 3, 1, 10**6) for n in names]

    async def run() -> list[httpx.Response]:
        calls = [post_batch(client, ops) for ops in live_grants]
        calls.insert(3, post_batch(client, aborted, atomic=True))
        calls.extend(single(client, op) for op in singles)
        return list(await asyncio.gather(*calls))

    responses = await asyncio.wait_for(run(), timeout=120)
    batch_responses = responses[:3] + responses[4 : len(live_grants) + 1]
    assert_problem(responses[3], 404)
    single_responses = responses[len(live_grants) + 1 :]

    # account -> sequence -> the operation and what it answered
    applied: dict[str, dict[int, tuple[JSON, JSON]]] = {n: {} for n in names}
    for ops, response in zip(live_grants, batch_responses, strict=True):
        body = batch_ok(response, len(ops))
        assert body["failed"] == 0
        per_account: dict[str, list[int]] = {}
        for op, result in zip(ops, body["results"], strict=True):
            sequence = result["body"]["sequence"]
            assert sequence not in applied[op["account_id"]]
            applied[op["account_id"]][sequence] = (op, result["body"])
            per_account.setdefault(op["account_id"], []).append(sequence)
        for seqs in per_account.values():
            # Applied in order, and no other request interleaves within one batch.
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    for op, response in zip(singles, single_responses, strict=True):
        result = ok(response, 201)
        applied[op["account_id"]][result["sequence"]] = (op, result)

    for name in names:
        entries = await paginate(client, 1000, name)
        assert [e["sequence"] for e in entries] == list(range(1, len(entries) + 1))
        assert sorted(applied[name]) == [e["sequence"] for e in entries]
        available = debt = 0
        for entry in entries:
            op, answered = applied[name][entry["sequence"]]
            assert entry["amount"] == op["amount"] != _ABORTED_AMOUNT
            for field in ("timestamp", "balance", "available", "debt"):
                assert entry[field] == answered[field], (name, entry, answered)
            if entry["kind"] == "grant":
                assert op["op"] == "grant"
                assert entry["settled_debt"] <= debt
                available += entry["retained"]
                debt -= entry["settled_debt"]
            else:
                assert (entry["kind"], op["op"]) == ("consumption", "consume")
                assert sum(a["amount"] for a in entry["allocation"]) == entry["consumed"]
                available -= entry["consumed"]
                debt += entry["debt_added"]
            assert (entry["available"], entry["debt"]) == (available, debt), entry
            assert debt == 0 or available == 0
        final = ok(await single(client, b(name)))
        assert (final["available"], final["debt"]) == (available, debt)
        signed = [
            op["amount"] if op["op"] == "grant" else -op["amount"]
            for op, _ in applied[name].values()
        ]
        assert final["balance"] == sum(signed)  # nothing expires before 10**6
    await assert_absent(client, "ghost")


# -- account limit and the documented example -------------------------------------------


async def test_account_limit_in_a_batch_is_as_for_single_calls(
    backend: str, tmp_path: Path, new_database_url: Callable[[], str | None]
) -> None:
    ops = [b("n-ghost", 1), g("n-z", 1, 0, 5), g("n-a", 1, 0, 5), b("n-a")]

    async def results(where: str, batched: bool) -> list[JSON]:
        settings = Settings(
            storage=backend,
            data_dir=tmp_path / where,
            max_accounts=2,
            database_url=new_database_url(),
        )
        async with running(create_app(settings)) as cl:
            ok(await single(cl, g("old", 1, 0, 5)), 201)
            if batched:
                return list(batch_ok(await post_batch(cl, ops), len(ops))["results"])
            return [single_result(op, await single(cl, op)) for op in ops]

    expected = await results("single", batched=False)
    assert [r["status"] for r in expected] == [404, 201, 409, 404]
    assert await results("batch", batched=True) == expected


async def test_documented_example_is_spec_example_1(client: httpx.AsyncClient) -> None:
    document = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    content = document["paths"][BATCH]["post"]["requestBody"]["content"]["application/json"]
    example = content["examples"]["example1"]["value"]
    account = example["operations"][0]["account_id"]
    assert example["operations"] == [s.batch_operation(account) for s in EXAMPLE_1.steps]
    body = batch_ok(await client.post(BATCH, json=example), len(EXAMPLE_1.steps))
    assert body["results"] == [s.batch_result(account) for s in EXAMPLE_1.steps]


async def test_documented_example_3_gives_the_spec_answers(client: httpx.AsyncClient) -> None:
    document = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    content = document["paths"][BATCH]["post"]["requestBody"]["content"]["application/json"]
    example = content["examples"]["example3"]["value"]
    body = batch_ok(await client.post(BATCH, json=example), 13)
    results = [r["body"] for r in body["results"]]
    # SPEC section 5, Example 3: consume returns the total debt, get_balance the balance.
    assert [results[i]["debt"] for i in (2, 3)] == [0, 10]
    assert [results[i]["balance"] for i in (4, 5, 7, 8, 10, 11, 12)] == [-10, 0, 15, -10, 5, 30, 30]
    assert (results[6]["settled_debt"], results[6]["retained"]) == (0, 25)
    assert (results[9]["settled_debt"], results[9]["retained"]) == (10, 5)
