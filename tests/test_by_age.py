"""Keys and usage-stream ids are forgotten oldest first, from the front of what is held, a
slice at a time (``app.storage.by_age``): the sweeps' work is what they forget, not what is
held, and the event loop runs between slices."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from app.adapters.embedded import EmbeddedPort
from app.api.render import encode_answer
from app.service.errors import IdempotencyKeysFull
from app.service.idempotency import Idempotency
from app.service.ledger import Ledger
from app.service.limits import Limits
from app.storage.by_age import ByAge
from app.storage.memory import MemoryStore
from app.storage.sqlite import SqliteStore

TTL_S = 60.0


def key(name: str) -> Idempotency:
    return Idempotency(name, hashlib.sha256(name.encode()).hexdigest())


def memory_ledger(limits: Limits, wall_clock_s: Callable[[], float]) -> Ledger:
    port = EmbeddedPort(MemoryStore(), limits, wall_clock_s)
    return Ledger(port, encode_answer, limits, wall_clock_s)


def test_the_oldest_expired_go_first_up_to_the_first_that_has_not() -> None:
    records: ByAge[str, tuple[str, int]] = ByAge(lambda v: v[0])
    for value in (("a", 1), ("b", 2), ("c", 9), ("d", 3)):  # "d": a clock stepped back
        records.put(value)
    assert records.pop_oldest(lambda v: v[1] < 5, 1) == ["a"]
    assert records.pop_oldest(lambda v: v[1] < 5, 10) == ["b"]
    assert records.pop_oldest(lambda v: v[1] < 0, 10) == []
    assert list(records) == ["c", "d"]
    assert records.pop_oldest(lambda v: v[1] < 10, 10) == ["c", "d"]
    assert len(records) == 0


def test_a_record_put_again_under_its_key_is_the_newest() -> None:
    """Its older record stays in the order until it comes up, and is then passed over:
    the key is forgotten when its newest record expires."""
    records: ByAge[str, tuple[str, int]] = ByAge(lambda v: v[0])
    records.put(("a", 1))
    records.put(("b", 2))
    records.put(("a", 7))
    assert records.get("a") == ("a", 7)
    assert records.pop_oldest(lambda v: v[1] < 5, 10) == ["b"]
    assert records.pop_oldest(lambda v: v[1] < 8, 10) == ["a"]
    assert len(records) == 0


async def test_keys_read_back_from_a_file_are_swept_oldest_first(tmp_path: Path) -> None:
    """A file's keys come back in key order; held oldest first, a key made before another
    one but named after it is still swept in time."""
    now_s = [2_000.0]
    limits = Limits(idempotency_ttl_s=TTL_S)

    def sqlite_ledger() -> Ledger:
        port = EmbeddedPort(SqliteStore(tmp_path / "ledger.sqlite"), limits, lambda: now_s[0])
        return Ledger(port, encode_answer, limits, lambda: now_s[0])

    ledger = sqlite_ledger()
    await ledger.start()
    try:
        await ledger.grant("a", 1, 0, 10**6, key("z-older"))
        now_s[0] += 30
        await ledger.grant("a", 1, 1, 10**6, key("a-newer"))
    finally:
        await ledger.close()
    ledger = sqlite_ledger()  # both still young: both read back
    await ledger.start()
    try:
        now_s[0] += TTL_S - 10  # z-older expired, a-newer not
        assert await ledger.prune_idempotency() == 1
    finally:
        await ledger.close()


async def test_the_sweep_lets_other_tasks_run_between_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("app.adapters.embedded.FORGET_SLICE", 2)
    monkeypatch.setattr("app.storage.memory.FORGET_SLICE", 2)
    now_s = [1_000.0]
    ledger = memory_ledger(Limits(idempotency_ttl_s=TTL_S), lambda: now_s[0])
    await ledger.start()
    try:
        for i in range(5):
            await ledger.grant("a", 1, i, 10**6, key(f"k{i}"))
        now_s[0] += TTL_S + 1
        ran = asyncio.Event()
        other = asyncio.get_running_loop().call_soon(ran.set)
        assert await ledger.prune_idempotency() == 5
        assert ran.is_set()  # ran while the sweep was between slices, not only after it
        other.cancel()
    finally:
        await ledger.close()


async def test_at_the_bound_a_request_forgets_at_most_a_slice_of_expired_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Five expired keys held at a bound of five: each new key forgets at most two (the
    slice) before it is taken, so no request pays for all that expired; the bound is
    then kept by what is left."""
    monkeypatch.setattr("app.adapters.embedded.FORGET_SLICE", 2)
    now_s = [1_000.0]
    ledger = memory_ledger(
        Limits(idempotency_ttl_s=TTL_S, max_idempotency_keys=5), lambda: now_s[0]
    )
    await ledger.start()
    try:
        for i in range(5):
            await ledger.grant("a", 1, i, 10**6, key(f"old{i}"))
        with pytest.raises(IdempotencyKeysFull):
            await ledger.grant("a", 1, 5, 10**6, key("refused"))
        now_s[0] += TTL_S + 1
        await ledger.grant("a", 1, 6, 10**6, key("new0"))  # forgets old0, old1
        # The next slice at once: the last one came back full, so more may be left.
        await ledger.grant("a", 1, 7, 10**6, key("new1"))  # at 4 of 5: forgets nothing
        await ledger.grant("a", 1, 8, 10**6, key("new2"))  # at the bound: old2, old3
        await ledger.grant("a", 1, 9, 10**6, key("new3"))
        await ledger.grant("a", 1, 10, 10**6, key("new4"))  # old4
        with pytest.raises(IdempotencyKeysFull):  # five new keys: none expired
            await ledger.grant("a", 1, 11, 10**6, key("new5"))
        assert await ledger.prune_idempotency() == 0
    finally:
        await ledger.close()
