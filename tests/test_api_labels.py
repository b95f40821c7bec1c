"""Grant names and metadata (SPEC section 7): kept as given and shown wherever the grant is
(the grant's answer, getGrant, the live-grants list, the ledger, batches, replays); their
limits are 422 and change nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.api.render import LIVE_GRANTS_PER_PIECE
from app.main import create_app
from tests.support.api import (
    ACCOUNT,
    assert_absent,
    assert_problem,
    before_storage,
    error_locs,
    ok,
    snapshot,
    url,
)
from tests.support.app_runner import make_settings, running

NAME = "Q3 research allocation: H100 pool ✓"
METADATA = {"invoice": "INV-2026-0042", "note": "line one\nline two"}  # values may span lines


def _grant_body(**extra: Any) -> dict[str, Any]:
    return {"amount": 100, "timestamp": 0, "expiry": 10, **extra}


async def test_a_label_is_shown_wherever_the_grant_is(client: httpx.AsyncClient) -> None:
    made = ok(
        await client.post(url(ACCOUNT, "grants"), json=_grant_body(name=NAME, metadata=METADATA)),
        201,
    )
    assert (made["name"], made["metadata"]) == (NAME, METADATA)
    plain = ok(await client.post(url(ACCOUNT, "grants"), json=_grant_body(expiry=20)), 201)
    assert (plain["name"], plain["metadata"]) == (None, None)

    detail = ok(await client.get(url(ACCOUNT, "grants/1")))
    assert (detail["name"], detail["metadata"]) == (NAME, METADATA)
    listed = ok(await client.get(url(ACCOUNT, "grants")))["grants"]
    assert [(g["grant_id"], g["name"], g["metadata"]) for g in listed] == [
        (1, NAME, METADATA),
        (2, None, None),
    ]
    entries = ok(await client.get(url(ACCOUNT, "ledger")))["entries"]
    assert [(e["name"], e["metadata"]) for e in entries] == [(NAME, METADATA), (None, None)]


async def test_metadata_at_its_limits_is_kept_exactly(client: httpx.AsyncClient) -> None:
    metadata = {f"k{i:02d}".ljust(40, "x"): "v" * 500 for i in range(20)}
    name = "n" * 200
    made = ok(
        await client.post(url(ACCOUNT, "grants"), json=_grant_body(name=name, metadata=metadata)),
        201,
    )
    assert (made["name"], made["metadata"]) == (name, metadata)
    assert ok(await client.get(url(ACCOUNT, "grants/1")))["metadata"] == metadata


async def test_batch_grants_carry_labels(client: httpx.AsyncClient) -> None:
    op = {"op": "grant", "account_id": ACCOUNT, **_grant_body(name=NAME, metadata=METADATA)}
    body = ok(await client.post("/v1/batch", json={"operations": [op]}))
    result = body["results"][0]
    assert result["status"] == 201
    assert (result["body"]["name"], result["body"]["metadata"]) == (NAME, METADATA)
    detail = ok(await client.get(url(ACCOUNT, "grants/1")))
    assert (detail["name"], detail["metadata"]) == (NAME, METADATA)


async def test_a_replay_has_the_label_and_another_label_is_another_request(
    client: httpx.AsyncClient,
) -> None:
    headers = {"Idempotency-Key": "label-1"}
    body = _grant_body(name=NAME, metadata=METADATA)
    first = await client.post(url(ACCOUNT, "grants"), json=body, headers=headers)
    again = await client.post(url(ACCOUNT, "grants"), json=body, headers=headers)
    assert first.status_code == again.status_code == 201
    assert again.content == first.content
    other = await client.post(
        url(ACCOUNT, "grants"), json={**body, "name": "another"}, headers=headers
    )
    assert_problem(other, 422)
    assert len(ok(await client.get(url(ACCOUNT, "ledger")))["entries"]) == 1


REFUSED: list[Any] = [
    pytest.param({"name": ""}, ["body", "name"], id="empty-name"),
    pytest.param({"name": "n" * 201}, ["body", "name"], id="name-too-long"),
    pytest.param({"name": "tab\tname"}, ["body", "name"], id="control-character-in-name"),
    pytest.param({"name": 5}, ["body", "name"], id="name-not-a-string"),
    pytest.param({"metadata": {"": "v"}}, ["body", "metadata", "", "[key]"], id="empty-key"),
    pytest.param(
        {"metadata": {"k" * 41: "v"}}, ["body", "metadata", "k" * 41, "[key]"], id="key-too-long"
    ),
    pytest.param({"metadata": {"k": "v" * 501}}, ["body", "metadata", "k"], id="value-too-long"),
    pytest.param({"metadata": {"k": "a\u0000b"}}, ["body", "metadata", "k"], id="nul-in-value"),
    pytest.param({"metadata": {"k": 1}}, ["body", "metadata", "k"], id="value-not-a-string"),
    pytest.param({"metadata": {"k": None}}, ["body", "metadata", "k"], id="value-null"),
    pytest.param(
        {"metadata": {f"k{i}": "v" for i in range(21)}}, ["body", "metadata"], id="too-many-keys"
    ),
    pytest.param({"metadata": ["k", "v"]}, ["body", "metadata"], id="metadata-not-an-object"),
]


@before_storage
@pytest.mark.parametrize(("extra", "loc"), REFUSED)
async def test_labels_past_their_limits_are_422_and_change_nothing(
    client: httpx.AsyncClient, extra: dict[str, Any], loc: list[str]
) -> None:
    problem = assert_problem(
        await client.post(url(ACCOUNT, "grants"), json=_grant_body(**extra)), 422
    )
    assert loc in error_locs(problem)
    await assert_absent(client, ACCOUNT)


@before_storage
@pytest.mark.parametrize(
    "raw",
    [
        pytest.param('"\\ud800"', id="lone-high-surrogate"),
        pytest.param('"a\\udc00"', id="lone-low-surrogate"),
    ],
)
async def test_text_that_is_not_unicode_is_422(client: httpx.AsyncClient, raw: str) -> None:
    """JSON may escape a lone surrogate; it is no character, and no backend can store it."""
    for member in (f'"name": {raw}', f'"metadata": {{"k": {raw}}}', f'"metadata": {{{raw}: "v"}}'):
        content = '{"amount": 1, "timestamp": 0, "expiry": 5, ' + member + "}"
        response = await client.post(
            url(ACCOUNT, "grants"),
            content=content.encode(),
            headers={"content-type": "application/json"},
        )
        assert_problem(response, 422)
    await assert_absent(client, ACCOUNT)


async def test_a_refused_labelled_grant_in_a_batch_leaves_the_others(
    client: httpx.AsyncClient,
) -> None:
    good = {"op": "grant", "account_id": ACCOUNT, **_grant_body(name="ok")}
    bad = {"op": "grant", "account_id": ACCOUNT, **_grant_body(name="x" * 201)}
    response = await client.post("/v1/batch", json={"operations": [good, bad]})
    # A body that fails validation is refused whole, as any other invalid batch is.
    assert_problem(response, 422)
    assert (await snapshot(client)).balance_status == 404


@pytest.mark.backends("sqlite", "postgres")
async def test_a_label_survives_a_restatement_in_the_same_batch(
    backend: str, tmp_path: Path, new_database_url: Callable[[], str | None]
) -> None:
    """A labelled grant and a late consumption before it, in one batch: the consumption
    restates the grant's entry (its effect, not its label), in the same commit as the
    grant's own insert. The stored grant keeps its label, read back and after a restart."""
    settings = make_settings(backend, tmp_path / "data", new_database_url())
    async with running(create_app(settings)) as client:
        ok(await client.post(url(ACCOUNT, "grants"), json=_grant_body(expiry=1000)), 201)
        ok(await client.put(url(ACCOUNT, "settings"), json={"lateness_window": 1000}))
        operations = [
            {
                "op": "grant",
                "account_id": ACCOUNT,
                "amount": 30,
                "timestamp": 100,
                "expiry": 1000,
                "name": NAME,
                "metadata": METADATA,
            },
            {"op": "consume", "account_id": ACCOUNT, "amount": 120, "timestamp": 50},
        ]
        body = ok(await client.post("/v1/batch", json={"operations": operations}))
        assert [r["status"] for r in body["results"]] == [201, 200]
        assert body["results"][1]["body"]["restated"] >= 1
        detail = ok(await client.get(url(ACCOUNT, "grants/2")))
        assert (detail["name"], detail["metadata"]) == (NAME, METADATA)
    async with running(create_app(settings)) as client:
        detail = ok(await client.get(url(ACCOUNT, "grants/2")))
        assert (detail["name"], detail["metadata"]) == (NAME, METADATA)
        entries = ok(await client.get(url(ACCOUNT, "ledger")))["entries"]
        [labelled] = [e for e in entries if e["kind"] == "grant" and e["grant_id"] == 2]
        assert (labelled["name"], labelled["metadata"]) == (NAME, METADATA)


async def _get_through_asgi(app: FastAPI, path: str, send: Callable[[Any], Any]) -> None:
    """GET ``path`` straight through the app's ASGI interface, each message to ``send``
    (httpx's ASGI transport gathers the body before it answers)."""
    requested = False

    async def receive() -> Any:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.Event().wait()  # no disconnect: cancelled once the answer is sent

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"test")],
        "client": ("127.0.0.1", 50000),
        "server": ("test", 80),
    }
    await app(scope, receive, send)


async def test_a_long_live_grants_list_is_sent_in_pieces_with_the_loop_free_between(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """10,000 live grants with the largest labels are 611 MB of JSON: as one body it held the
    event loop 4.4 s (every other request waited) and took the process to 2.8 GB. The list is
    sent in pieces, another task running between them, and reads as it did."""
    count = 2 * LIVE_GRANTS_PER_PIECE + 50
    metadata = {"note": "\x01" * 500}  # escaped six bytes a character in JSON
    ops = [
        {"op": "grant", "account_id": ACCOUNT, "amount": 1, "timestamp": 0, "expiry": 10 + i}
        | {"name": f"grant {i}", "metadata": metadata}
        for i in range(count)
    ]
    assert ok(await client.post("/v1/batch", json={"operations": ops}))["failed"] == 0
    whole = await client.get(url(ACCOUNT, "grants"))
    listed = ok(whole)["grants"]
    assert [g["grant_id"] for g in listed] == list(range(1, count + 1))
    assert all(g["metadata"] == metadata for g in listed)

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    sent: list[tuple[int, bytes]] = []  # (ticks when sent, body piece)

    async def send(message: Any) -> None:
        if message["type"] == "http.response.body":
            sent.append((ticks, message.get("body", b"")))

    task = asyncio.create_task(ticker())
    try:
        await _get_through_asgi(app, url(ACCOUNT, "grants"), send)
    finally:
        task.cancel()
    pieces = [(at, body) for at, body in sent if body]
    assert b"".join(body for _, body in pieces) == whole.content
    assert len(pieces) >= 3, "one body: the loop was held while all of it was encoded"
    assert pieces[-1][0] > pieces[0][0], "no other task ran while the list was sent"


async def test_writes_while_a_live_grants_list_is_sent_change_none_of_its_bytes(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """The list is read whole before its first byte and the account's lock is not held while
    it is sent: writes to the account go on meanwhile, and the list sent is the state when it
    was read, byte for byte."""
    ops = [
        {"op": "grant", "account_id": ACCOUNT, "amount": 10, "timestamp": i, "expiry": 1000 + i}
        | {"name": f"grant {i}", "metadata": {"note": "é\u2028"}}
        for i in range(2 * LIVE_GRANTS_PER_PIECE + 50)
    ]
    assert ok(await client.post("/v1/batch", json={"operations": ops}))["failed"] == 0
    before = (await client.get(url(ACCOUNT, "grants"))).content

    first_sent, go_on = asyncio.Event(), asyncio.Event()
    pieces: list[bytes] = []

    async def send(message: Any) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            pieces.append(message["body"])
            if len(pieces) == 1:
                first_sent.set()
                await go_on.wait()  # a slow reader: the rest waits until the writes are done

    sending = asyncio.create_task(_get_through_asgi(app, url(ACCOUNT, "grants"), send))
    try:
        # Bounded: were the account locked while the list is sent, the writes would wait
        # for the reader, who waits for them.
        async with asyncio.timeout(60):
            await first_sent.wait()
            consumed = {"amount": 1500, "timestamp": 300}
            ok(await client.post(url(ACCOUNT, "consumptions"), json=consumed))
            granted = {"amount": 5, "timestamp": 301, "expiry": 999, "name": "new"}
            ok(await client.post(url(ACCOUNT, "grants"), json=granted), 201)
            ok(await client.post(url(ACCOUNT, "grants/200/void"), json={"timestamp": 302}))
            after = (await client.get(url(ACCOUNT, "grants"))).content
    finally:
        go_on.set()
        await sending
    assert after != before
    assert len(pieces) >= 3
    assert b"".join(pieces) == before
