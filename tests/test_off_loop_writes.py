"""A single late write (or a dry run of one) that replays many provisional writes runs on a
copy of its account in a worker thread, the copy then taking the account's place
(``app.service.ledger._journal_write``): the event loop serves other requests meanwhile
instead of waiting for the replay (up to 1.5 s behind 10,000 provisional writes). The
answers and the account are the same as when it runs in place."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.adapters.embedded import EmbeddedPort
from app.api.render import encode_answer
from app.main import create_app
from app.service import journal
from app.service.errors import QuotaExceeded
from app.service.ledger import Ledger
from app.service.limits import Limits
from app.storage.memory import MemoryStore
from tests.support.api import ACCOUNT, JSON, ok, snapshot, url
from tests.support.app_runner import make_settings, running

PROVISIONAL = 40
THRESHOLD = 10  # replayed writes past which a write goes to a thread, in these tests


def _record_threads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """Which journal writes ran, and whether on the event loop's thread."""
    seen: list[tuple[str, bool]] = []
    for name in ("grant", "consume", "void"):
        original = getattr(journal, name)

        def wrapped(*args: Any, _name: str = name, _fn: Any = original, **kwargs: Any) -> Any:
            seen.append((_name, threading.current_thread() is threading.main_thread()))
            return _fn(*args, **kwargs)

        monkeypatch.setattr(journal, name, wrapped)
    return seen


async def _scenario(client: httpx.AsyncClient) -> list[JSON]:
    """A window, provisional writes, then late writes of every kind and a late dry run;
    every answer, then everything observable about the account."""
    answers: list[JSON] = []

    async def post(path: str, body: JSON, status: int, params: JSON | None = None) -> JSON:
        r = await client.post(url(ACCOUNT, path), json=body, params=params)
        answers.append({"status": r.status_code, "body": r.json()})
        assert r.status_code == status, r.text
        body_out: JSON = r.json()
        return body_out

    await post("grants", {"amount": 1_000, "timestamp": 0, "expiry": 10**6}, 201)
    r = await client.put(url(ACCOUNT, "settings"), json={"lateness_window": 100_000})
    ok(r)
    uses = [
        {"op": "consume", "account_id": ACCOUNT, "amount": 3, "timestamp": 1_000 + n}
        for n in range(PROVISIONAL)
    ]
    assert ok(await client.post("/v1/batch", json={"operations": uses}))["failed"] == 0
    late = await post("grants", {"amount": 50, "timestamp": 500, "expiry": 1_020}, 201)
    await post("consumptions", {"amount": 7, "timestamp": 600}, 200)
    dry = {"dry_run": "true"}
    await post("consumptions", {"amount": 2_000, "timestamp": 700}, 200, dry)
    await post(f"grants/{late['grant_id']}/void", {"timestamp": 800}, 200)
    await post("consumptions", {"amount": 5, "timestamp": 900}, 200)
    observed = await snapshot(client)
    answers.append({"snapshot": repr(observed)})
    return answers


async def test_late_writes_off_the_loop_answer_as_in_place(
    backend: str,
    tmp_path: Path,
    new_database_url: Callable[[], str | None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = _record_threads(monkeypatch)
    monkeypatch.setattr("app.service.ledger.OFF_LOOP_REPLAYED_WRITES", 10**9)
    in_place_app = create_app(make_settings(backend, tmp_path / "in-place", new_database_url()))
    async with running(in_place_app) as client:
        in_place = await _scenario(client)
    assert seen
    assert all(on_loop for _, on_loop in seen)
    seen.clear()
    monkeypatch.setattr("app.service.ledger.OFF_LOOP_REPLAYED_WRITES", THRESHOLD)
    off_loop_app = create_app(make_settings(backend, tmp_path / "off-loop", new_database_url()))
    async with running(off_loop_app) as client:
        off_loop = await _scenario(client)
    assert off_loop == in_place
    threaded = [name for name, on_loop in seen if not on_loop]
    # The late grant, consumption, dry run, void and consumption: each behind 40 writes.
    assert threaded == ["grant", "consume", "consume", "void", "consume"]


async def test_a_late_grant_is_refused_if_other_writes_took_the_room_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The room for live grants outside the account (here the service's bound) is read
    before the thread runs; a grant on another account takes the last of it meanwhile. The
    late grant, which would add a live grant, is then refused as it would have been in
    place, and its account is left as it was."""
    monkeypatch.setattr("app.service.ledger.OFF_LOOP_REPLAYED_WRITES", THRESHOLD)
    limits = Limits(max_live_grants=3)
    now_s = 1_000.0
    ledger = Ledger(EmbeddedPort(MemoryStore(), limits, lambda: now_s), encode_answer, limits)
    await ledger.start()
    try:
        await ledger.grant("a", 1_000, 0, 10**6)
        await ledger.set_lateness_window("a", 100_000)
        for n in range(PROVISIONAL):
            await ledger.consume("a", 1, 1_000 + n)
        await ledger.grant("b", 1, 0, 10**6)  # two of three live grants
        before = await ledger.balance("a", None)
        entered, go = threading.Event(), threading.Event()
        original = journal.grant

        def held(*args: Any, **kwargs: Any) -> Any:
            entered.set()
            assert go.wait(30), "the test never let the grant go on"
            return original(*args, **kwargs)

        monkeypatch.setattr(journal, "grant", held)
        late = asyncio.create_task(ledger.grant("a", 5, 500, 10**6))
        assert await asyncio.to_thread(entered.wait, 30)
        monkeypatch.setattr(journal, "grant", original)
        await ledger.grant("c", 1, 0, 10**6)  # the last room, while the late grant runs
        go.set()
        with pytest.raises(QuotaExceeded):
            await late
        assert await ledger.balance("a", None) == before
        with pytest.raises(QuotaExceeded):  # three live grants: a's first, b's and c's
            await ledger.grant("d", 1, 0, 10**6)
    finally:
        await ledger.close()
