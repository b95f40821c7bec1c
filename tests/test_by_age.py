"""Keys and usage-stream ids are forgotten oldest first, from the front of what is held, a
slice at a time (``app.storage.by_age``): the sweeps' work is what they forget, not what is
held, and the event loop runs between slices."""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
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


async def test_sqlite_deletes_expired_keys_a_slice_at_a_time_between_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hourly sweep on SQLite deletes a slice of rows (in key order) per writer job and
    transaction: a write submitted meanwhile commits between two slices, not after all of
    them. Expired and young keys interleave in key order; only the expired go."""
    from app.storage import sqlite as sqlite_storage

    monkeypatch.setattr(sqlite_storage, "PRUNE_ROWS_PER_SLICE", 3)
    slices: list[int] = []
    delete_slice = SqliteStore._delete_slice

    def counted(self: SqliteStore, *args: object) -> tuple[int, tuple[str, str] | None]:
        found = delete_slice(self, *args)  # type: ignore[arg-type]
        slices.append(found[0])
        return found

    monkeypatch.setattr(SqliteStore, "_delete_slice", counted)
    now_s = [5_000.0]
    limits = Limits(idempotency_ttl_s=TTL_S)
    path = tmp_path / "ledger.sqlite"
    port = EmbeddedPort(SqliteStore(path), limits, lambda: now_s[0])
    ledger = Ledger(port, encode_answer, limits, lambda: now_s[0])
    await ledger.start()
    try:
        for i in range(20):  # old-00, old-02, ... then young-01, young-03, ... by time
            await ledger.grant(f"acct-{i % 4}", 1, i, 10**6, key(f"k-{i:02d}-old"))
        now_s[0] += TTL_S
        for i in range(10):
            await ledger.grant(f"acct-{i % 4}", 1, 100 + i, 10**6, key(f"k-{i:02d}-young"))
        now_s[0] += 1  # the first twenty expired, the last ten not
        sweep = asyncio.create_task(ledger.prune_idempotency())
        await asyncio.sleep(0)  # the sweep's first slice is with the writer
        await ledger.grant("acct-9", 1, 200, 10**6, key("during"))
        assert not sweep.done()  # the write committed between slices
        assert await sweep == 20
    finally:
        await ledger.close()
    assert sum(slices) == 20
    assert max(slices) <= 3
    assert len(slices) >= 11  # 31 rows looked at, three a slice
    with sqlite3.connect(path) as conn:
        kept = sorted(k for (k,) in conn.execute("SELECT key FROM idempotency"))
    assert kept == sorted([f"k-{i:02d}-young" for i in range(10)] + ["during"])
