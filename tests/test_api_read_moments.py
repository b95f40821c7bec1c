"""Reads that look at an account twice answer from one moment, on every backend, even when a
late write restates what they show while they are under way (SPEC section 6).

``getGrant`` shows a grant's entry (``settled_debt``, ``retained``: restated by a late write
before the grant) and what is left of it now (``remaining``). The read is held at a gate
between its two looks at the account while a late consumption before the grant commits and
restates it; the answer must be one the grant had at some moment, never ``remaining`` from
before the late write with ``retained`` from after it (more left than was ever kept).

The gate is where the read reaches the stored grant entry: on the embedded backends the
store's ``read_grant_entry``, on PostgreSQL before each statement the read sends (one gate
position per run), as ``tests/test_api_late_reads.py`` does for as-of reads.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from app.adapters.embedded import _EmbeddedUnitOfWork
from app.storage.memory import MemoryStore
from app.storage.sqlite import SqliteStore
from tests.support.api import ACCOUNT, consume, grant, ok, url
from tests.support.gates import Gate, gate_postgres_statements


class WriteGate(Gate):
    """The read's gate, and how the test waits for the late write before releasing it: until
    the write is done, or (embedded backends) until it waits for the account the read
    holds."""

    def __init__(self) -> None:
        super().__init__()
        self.write: asyncio.Task[httpx.Response] | None = None
        self.blocked = asyncio.Event()  # the write waits for a lock the read holds

    async def wait_for_write(self, write: asyncio.Task[httpx.Response]) -> None:
        blocked = asyncio.create_task(self.blocked.wait())
        await asyncio.wait([write, blocked], return_when=asyncio.FIRST_COMPLETED)
        blocked.cancel()


async def scenario(client: httpx.AsyncClient, gate: WriteGate) -> None:
    """getGrant of a grant of 100 at t=10, held at ``gate`` while a late consumption of 40 at
    t=5 makes debt that the grant then settles: retained 100 -> 60, remaining 100 -> 60."""
    ok(await grant(client, 1, 0, 1), 201)
    ok(await client.put(url(ACCOUNT, "settings"), json={"lateness_window": 100}))
    first = ok(await grant(client, 100, 10, 1000), 201)
    grant_id = first["grant_id"]
    read = asyncio.create_task(client.get(url(ACCOUNT, f"grants/{grant_id}")))
    gate.task = read
    reached = asyncio.create_task(gate.reached.wait())
    await asyncio.wait([read, reached], return_when=asyncio.FIRST_COMPLETED)
    reached.cancel()
    writing = asyncio.create_task(consume(client, 40, 5))
    gate.write = writing
    await gate.wait_for_write(writing)  # applied, or waiting for the read
    gate.release.set()
    late = ok(await writing)
    assert (late["debt_added"], late["restated"]) == (40, 1), late
    answer = ok(await read)
    shown = (answer["settled_debt"], answer["retained"], answer["remaining"])
    moments = [(0, 100, 100), (40, 60, 60)]  # before the late write, after it
    assert shown in moments, f"{answer} is no moment of the grant: {moments}"


@pytest.mark.backends("memory", "sqlite")
async def test_a_grant_view_answers_from_one_moment(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = WriteGate()
    real_enter = _EmbeddedUnitOfWork.__aenter__

    async def entering(self: _EmbeddedUnitOfWork) -> _EmbeddedUnitOfWork:
        if asyncio.current_task() is gate.write and any(
            slot.lock.locked() for slot in self._slots.values()
        ):
            gate.blocked.set()  # it will wait for the read
        return await real_enter(self)

    monkeypatch.setattr(_EmbeddedUnitOfWork, "__aenter__", entering)
    for store in (MemoryStore, SqliteStore):
        real = store.read_grant_entry

        async def gated(self: Any, *args: Any, _real: Any = real) -> Any:
            if asyncio.current_task() is gate.task:
                await gate()
            return await _real(self, *args)

        monkeypatch.setattr(store, "read_grant_entry", gated)
    await scenario(client, gate)


@pytest.mark.backends("postgres")
@pytest.mark.parametrize("gate_at", [1, 2, 3])
async def test_a_grant_view_answers_from_one_moment_between_any_statements(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, gate_at: int
) -> None:
    gate = WriteGate()
    counter = gate_postgres_statements(monkeypatch, gate, gate_at)
    await scenario(client, gate)
    assert counter[0] >= 1, "the read's statements were not seen"
