"""An as-of read's ``watermark`` and ``final`` belong to the moment its figures are of (SPEC
section 6), on every backend, even when writes commit while the read is under way.

An as-of read (``GET .../balance?timestamp=T``, T before the clock) looks at the account,
then at its history. Writes may commit in between: an in-order write that moves the
watermark, then a late write at or before T that changes the state at T. The answer must be
one the account gave at some moment during the read, the state at T with the watermark of
that same moment, never the figures after the late write with the watermark from before the
write that let it in (no moment of the account had both).

The read is held at a gate until the writes are acknowledged, so the interleaving is the
same every run: on the embedded backends where the adapter hands the read to the stored
history (``as_of``); on PostgreSQL before each statement the read sends (``gate_at``), one
gate position per run.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from app.service.history import as_of
from tests.support.api import ACCOUNT, consume, grant, ok, url
from tests.support.gates import Gate, gate_postgres_statements

RESOURCES = pytest.mark.parametrize("resource", [None, "h100"], ids=["totals", "class"])


async def scenario(client: httpx.AsyncClient, gate: Gate, resource: str | None) -> None:
    """The read at T = 18 held at ``gate`` while the watermark moves from 10 to 15 and a
    late write at 16 changes the state at 18; its answer must be of one moment."""
    ok(await grant(client, 100, 0, 1000), 201)
    ok(await client.put(url(ACCOUNT, "settings"), json={"lateness_window": 10}))
    ok(await consume(client, 10, 20))  # clock 20, watermark 10
    params = {"timestamp": "18"} | ({} if resource is None else {"resource": resource})
    read = asyncio.create_task(client.get(url(ACCOUNT, "balance"), params=params))
    gate.task = read
    # The read is at the gate, or done (it never reached it).
    reached = asyncio.create_task(gate.reached.wait())
    await asyncio.wait([read, reached], return_when=asyncio.FIRST_COMPLETED)
    reached.cancel()
    ok(await consume(client, 1, 25))  # clock 25: the watermark moves to 15
    late = ok(await consume(client, 5, 16))  # late, before 18: the state at 18 changes
    assert (late["watermark"], late["restated"]) == (15, 0)
    gate.release.set()
    answer = ok(await read)

    def at_18(available: int, watermark: int) -> dict[str, Any]:
        return {
            "account_id": ACCOUNT,
            "timestamp": 18,
            "balance": available,
            "available": available,
            "debt": 0,
            "resource": resource,
            "watermark": watermark,
            "final": False,
        }

    moments = [
        at_18(100, 10),  # before the writes
        at_18(100, 15),  # after the in-order write
        at_18(95, 15),  # after the late write
    ]
    assert answer in moments, f"{answer} is no moment of the account: {moments}"


@pytest.mark.backends("memory", "sqlite")
@RESOURCES
async def test_an_as_of_read_answers_from_one_moment(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, resource: str | None
) -> None:
    gate = Gate()

    async def gated(*args: Any) -> Any:
        await gate()
        return await as_of(*args)

    monkeypatch.setattr("app.adapters.embedded.as_of", gated)
    await scenario(client, gate, resource)


@pytest.mark.backends("postgres")
@RESOURCES
@pytest.mark.parametrize("gate_at", [1, 2, 3, 4, 5])
async def test_an_as_of_read_answers_from_one_moment_between_any_statements(
    client: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
    resource: str | None,
    gate_at: int,
) -> None:
    gate = Gate()
    counter = gate_postgres_statements(monkeypatch, gate, gate_at)
    await scenario(client, gate, resource)
    assert counter[0] >= 1, "the read's statements were not seen"
