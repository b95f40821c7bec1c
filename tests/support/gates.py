"""Holding a read at a gate while writes commit, so a test fixes the interleaving: the
read waits at ``Gate`` (embedded backends: where a test patches it in; PostgreSQL: before
one statement of the read, ``gate_postgres_statements``) until the test releases it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from app.storage.postgres import PostgresStore


class Gate:
    def __init__(self) -> None:
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.task: asyncio.Task[httpx.Response] | None = None  # the read's

    async def __call__(self) -> None:
        self.reached.set()
        await self.release.wait()


class GatedConnection:
    """A pooled connection whose statements, when the read sends them, count; the read
    waits at the gate before statement ``gate_at``."""

    def __init__(self, conn: Any, gate: Gate, counter: list[int], gate_at: int) -> None:
        self._conn = conn
        self._gate = gate
        self._counter = counter
        self._gate_at = gate_at

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._conn, name)
        if name not in ("fetch", "fetchrow", "fetchval", "execute"):
            return attribute

        async def statement(*args: Any, **kwargs: Any) -> Any:
            self._counter[0] += 1
            if self._counter[0] == self._gate_at:
                await self._gate()
            return await attribute(*args, **kwargs)

        return statement


def gate_postgres_statements(
    monkeypatch: pytest.MonkeyPatch, gate: Gate, gate_at: int
) -> list[int]:
    """Every connection ``gate.task`` (the read) takes from the pool counts its statements
    and waits at ``gate`` before statement ``gate_at``; returns the count (one item), for
    the test to check the read's statements were seen."""
    counter = [0]
    real: Callable[[PostgresStore], contextlib.AbstractAsyncContextManager[Any]] = (
        PostgresStore._connection
    )

    @contextlib.asynccontextmanager
    async def connection(store: PostgresStore) -> AsyncIterator[Any]:
        async with real(store) as conn:
            if asyncio.current_task() is gate.task:
                yield GatedConnection(conn, gate, counter, gate_at)
            else:
                yield conn

    monkeypatch.setattr(PostgresStore, "_connection", connection)
    return counter
