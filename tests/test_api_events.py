"""POST /v1/events (issue 14, item 3): usage streams, in process through ASGI on every backend.

The reference for every applied line is the batch endpoint (whose results are what the single
endpoints answer, tests/test_batch.py): the same operations on twin accounts must answer the
same status and body and leave the same ledger. Duplicates, limits, malformed lines, keys
and late writes are checked line by line. tests/test_events_e2e.py streams against a real
server process (connections dropped and a server killed mid-stream, then resumed).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.keys import Scope, create_key
from app.main import create_app
from app.settings import Settings
from tests.support.api import (
    JSON,
    PROBLEM_JSON,
    assert_absent,
    assert_problem,
    before_storage,
    error_locs,
    ok,
    snapshot,
    url,
)
from tests.support.app_runner import running

EVENTS = "/v1/events"
NDJSON = "application/x-ndjson"
TYPE = "tag:gpu-credits,2026:problem:"


def g(
    event_id: str, account_id: str, amount: int, timestamp: int, expiry: int, **more: Any
) -> JSON:
    return {
        "id": event_id,
        "op": "grant",
        "account_id": account_id,
        "amount": amount,
        "timestamp": timestamp,
        "expiry": expiry,
        **more,
    }


def c(event_id: str, account_id: str, amount: int, timestamp: int, **more: Any) -> JSON:
    return {
        "id": event_id,
        "op": "consume",
        "account_id": account_id,
        "amount": amount,
        "timestamp": timestamp,
        **more,
    }


def v(event_id: str, account_id: str, grant_id: int, timestamp: int) -> JSON:
    return {
        "id": event_id,
        "op": "void",
        "account_id": account_id,
        "grant_id": grant_id,
        "timestamp": timestamp,
    }


def ndjson(lines: Iterable[JSON | str]) -> bytes:
    return b"".join(
        (line if isinstance(line, str) else json.dumps(line)).encode() + b"\n" for line in lines
    )


def results_of(response: httpx.Response) -> list[JSON]:
    """The result lines of a stream that started: each a well-formed result."""
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == NDJSON
    assert response.text.endswith("\n") or response.text == ""
    results = [json.loads(line) for line in response.text.splitlines()]
    for r in results:
        assert isinstance(r, dict)
        assert (
            {"line", "id", "status", "body"}
            <= set(r)
            <= {"line", "id", "status", "body", "duplicate"}
        )
        if r["status"] >= 400:
            assert r["body"]["status"] == r["status"], r
            for member in ("type", "title", "detail"):
                assert r["body"][member], r
    numbers = [r["line"] for r in results]
    assert numbers == sorted(set(numbers)), "one result per line, in order"
    return results


async def stream(
    client: httpx.AsyncClient,
    lines: Iterable[JSON | str] | bytes,
    headers: dict[str, str] | None = None,
) -> list[JSON]:
    body = lines if isinstance(lines, bytes) else ndjson(lines)
    response = await client.post(
        EVENTS, content=body, headers={"content-type": NDJSON, **(headers or {})}
    )
    return results_of(response)


async def chunked(parts: list[bytes], then: asyncio.Event | None = None) -> AsyncIterator[bytes]:
    """A body without a Content-Length, in these parts; then, if given, wait for ``then``."""
    for part in parts:
        yield part
    if then is not None:
        await then.wait()


def as_batch_op(line: JSON, account_map: dict[str, str]) -> JSON:
    op = {k: val for k, val in line.items() if k != "id"}
    op["account_id"] = account_map[op["account_id"]]
    return op


def twin(body: JSON, account_map: dict[str, str]) -> JSON:
    """A result body with the twin accounts' ids put back."""
    back = {twin_id: real for real, twin_id in account_map.items()}
    return {**body, "account_id": back.get(body["account_id"], body["account_id"])}


# -- every kind of line, as the batch answers it ---------------------------------------------


async def test_every_kind_of_line_answers_as_the_batch_does(client: httpx.AsyncClient) -> None:
    lines = [
        g("g-1", "acme", 100, 0, 50, name="June", metadata={"po": "7"}),
        g("g-2", "acme", 40, 1, 20, resources=["h100", "a100"]),
        c("c-1", "acme", 30, 2),
        c("c-2", "acme", 50, 3, resource="h100"),
        v("v-1", "acme", 1, 4),
        c("c-3", "acme", 500, 5),  # debt
        g("g-3", "acme", 10, 6, 60),  # settles debt
        c("c-4", "acme", 1, 1),  # 409: before the clock
        v("v-2", "acme", 9, 7),  # 404: no such grant
        v("v-3", "acme", 1, 8),  # 409: already voided
        g("g-1", "bat", 5, 0, 9),  # the same id on another account is another event
        c("c-9", "ghost", 1, 0),  # a new account, in debt at once
        v("v-9", "nobody", 1, 0),  # 404: no such account
    ]
    results = await stream(client, lines)
    assert [r["line"] for r in results] == list(range(1, len(lines) + 1))
    assert [r["id"] for r in results] == [line["id"] for line in lines]
    assert not any(r.get("duplicate") for r in results)

    twins = {"acme": "acme-twin", "bat": "bat-twin", "ghost": "ghost-twin", "nobody": "nobody-twin"}
    batch = ok(
        await client.post("/v1/batch", json={"operations": [as_batch_op(x, twins) for x in lines]})
    )
    for r, expected in zip(results, batch["results"], strict=True):
        assert r["status"] == expected["status"], (r, expected)
        if r["status"] < 400:
            assert r["body"] == twin(expected["body"], twins), r
        else:
            assert r["body"]["type"] == expected["body"]["type"], r
    assert [r["status"] for r in results] == [
        201,
        201,
        200,
        200,
        200,
        200,
        201,
        409,
        404,
        409,
        201,
        200,
        404,
    ]
    for account_id in ("acme", "bat", "ghost"):
        mine = await snapshot(client, account_id)
        theirs = await snapshot(client, twins[account_id])
        assert mine.ledger["entries"] == theirs.ledger["entries"]
        assert mine.balance == {**theirs.balance, "account_id": account_id}
    await assert_absent(client, "nobody")


async def test_one_chunk_holds_many_accounts_and_a_void_of_its_own_grant(
    client: httpx.AsyncClient,
) -> None:
    lines: list[JSON] = []
    for n in range(300):
        account_id = f"team-{n % 7}"
        lines.append(g(f"g-{n}", account_id, 10, n, n + 100_000))
        lines.append(c(f"c-{n}", account_id, 3, n))
    lines.append(v("v", "team-0", 43, 1_000))  # team-0's last grant, made in this chunk
    results = await stream(client, lines)
    assert len(results) == len(lines)
    assert all(r["status"] in (200, 201) for r in results), [
        r for r in results if r["status"] >= 300
    ]
    # 43 grants of 10 and 43 consumptions of 3 on team-0, drawn from the earliest grants:
    # the last grant is whole when it is voided.
    assert results[-1]["body"]["amount"] == 10
    assert ok(await client.get(url("team-0", "balance")))["available"] == 43 * 7 - 10


# -- duplicates --------------------------------------------------------------------------------


async def test_a_replayed_stream_changes_nothing(client: httpx.AsyncClient) -> None:
    lines = [
        g("g-1", "acme", 100, 0, 50),
        c("c-1", "acme", 30, 2),
        c("c-1", "acme", 30, 2),  # within the stream: a duplicate of line 2
        v("v-1", "acme", 1, 4),
        c("bad", "acme", 1, 1),  # refused: not recorded
    ]
    first = await stream(client, lines)
    assert [r["status"] for r in first] == [201, 200, 200, 200, 409]
    assert first[2] == {
        "line": 3,
        "id": "c-1",
        "status": 200,
        "duplicate": True,
        "body": {"account_id": "acme", "sequence": 2},
    }
    before = await snapshot(client, "acme")
    again = await stream(client, lines)
    assert [r.get("duplicate", False) for r in again] == [True, True, True, True, False]
    assert [r["body"] for r in again[:4]] == [
        {"account_id": "acme", "sequence": 1, "grant_id": 1},
        {"account_id": "acme", "sequence": 2},
        {"account_id": "acme", "sequence": 2},
        {"account_id": "acme", "sequence": 3, "grant_id": 1},
    ]
    assert again[4]["status"] == 409  # judged again: still too late
    assert await snapshot(client, "acme") == before


async def test_an_id_taken_by_another_line_is_refused(client: httpx.AsyncClient) -> None:
    await stream(client, [g("g-1", "acme", 100, 0, 50), c("c-1", "acme", 30, 2)])
    before = await snapshot(client, "acme")
    results = await stream(
        client,
        [
            c("c-1", "acme", 31, 2),  # another amount
            {**c("c-1", "acme", 30, 2), "resource": None},  # the same line: null is absent
            {"amount": 30, "account_id": "acme", "timestamp": 2, "op": "consume", "id": "c-1"},
            g("c-1", "acme", 30, 2, 9),  # another operation
        ],
    )
    assert [r["status"] for r in results] == [422, 200, 200, 422]
    for refused in (results[0], results[3]):
        assert refused["body"]["type"] == TYPE + "event-id-reused"
        assert refused["body"]["sequence"] == 2
    assert await snapshot(client, "acme") == before


async def test_ids_are_kept_across_a_restart(
    backend: str, tmp_path: Path, database_url: str | None
) -> None:
    settings = Settings(storage=backend, data_dir=tmp_path / "data", database_url=database_url)
    lines = [g("g-1", "acme", 100, 0, 50), c("c-1", "acme", 30, 2)]
    async with running(create_app(settings)) as client:
        assert [r["status"] for r in await stream(client, lines)] == [201, 200]
    async with running(create_app(settings)) as client:
        again = await stream(client, lines)
        if backend == "memory":  # nothing survives a restart, the ledger included
            assert [r["status"] for r in again] == [201, 200]
        else:
            assert [r.get("duplicate") for r in again] == [True, True]
            assert ok(await client.get(url("acme", "balance")))["available"] == 70


@pytest.mark.backends("memory", "sqlite")
async def test_ids_count_against_the_bound_on_idempotency_keys(
    backend: str, tmp_path: Path
) -> None:
    settings = Settings(storage=backend, data_dir=tmp_path / "data", max_idempotency_keys=3)
    async with running(create_app(settings)) as client:
        lines = [c(f"c-{n}", "acme", 1, n) for n in range(5)]
        results = await stream(client, lines)
        assert [r["status"] for r in results] == [200, 200, 200, 503, 503]
        assert results[3]["body"]["type"] == TYPE + "idempotency-keys-full"
        again = await stream(client, lines[:3])
        assert [r.get("duplicate") for r in again] == [True, True, True]  # still answered
        assert ok(await client.get(url("acme", "balance")))["debt"] == 3


@pytest.mark.backends("memory", "sqlite")
async def test_an_applied_id_holds_one_place_under_the_bound_on_idempotency_keys(
    backend: str, tmp_path: Path
) -> None:
    """Each applied id is one id held, from stream to stream: four places take four ids, in
    one stream or in several (the room a line takes becomes the id it stores, not a second
    place beside it)."""
    settings = Settings(storage=backend, data_dir=tmp_path / "data", max_idempotency_keys=4)
    async with running(create_app(settings)) as client:
        for n in range(4):
            results = await stream(client, [c(f"c-{n}", "acme", 1, n)])
            assert [r["status"] for r in results] == [200], results
        assert ok(await client.get(url("acme", "balance")))["debt"] == 4
        results = await stream(client, [c("c-4", "acme", 1, 4)])
        assert results[0]["body"]["type"] == TYPE + "idempotency-keys-full"


@pytest.mark.backends("memory", "sqlite")
async def test_a_refused_line_holds_no_place_under_the_bound_on_idempotency_keys(
    backend: str, tmp_path: Path
) -> None:
    """A line refused (here: too late) takes no id, so it leaves the room for the lines after
    it in the same chunk, and is answered with its own refusal, not as if the bound were
    reached."""
    settings = Settings(storage=backend, data_dir=tmp_path / "data", max_idempotency_keys=2)
    async with running(create_app(settings)) as client:
        lines = [c("first", "acme", 1, 10)]
        lines += [c(f"late-{n}", "acme", 1, 1) for n in range(3)]
        lines += [c("second", "acme", 1, 10)]
        results = await stream(client, lines)
        assert [r["status"] for r in results] == [200, 409, 409, 409, 200], results
        assert ok(await client.get(url("acme", "balance")))["debt"] == 2


# -- limits: the stream stops at the line that breaks one; what came before stays --------------


def _settings(backend: str, tmp_path: Path, database_url: str | None, **limits: Any) -> Settings:
    return Settings(
        storage=backend, data_dir=tmp_path / "data", database_url=database_url, **limits
    )


async def test_a_stream_past_its_byte_limit_stops_at_that_line(
    backend: str, tmp_path: Path, database_url: str | None
) -> None:
    settings = _settings(backend, tmp_path, database_url, max_event_stream_bytes=1024)
    lines = [ndjson([c(f"c-{n:03}", "acme", 1, n)]) for n in range(30)]
    sizes = [len(line) for line in lines]
    breaking = next(n for n in range(30) if sum(sizes[: n + 1]) > 1024)  # 0-based
    async with running(create_app(settings)) as client:
        response = await client.post(
            EVENTS, content=chunked(lines), headers={"content-type": NDJSON}
        )
        results = results_of(response)
        assert [r["status"] for r in results] == [200] * breaking + [413]
        stop = results[-1]
        assert stop["line"] == breaking + 1
        assert stop["id"] is None
        assert stop["body"]["type"] == TYPE + "stream-too-large"
        assert ok(await client.get(url("acme", "balance")))["debt"] == breaking
        # A Content-Length over the limit is refused before anything is read.
        too_big = b"".join(lines)
        refused = await client.post(EVENTS, content=too_big, headers={"content-type": NDJSON})
        assert_problem(refused, 413)
        assert ok(await client.get(url("acme", "balance")))["debt"] == breaking


async def test_a_line_past_its_size_limit_stops_the_stream(
    backend: str, tmp_path: Path, database_url: str | None
) -> None:
    settings = _settings(backend, tmp_path, database_url, max_event_line_bytes=1024)
    long_line = g(
        "g-long", "acme", 5, 0, 9, name="x" * 200, metadata={f"k{n}": "v" * 60 for n in range(14)}
    )
    body = ndjson(
        [c("c-1", "acme", 1, 0), c("c-2", "acme", 1, 1), long_line, c("c-3", "acme", 1, 2)]
    )
    assert len(json.dumps(long_line)) > 1024
    async with running(create_app(settings)) as client:
        results = await stream(client, body)
        assert [(r["line"], r["status"]) for r in results] == [(1, 200), (2, 200), (3, 413)]
        assert results[2]["body"]["type"] == TYPE + "line-too-long"
        assert ok(await client.get(url("acme", "balance")))["debt"] == 2


async def test_lines_past_the_count_limit_stop_the_stream(
    backend: str, tmp_path: Path, database_url: str | None
) -> None:
    settings = _settings(backend, tmp_path, database_url, max_event_lines=3)
    # Blank lines are neither answered nor counted, but they are numbered.
    body = ndjson(
        [
            c("c-1", "acme", 1, 0),
            "",
            c("c-2", "acme", 1, 1),
            "  ",
            c("c-3", "acme", 1, 2),
            c("c-4", "acme", 1, 3),
        ]
    )
    async with running(create_app(settings)) as client:
        results = await stream(client, body)
        assert [(r["line"], r["status"]) for r in results] == [
            (1, 200),
            (3, 200),
            (5, 200),
            (6, 413),
        ]
        assert results[-1]["body"]["type"] == TYPE + "too-many-lines"
        assert ok(await client.get(url("acme", "balance")))["debt"] == 3


@before_storage
async def test_a_stream_that_pauses_too_long_stops(backend: str, tmp_path: Path) -> None:
    settings = _settings(backend, tmp_path, None, body_timeout_s=0.2)
    never = asyncio.Event()  # the client never sends the rest
    parts = [ndjson([c("c-1", "acme", 1, 0)]), b'{"id": "c-2", "op": "consu']
    async with running(create_app(settings)) as client:
        response = await client.post(
            EVENTS, content=chunked(parts, then=never), headers={"content-type": NDJSON}
        )
        results = results_of(response)
        assert [(r["line"], r["status"]) for r in results] == [(1, 200), (2, 408)]
        assert results[1]["body"]["type"] == TYPE + "stream-timeout"
        assert ok(await client.get(url("acme", "balance")))["debt"] == 1


# -- lines that are not valid: answered, and the stream goes on --------------------------------


@before_storage
async def test_invalid_lines_are_answered_and_the_stream_goes_on(
    client: httpx.AsyncClient,
) -> None:
    good = c("ok", "acme", 1, 0)
    lines: list[JSON | str] = [
        "not json",  # 1
        '{"id": "dup", "op": "consume", "account_id": "acme", "amount": 1, "amount": 9, '
        '"timestamp": 1}',
        '{"id": "nan", "op": "consume", "account_id": "acme", "amount": NaN, "timestamp": 1}',
        "[1, 2]",  # 4: not an object
        {**c("x", "acme", 1, 1), "op": "balance"},  # 5: not a stream operation
        {k: val for k, val in c("x", "acme", 1, 1).items() if k != "id"},  # 6: no id
        c("", "acme", 1, 1),  # 7: empty id
        c("x" * 129, "acme", 1, 1),  # 8: id too long
        c(" lead", "acme", 1, 1),  # 9: id starts with a space
        c("tab\there", "acme", 1, 1),  # 10: not printable
        c("bad-amount", "acme", 0, 1),  # 11
        {**c("extra", "acme", 1, 1), "color": "red"},  # 12: unknown member
        c("bad-account", "acme/x", 1, 1),  # 13
        g("bad-expiry", "acme", 1, 5, 5),  # 14
        c("big", "acme", 10**30, 1),  # 15
        good,  # 16
    ]
    results = await stream(client, lines)
    statuses = {r["line"]: r["status"] for r in results}
    assert statuses == {1: 400, 2: 400, 3: 400, **{n: 422 for n in range(4, 16)}, 16: 200}
    by_line = {r["line"]: r for r in results}
    assert by_line[1]["id"] is None
    assert by_line[11]["id"] == "bad-amount"  # a valid id is echoed, even on a bad line
    assert by_line[8]["id"] is None  # an invalid one is not
    assert ["line", "consume", "amount"] in error_locs(by_line[11]["body"])
    assert ["line", "consume", "id"] in error_locs(by_line[6]["body"])
    assert ["line", "consume", "color"] in error_locs(by_line[12]["body"])
    # An unknown member is named as a batch's and every other body's is.
    [extra] = by_line[12]["body"]["errors"]
    assert extra["type"] == "extra_forbidden"
    assert extra["message"] == "Extra inputs are not permitted"
    assert ok(await client.get(url("acme", "balance")))["debt"] == 1


@before_storage
async def test_line_endings_and_the_last_line(client: httpx.AsyncClient) -> None:
    body = (
        json.dumps(c("crlf", "acme", 1, 0)).encode()
        + b"\r\n\r\n"
        + json.dumps(c("last", "acme", 1, 1)).encode()  # no newline at the end
    )
    results = await stream(client, body)
    assert [(r["line"], r["id"], r["status"]) for r in results] == [
        (1, "crlf", 200),
        (3, "last", 200),
    ]
    assert await stream(client, b"") == []
    assert await stream(client, b"\n\n") == []


@before_storage
async def test_refusals_before_the_stream_starts(client: httpx.AsyncClient) -> None:
    body = ndjson([c("c-1", "acme", 1, 0)])
    for content_type in (
        None,
        "application/json",
        "text/plain",
        "application/x-ndjson; charset=latin-1",
    ):
        headers = {} if content_type is None else {"content-type": content_type}
        refused = await client.post(EVENTS, content=body, headers=headers)
        assert_problem(refused, 415)
        assert refused.headers["accept"] == NDJSON
    assert_problem(
        await client.post(
            EVENTS, content=body, headers={"content-type": NDJSON}, params={"x": "1"}
        ),
        422,
    )
    assert_problem(await client.get(EVENTS), 405)
    # A key a stream cannot honour is refused, not ignored: its lines' ids are what makes
    # a resent line harmless.
    with_key = assert_problem(
        await client.post(
            EVENTS, content=body, headers={"content-type": NDJSON, "Idempotency-Key": "k-1"}
        ),
        422,
    )
    assert error_locs(with_key) == [["header", "Idempotency-Key"]]
    assert "each line's id" in with_key["errors"][0]["message"]
    await assert_absent(client, "acme")
    ok_charset = await stream(client, body, headers={"content-type": NDJSON + "; charset=utf-8"})
    assert [r["status"] for r in ok_charset] == [200]


# -- API keys: per line, as batches do -------------------------------------------------------


@pytest.fixture
async def keyed_stream(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str]]]:
    keys_file = tmp_path / "api-keys.json"
    keys = {
        "admin": create_key(keys_file, "admin", tuple(Scope), "")[0],
        "team-a-grants": create_key(keys_file, "a", (Scope.GRANT,), "team-a:")[0],
        "reader": create_key(keys_file, "r", (Scope.READ,), "")[0],
    }
    app = create_app(Settings(storage="memory", data_dir=tmp_path, api_keys_file=keys_file))
    async with running(app) as client:
        yield client, keys


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_each_line_needs_its_scope_and_account(
    keyed_stream: tuple[httpx.AsyncClient, dict[str, str]],
) -> None:
    client, keys = keyed_stream
    lines = [
        g("g-1", "team-a:x", 10, 0, 9),
        c("c-1", "team-a:x", 1, 1),  # no consume scope
        g("g-2", "team-b:x", 10, 0, 9),  # another team's account
        v("v-1", "team-a:x", 1, 2),  # void: the grant scope
    ]
    results = await stream(client, lines, headers=bearer(keys["team-a-grants"]))
    assert [r["status"] for r in results] == [201, 403, 403, 200]
    assert results[1]["body"]["type"] == TYPE + "forbidden"
    assert "line 2" in results[1]["body"]["detail"]
    admin = bearer(keys["admin"])
    assert_problem(await client.get(url("team-b:x", "balance"), headers=admin), 404)
    assert ok(await client.get(url("team-a:x", "balance"), headers=admin))["available"] == 0

    body = ndjson(lines)
    for headers, status in (
        ({}, 401),
        (bearer("gck_0000000000000000_" + "A" * 43), 401),
        (bearer(keys["reader"]), 403),
    ):
        refused = await client.post(
            EVENTS, content=body, headers={"content-type": NDJSON, **headers}
        )
        assert_problem(refused, status)
        assert refused.headers["content-type"] == PROBLEM_JSON


# -- late events -------------------------------------------------------------------------------


def fail_chunk(monkeypatch: pytest.MonkeyPatch, number: int) -> list[int]:
    """Streams' chunk ``number`` (from 1) fails as storage failing would, from now on; the
    list holds how many chunks were sent to the ledger so far."""
    from app.service.errors import ServiceUnavailable
    from app.service.ledger import Ledger

    calls = [0]
    real_events = Ledger.events

    async def failing(self: Ledger, chunk: Any, max_replayed: int) -> Any:
        calls[0] += 1
        if calls[0] == number:
            raise ServiceUnavailable("the disk is away")
        return await real_events(self, chunk, max_replayed)

    monkeypatch.setattr(Ledger, "events", failing)
    return calls


def chunk_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of lines of each chunk streams apply from now on (``Ledger.events``)."""
    from app.service.ledger import Ledger

    sizes: list[int] = []
    applied = Ledger.events

    async def spied(self: Ledger, lines: Any, *args: Any, **kwargs: Any) -> Any:
        results = await applied(self, lines, *args, **kwargs)
        sizes.append(len(results))  # the ledger may apply fewer than it was sent
        return results

    monkeypatch.setattr(Ledger, "events", spied)
    return sizes


async def many_live_grants(client: httpx.AsyncClient, account_id: str) -> None:
    """``account_id`` with a window of 10^6 and 2,001 live grants of 10 (at 0, then at 2 to
    4,000: those 2,000 provisional)."""
    first = {"amount": 10, "timestamp": 0, "expiry": 10**9}
    ok(await client.post(url(account_id, "grants"), json=first), 201)
    ok(await client.put(url(account_id, "settings"), json={"lateness_window": 1_000_000}))
    grants = [g(f"g-{n}", account_id, 10, 2 * n + 2, 10**9) for n in range(2_000)]
    assert all(r["status"] == 201 for r in await stream(client, grants))


async def test_late_lines_are_cut_into_chunks_by_what_they_replay(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk is applied on the event loop without a pause, and a late line replays the
    provisional writes after it, the account's and the chunk's own: late lines are cut into
    chunks by about how many writes they replay (``CHUNK_REPLAYED_WRITES``), in-order lines
    by count alone (before, a 2,000-line chunk of late lines held the loop for seconds)."""
    from app.api import events

    monkeypatch.setattr(events, "CHUNK_REPLAYED_WRITES", 250)
    sizes = chunk_sizes(monkeypatch)
    grant = {"amount": 1, "timestamp": 0, "expiry": 1}
    ok(await client.post(url("acme", "grants"), json=grant), 201)
    ok(await client.put(url("acme", "settings"), json={"lateness_window": 1_000_000}))
    # 100 lines in order, then 10 each behind all of them (and each one more write).
    in_order = [c(f"now-{t}", "acme", 1, t) for t in range(1_000, 1_100)]
    late = [g(f"late-{n}", "acme", 1, 500 + n, 10**6) for n in range(10)]
    results = await stream(client, in_order + late)
    assert [r["status"] for r in results] == [200] * 100 + [201] * 10
    # Each late line replays the 100 consumptions after it: 100 + 100 <= 250 < 300. In the
    # first chunk they are its own earlier lines, in the next ones the account's.
    assert sizes == [102, 2, 2, 2, 2], sizes
    body = ok(await client.get(url("acme", "balance")))
    assert body["debt"] == 100 - 10  # the late grants paid part of the debt back


@pytest.mark.backends("sqlite", "postgres")
async def test_late_lines_are_cut_by_what_they_replay_after_a_restart(
    backend: str, tmp_path: Path, database_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream cuts its chunks by an estimate read without a lock; on PostgreSQL from
    this process's cache of accounts, which a restart (or an eviction) empties: it counted
    nothing, and one chunk took every late line. The ledger counts again from the accounts
    it holds and applies what the bound allows; the rest go on in the next chunks."""
    from app.api import events

    monkeypatch.setattr(events, "CHUNK_REPLAYED_WRITES", 250)
    settings = Settings(storage=backend, data_dir=tmp_path / "data", database_url=database_url)
    async with running(create_app(settings)) as client:
        grant = {"amount": 1, "timestamp": 0, "expiry": 1}
        ok(await client.post(url("acme", "grants"), json=grant), 201)
        ok(await client.put(url("acme", "settings"), json={"lateness_window": 1_000_000}))
        in_order = [c(f"now-{t}", "acme", 1, t) for t in range(1_000, 1_100)]
        assert [r["status"] for r in await stream(client, in_order)] == [200] * 100
    sizes = chunk_sizes(monkeypatch)
    async with running(create_app(settings)) as client:
        # Each replays the 100 consumptions after it: two a chunk (200 <= 250 < 300). An
        # invalid line and a line already applied among them: answered once each, in order.
        late: list[JSON | str] = [g(f"late-{n}", "acme", 1, 500 + n, 10**6) for n in range(10)]
        late[3:3] = ["{not json", c("now-1000", "acme", 1, 1_000)]
        results = await stream(client, late)
        assert [r["line"] for r in results] == list(range(1, 13))
        assert [r["status"] for r in results] == [201] * 3 + [400, 200] + [201] * 7
        assert results[4].get("duplicate") is True
        # The stream counts the applied line as a late one too (whether its id is taken is
        # known only when the chunk is applied): it closes the second chunk.
        assert sizes == [2, 2, 2, 2, 2, 1], sizes
        body = ok(await client.get(url("acme", "balance")))
        assert body["debt"] == 100 - 10


def blind_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stream's own estimate counts nothing (as on PostgreSQL with a cold cache): every
    cut is the ledger's."""
    from app.domain.timeline import AccountTimeline
    from app.service.ledger import Ledger
    from app.service.replay import ReplayCost

    no_window = AccountTimeline(0)  # replays nothing: counted as nothing
    monkeypatch.setattr(Ledger, "replay_cost", lambda self: ReplayCost(lambda _: no_window))


async def late_account(client: httpx.AsyncClient, account_id: str, headers: JSON) -> None:
    """``account_id`` with a window and 100 provisional consumptions (at 1,000 onwards): a
    grant behind them replays about 100 writes."""
    grant = {"amount": 10**6, "timestamp": 0, "expiry": 10**6}
    ok(await client.post(url(account_id, "grants"), json=grant, headers=headers), 201)
    settings = {"lateness_window": 10**6}
    ok(await client.put(url(account_id, "settings"), json=settings, headers=headers))
    consumptions = [
        {"op": "consume", "account_id": account_id, "amount": 1, "timestamp": 1_000 + n}
        for n in range(100)
    ]
    body = {"operations": consumptions}
    assert ok(await client.post("/v1/batch", json=body, headers=headers))["failed"] == 0


async def test_lines_the_ledger_leaves_go_on_in_order_with_every_kind_of_answer(
    keyed_stream: tuple[httpx.AsyncClient, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found nothing (review): around the ledger's cuts, invalid, forbidden and duplicate
    lines are answered once each, in order; a line put back is authorized and judged again
    with the next chunk; duplicates before a line that alone passes the bound are applied
    first, then that line alone (no line is applied twice, none is lost, no chunk is
    empty)."""
    from app.api import events

    client, keys = keyed_stream
    admin, team_a = bearer(keys["admin"]), bearer(keys["team-a-grants"])
    await late_account(client, "team-a:x", admin)
    x = "team-a:x"
    first = await stream(client, [g("dup-1", x, 1, 500, 10**6)], headers=team_a)
    assert [r["status"] for r in first] == [201]
    blind_estimate(monkeypatch)
    monkeypatch.setattr(events, "CHUNK_REPLAYED_WRITES", 150)  # one late grant fits, not two
    sizes = chunk_sizes(monkeypatch)
    lines: list[JSON | str] = [
        g("f-1", x, 1, 501, 10**6),
        "{not json",
        c("c-1", x, 1, 2_000),  # no consume scope
        g("f-2", x, 1, 502, 10**6),
        g("o-1", "team-b:x", 1, 0, 10**6),  # another team's account
        g("dup-1", x, 1, 500, 10**6),
        g("f-3", x, 1, 503, 10**6),
    ]
    results = await stream(client, lines, headers=team_a)
    assert [r["line"] for r in results] == list(range(1, 8))
    assert [r["id"] for r in results] == ["f-1", None, "c-1", "f-2", "o-1", "dup-1", "f-3"]
    assert [r["status"] for r in results] == [201, 400, 403, 201, 403, 200, 201]
    assert results[5].get("duplicate") is True
    assert sizes == [1, 2, 1]  # f-1; f-2 and the duplicate; f-3

    # Duplicates first, then lines that each pass the bound alone.
    monkeypatch.setattr(events, "CHUNK_REPLAYED_WRITES", 50)
    sizes.clear()
    again = [g("dup-1", x, 1, 500, 10**6), g("f-1", x, 1, 501, 10**6)]
    again += [g("f-4", x, 1, 504, 10**6), g("f-5", x, 1, 505, 10**6)]
    results = await stream(client, again, headers=team_a)
    assert [r["status"] for r in results] == [200, 200, 201, 201]
    assert [r.get("duplicate", False) for r in results] == [True, True, False, False]
    assert sizes == [2, 1, 1]
    body = ok(await client.get(url(x, "balance"), headers=admin))
    assert body["available"] == 10**6 - 100 + 6  # dup-1 and f-1 to f-5, each once


async def test_a_chunk_that_fails_after_a_cut_stops_at_the_first_line_put_back(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found nothing (review): the stop line is the first line not applied, the first of
    those the ledger left; sent again from there, the stream goes on."""
    from app.api import events

    await late_account(client, "acme", {})
    blind_estimate(monkeypatch)
    monkeypatch.setattr(events, "CHUNK_REPLAYED_WRITES", 150)
    fail_chunk(monkeypatch, 2)
    lines = [g(f"late-{n}", "acme", 1, 500 + n, 10**6) for n in range(3)]
    results = await stream(client, lines)
    assert [(r["line"], r["status"]) for r in results] == [(1, 201), (2, 503)]
    results = await stream(client, lines[1:])
    assert [r["status"] for r in results] == [201, 201]
    body = ok(await client.get(url("acme", "balance")))
    assert body["available"] == 10**6 - 100 + 3


async def test_late_lines_on_an_account_of_many_live_grants_are_cut_by_their_copies(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A late line costs more than the writes after it: it copies the replay base (a tracker
    of the account's n live grants, O(n)) and replays the writes from that base to it (up to
    n / 8 of them). Counting only the writes after it, 2,000 lines each one write late on an
    account of 10,000 live grants made one chunk of about 11 s on the event loop (5.8 ms a
    line); here 2,000 live grants and 200 late lines, each counted as 1, made one chunk."""
    from app.api import events

    sizes = chunk_sizes(monkeypatch)
    await many_live_grants(client, "many")
    sizes.clear()
    late = [c(f"late-{n}", "many", 1, 3_999) for n in range(200)]  # each behind one write
    results = await stream(client, late)
    assert [r["status"] for r in results] == [200] * 200
    # Each late line copies a tracker of 2,000 live grants (counted as 2,000 / 8 writes)
    # and replays up to 250 writes from its mark: at most 20,000 / 250 lines a chunk.
    assert sum(sizes) == 200
    assert max(sizes) <= events.CHUNK_REPLAYED_WRITES // 250, sizes
    body = ok(await client.get(url("many", "balance")))
    assert body["available"] == 2_001 * 10 - 200


async def test_lines_late_behind_the_chunks_own_are_cut_by_their_copies_too(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line in order for the account as it is, but behind an earlier line of its chunk,
    is late when applied: it copies a tracker of the account's live grants as any late line
    does (here each consumption lands one write behind the grant before it, on an account
    of 2,001 live grants: each was counted as 1 and the 200 lines made one chunk)."""
    from app.api import events

    sizes = chunk_sizes(monkeypatch)
    await many_live_grants(client, "many")
    sizes.clear()
    pairs = []
    for n in range(100):
        pairs.append(g(f"pg-{n}", "many", 10, 4_002 + 2 * n, 10**9))
        pairs.append(c(f"pc-{n}", "many", 1, 4_001 + 2 * n))  # behind the grant before it
    results = await stream(client, pairs)
    assert [r["status"] for r in results] == [201, 200] * 100
    # Each consumption copies a tracker of at least 2,001 live grants (250 writes):
    # at most 20,000 / 250 of them, and as many grants, a chunk.
    assert sum(sizes) == 200
    assert max(sizes) <= 2 * (events.CHUNK_REPLAYED_WRITES // 250), sizes
    body = ok(await client.get(url("many", "balance")))
    assert body["available"] == 2_101 * 10 - 100


async def test_late_lines_restate_as_single_writes_do(client: httpx.AsyncClient) -> None:
    for account_id in ("acme", "twin"):
        settings = await client.put(url(account_id, "settings"), json={"lateness_window": 10})
        if settings.status_code == 404:  # settings need an account: make it first
            ok(
                await client.post(
                    url(account_id, "grants"), json={"amount": 50, "timestamp": 10, "expiry": 100}
                ),
                201,
            )
            ok(await client.put(url(account_id, "settings"), json={"lateness_window": 10}))
    lines = [
        c("c-20", "acme", 80, 20),
        g("late-15", "acme", 40, 15, 18),
        g("late-12", "acme", 40, 12, 60),
        c("too-late", "acme", 5, 9),
    ]
    results = await stream(client, lines)
    singles = [
        await client.post(url("twin", "consumptions"), json={"amount": 80, "timestamp": 20}),
        await client.post(
            url("twin", "grants"), json={"amount": 40, "timestamp": 15, "expiry": 18}
        ),
        await client.post(
            url("twin", "grants"), json={"amount": 40, "timestamp": 12, "expiry": 60}
        ),
        await client.post(url("twin", "consumptions"), json={"amount": 5, "timestamp": 9}),
    ]
    assert (
        [r["status"] for r in results] == [s.status_code for s in singles] == [200, 201, 201, 409]
    )
    for r, single in zip(results[:3], singles[:3], strict=True):
        assert r["body"] == {**single.json(), "account_id": "acme"}
    assert results[2]["body"]["restated"] == 1
    assert results[3]["body"]["watermark"] == 10
    mine, theirs = await snapshot(client, "acme"), await snapshot(client, "twin")
    assert mine.ledger["entries"] == theirs.ledger["entries"]


@before_storage
async def test_a_chunk_that_fails_stops_the_stream_before_anything_after_it(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop line is the first line not applied: when a chunk fails, no later chunk is
    applied, so resending from the stop line applies everything in order. (Chunks used to
    overlap, and a later one could commit after an earlier one failed: its lines then came
    before the resent ones, which were refused as too late.)"""

    lines = [g("g", "acct-s", 10**6, 0, 10**9)]
    lines += [c(f"c{t}", "acct-s", 1, t) for t in range(1, 4001)]  # more than one chunk
    calls = fail_chunk(monkeypatch, 1)
    results = await stream(client, lines)
    assert [(r["line"], r["status"]) for r in results] == [(1, 503)]
    assert calls == [1], "a chunk after the failed one was applied"
    await assert_absent(client, "acct-s")
    resent = await stream(client, lines)
    assert [r["status"] for r in resent] == [201] + [200] * 4000
    body = ok(await client.get(url("acct-s", "balance")))
    assert (body["available"], body["debt"]) == (10**6 - 4000, 0)


@before_storage
async def test_unread_results_past_the_bound_stop_the_stream(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Results wait in memory for a client that sends before it reads; past the bound on
    every stream's unsent results, a stream stops before its next chunk (503 at that
    chunk's first line) instead of holding more, and the count goes back to 0 after."""
    from app.api import events

    monkeypatch.setattr(events, "MAX_UNSENT_RESULT_BYTES", 1)
    lines = [c(f"c{t}", "acct-u", 1, t) for t in range(1, 2 + events.CHUNK_LINES)]
    results = await stream(client, lines)
    *applied, stop = results
    assert applied, "the first chunk is applied: nothing waited before it"
    assert [r["status"] for r in applied] == [200] * len(applied)
    assert (stop["line"], stop["status"]) == (len(applied) + 1, 503)
    assert stop["body"]["type"].endswith(":results-unread")
    assert len(applied) < len(lines)
    assert events._Sender.unsent_bytes_total == 0
    body = ok(await client.get(url("acct-u", "balance")))
    assert body["debt"] == len(applied)  # the first chunk only


async def test_error_results_count_toward_the_bound_on_unread_results(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line of unknown members is answered with the first 100 of its 12,003 issues (before
    the cap, one per member: ten times the line's size, and a 64 MiB body of such lines held
    about 2 GB). Error results are still cut into chunks by their bytes, so a stream whose
    client does not read stops near the bound on unread results, not a body's worth of
    results past it."""
    from app.api import events

    bound = 64 * 1024
    monkeypatch.setattr(events, "MAX_UNSENT_RESULT_BYTES", bound)
    monkeypatch.setattr(events, "CHUNK_ERROR_BYTES", 16 * 1024)
    members = ",".join(f'"m{n}":1' for n in range(12_000))
    line = '{"id":"x","op":"consume",' + members + "}"
    assert len(line) < 128 * 1024
    results = await stream(client, [line] * 20 + [c("after", "acct-e", 1, 0)])
    *answered, stop = results
    assert [r["status"] for r in answered] == [422] * len(answered)
    problem = answered[0]["body"]
    assert len(problem["errors"]) == 100  # the first ones listed
    assert problem["errors_total"] == 12_003  # every member, 3 missing
    assert (stop["line"], stop["status"]) == (len(answered) + 1, 503), stop
    assert stop["body"]["type"].endswith(":results-unread")
    answered_bytes = sum(len(json.dumps(r, separators=(",", ":"))) for r in answered)
    assert answered_bytes < 2 * bound, answered_bytes
    assert all(len(json.dumps(r)) < 16 * 1024 for r in answered)
    assert events._Sender.unsent_bytes_total == 0
    await assert_absent(client, "acct-e")
