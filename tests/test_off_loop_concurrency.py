"""Review of the off-loop late writes (``app.service.ledger._journal_write``): while a late
write's replay is held in its worker thread, the event loop serves other accounts, lists
and estimates, and a read of the same account waits for the write; a write cancelled while
its thread runs, or whose thread fails, leaves the account, the counts of live grants and
later writes exactly as if it never ran; two requests with one Idempotency-Key apply once.
Each run is compared with the same operations applied in place."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from app.adapters.embedded import EmbeddedPort
from app.api.render import encode_answer
from app.service import journal
from app.service.commands import BalanceOp, GrantOp, Operation, VoidOp
from app.service.errors import AccountNotFound, IdempotencyKeysFull
from app.service.idempotency import Idempotency
from app.service.ledger import Ledger, Replay
from app.service.limits import Limits
from app.storage.memory import MemoryStore
from app.storage.sqlite import SqliteStore

PROVISIONAL = 40
THRESHOLD = 10
IN_PLACE = 10**9
KEY = Idempotency("late-key", "f" * 64)


def _ledger(kind: str, path: Path, limits: Limits | None = None) -> Ledger:
    limits = limits or Limits()
    store = SqliteStore(path) if kind == "sqlite" else MemoryStore()
    clock: Callable[[], float] = lambda: 1_000.0  # noqa: E731
    return Ledger(EmbeddedPort(store, limits, clock), encode_answer, limits, clock)


@pytest.fixture(params=["memory", "sqlite"])
def kind(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@contextlib.asynccontextmanager
async def _started(ledger: Ledger) -> AsyncIterator[Ledger]:
    await ledger.start()
    try:
        yield ledger
    finally:
        await ledger.close()


async def _provisional(ledger: Ledger, account_id: str) -> None:
    """An account with a window and PROVISIONAL writes after t=1,000 to replay."""
    await ledger.grant(account_id, 1_000, 0, 10**6)
    await ledger.set_lateness_window(account_id, 100_000)
    for n in range(PROVISIONAL):
        await ledger.consume(account_id, 3, 1_000 + n)


async def _observed(ledger: Ledger, account_id: str) -> tuple[Any, ...]:
    balance = await ledger.balance(account_id, None)
    entries = await ledger.entries(account_id, 0, 10_000)
    live = await ledger.live_grants(account_id)
    return (repr(balance), repr(entries), repr(live))


def _check_port(ledger: Ledger) -> None:
    """The port's counts agree with the accounts it holds, and each timeline is sound."""
    port = ledger.port
    assert isinstance(port, EmbeddedPort)
    total = 0
    for account_id, slot in port._slots.items():
        slot.state.timeline.check_invariants()
        assert port.replay_timeline(account_id) is slot.state.timeline
        total += slot.state.tracker.live_grant_count
    assert port._live_grants == total


class _Hold:
    """Holds journal ``name`` for ``account_id`` in a worker thread until ``go`` is set."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, name: str, account_id: str) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.done = threading.Event()
        self.calls = 0
        original = getattr(journal, name)

        def held(target: journal.AccountState, *args: Any, **kwargs: Any) -> Any:
            on_loop = threading.current_thread() is threading.main_thread()
            if target.account_id != account_id or on_loop or self.calls:
                return original(target, *args, **kwargs)
            self.calls += 1
            self.entered.set()
            assert self.go.wait(30), "the test never let the write go on"
            try:
                return original(target, *args, **kwargs)
            finally:
                self.done.set()

        monkeypatch.setattr(journal, name, held)

    async def wait_entered(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, 30)

    async def wait_done(self) -> None:
        assert await asyncio.to_thread(self.done.wait, 30)


async def _turns(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def _run(
    kind: str,
    path: Path,
    monkeypatch: pytest.MonkeyPatch,
    threshold: int,
    body: Callable[[Ledger], Awaitable[list[Any]]],
) -> list[Any]:
    monkeypatch.setattr("app.service.ledger.OFF_LOOP_REPLAYED_WRITES", threshold)
    async with _started(_ledger(kind, path)) as ledger:
        for account_id in ("a", "c"):
            await _provisional(ledger, account_id)
        out = await body(ledger)
        for account_id in ("a", "b", "c"):
            try:
                out.append(await _observed(ledger, account_id))
            except AccountNotFound:
                out.append(None)
        _check_port(ledger)
        return out


async def test_the_loop_serves_others_while_a_late_write_is_held(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def plain(ledger: Ledger) -> list[Any]:
        out: list[Any] = [repr(await ledger.consume("a", 7, 500))]
        out.append(repr(await ledger.grant("b", 5, 0, 10**6)))
        out.append(repr(await ledger.consume("b", 1, 1)))
        out.append(repr(await ledger.grant("c", 9, 600, 10**6)))
        return out

    reference = await _run(kind, tmp_path / "ref.sqlite", monkeypatch, IN_PLACE, plain)

    async def concurrent(ledger: Ledger) -> list[Any]:
        hold = _Hold(monkeypatch, "consume", "a")
        before = await ledger.balance("a", None)
        late = asyncio.create_task(ledger.consume("a", 7, 500))
        await hold.wait_entered()
        out: list[Any] = []
        # Other accounts, while a's replay is held in its thread.
        b_grant = repr(await ledger.grant("b", 5, 0, 10**6))
        b_use = repr(await ledger.consume("b", 1, 1))
        assert (await ledger.balance("b", None)).available == 4
        # Another account's late write, off the loop too, while a's thread is held.
        c_late = repr(await ledger.grant("c", 9, 600, 10**6))
        # A list and an estimate read a's account as it stood before the write.
        page = await ledger.accounts("", "", 10)
        assert repr(page.accounts[0]) == repr(before)
        assert ledger.replay_cost() is not None
        # A read of a itself waits for the write (the account's lock).
        read = asyncio.create_task(ledger.balance("a", None))
        await _turns()
        assert not read.done()
        assert not late.done()
        hold.go.set()
        out.append(repr(await late))
        after = await read
        assert after.available != before.available
        out += [b_grant, b_use, c_late]
        return out

    off = await _run(kind, tmp_path / "off.sqlite", monkeypatch, THRESHOLD, concurrent)
    assert off == reference


async def test_a_late_write_cancelled_in_its_thread_changes_nothing(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client gone (its task cancelled) while its late grant replays: the account, the
    count of live grants and every later write are as if it never came, also once its
    thread has finished on its copy."""

    async def plain(ledger: Ledger) -> list[Any]:
        return [repr(await ledger.grant("a", 50, 700, 10**6))]

    reference = await _run(kind, tmp_path / "ref.sqlite", monkeypatch, IN_PLACE, plain)

    async def cancelled(ledger: Ledger) -> list[Any]:
        hold = _Hold(monkeypatch, "grant", "a")
        before = await _observed(ledger, "a")
        late = asyncio.create_task(ledger.grant("a", 5, 500, 10**6))
        await hold.wait_entered()
        late.cancel()
        with pytest.raises(asyncio.CancelledError):
            await late
        assert await _observed(ledger, "a") == before
        _check_port(ledger)
        hold.go.set()
        await hold.wait_done()
        await _turns()
        assert await _observed(ledger, "a") == before
        _check_port(ledger)
        return [repr(await ledger.grant("a", 50, 700, 10**6))]

    assert await _run(kind, tmp_path / "off.sqlite", monkeypatch, THRESHOLD, cancelled) == reference


async def test_a_late_write_whose_thread_fails_leaves_the_account(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure inside the thread after the journal changed its copy (a broken
    invariant): the account held is the one before the write."""

    async def plain(ledger: Ledger) -> list[Any]:
        return [repr(await ledger.consume("a", 7, 500))]

    reference = await _run(kind, tmp_path / "ref.sqlite", monkeypatch, IN_PLACE, plain)

    async def failing(ledger: Ledger) -> list[Any]:
        original = journal.consume
        before = await _observed(ledger, "a")

        def broken(*args: Any, **kwargs: Any) -> Any:
            original(*args, **kwargs)
            raise AssertionError("broken after the copy changed")

        monkeypatch.setattr(journal, "consume", broken)
        with pytest.raises(AssertionError):
            await ledger.consume("a", 5, 450)
        monkeypatch.setattr(journal, "consume", original)
        assert await _observed(ledger, "a") == before
        _check_port(ledger)
        return [repr(await ledger.consume("a", 7, 500))]

    assert await _run(kind, tmp_path / "off.sqlite", monkeypatch, THRESHOLD, failing) == reference


async def test_one_key_twice_at_once_applies_once(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def plain(ledger: Ledger) -> list[Any]:
        first = await ledger.grant("a", 5, 500, 10**6, KEY)
        again = await ledger.grant("a", 5, 500, 10**6, KEY)
        assert isinstance(again, Replay)
        return [repr(first), again.body]

    reference = await _run(kind, tmp_path / "ref.sqlite", monkeypatch, IN_PLACE, plain)

    async def twice(ledger: Ledger) -> list[Any]:
        hold = _Hold(monkeypatch, "grant", "a")
        first = asyncio.create_task(ledger.grant("a", 5, 500, 10**6, KEY))
        await hold.wait_entered()
        second = asyncio.create_task(ledger.grant("a", 5, 500, 10**6, KEY))
        await _turns()
        assert not second.done()
        hold.go.set()
        answer = await first
        again = await second
        assert isinstance(again, Replay)
        assert hold.calls == 1
        return [repr(answer), again.body]

    assert await _run(kind, tmp_path / "off.sqlite", monkeypatch, THRESHOLD, twice) == reference


async def test_a_late_dry_run_in_its_thread_changes_nothing_and_answers_as_in_place(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def plain(ledger: Ledger) -> list[Any]:
        return [repr(await ledger.consume_dry_run("a", 2_000, 700))]

    reference = await _run(kind, tmp_path / "ref.sqlite", monkeypatch, IN_PLACE, plain)

    async def dry(ledger: Ledger) -> list[Any]:
        hold = _Hold(monkeypatch, "consume", "a")
        task = asyncio.create_task(ledger.consume_dry_run("a", 2_000, 700))
        await hold.wait_entered()
        other = repr(await ledger.grant("b", 5, 0, 10**6))
        hold.go.set()
        answer = repr(await task)
        assert other
        return [answer]

    off = await _run(kind, tmp_path / "off.sqlite", monkeypatch, THRESHOLD, dry)
    # b was written only in the second run: compare a and c, and the dry run's answer.
    assert [off[0], off[1], off[3]] == [reference[0], reference[1], reference[3]]


async def test_postgres_a_late_write_failing_at_commit_after_the_swap_is_reloaded(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL: the copy took the cached account's place, then the write's transaction
    failed: the cache is dropped and the next write reloads what is committed. A write on
    another account runs while a late write's replay is held in its thread (holding its
    row lock). The answers and the account are those of the same writes in place."""
    import asyncpg

    from app.adapters.postgres import PostgresPort
    from app.service.errors import ServiceUnavailable
    from app.storage.postgres import PgTransaction, PostgresStore

    server = request.getfixturevalue("postgres_url")

    @contextlib.asynccontextmanager
    async def pg_ledger(threshold: int) -> AsyncIterator[Ledger]:
        monkeypatch.setattr("app.service.ledger.OFF_LOOP_REPLAYED_WRITES", threshold)
        url = server.create_database(f"offloop_{uuid.uuid4().hex[:12]}")
        limits = Limits()
        port = PostgresPort(PostgresStore(url, 2, 10), limits)
        async with _started(Ledger(port, encode_answer, limits)) as ledger:
            await _provisional(ledger, "a")
            yield ledger

    async with pg_ledger(IN_PLACE) as ledger:
        reference = [repr(await ledger.consume("a", 7, 500))]
        reference.append(repr(await ledger.grant("a", 50, 700, 10**6)))
        reference.append(repr(await _observed(ledger, "a")))

    async with pg_ledger(THRESHOLD) as ledger:
        write = PgTransaction.write

        async def fails(self: PgTransaction, *args: Any) -> Any:
            raise asyncpg.PostgresConnectionError("gone during the write")

        monkeypatch.setattr(PgTransaction, "write", fails)
        with pytest.raises(ServiceUnavailable):
            await ledger.consume("a", 5, 450)  # off the loop, swapped in, then failed
        monkeypatch.setattr(PgTransaction, "write", write)
        hold = _Hold(monkeypatch, "consume", "a")
        late = asyncio.create_task(ledger.consume("a", 7, 500))
        await hold.wait_entered()
        await ledger.grant("b", 5, 0, 10**6)  # another account meanwhile
        hold.go.set()
        off = [repr(await late)]
        off.append(repr(await ledger.grant("a", 50, 700, 10**6)))
        off.append(repr(await _observed(ledger, "a")))
    assert off == reference


async def test_the_bound_on_keys_holds_while_a_keyed_late_write_runs_in_its_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The room for a new Idempotency-Key is checked before the write; while its replay
    runs in the thread, another request takes the last of it. In place nothing runs in
    between; off the loop the late write must be refused as it would be at that point,
    not hold a key past the bound."""
    monkeypatch.setattr("app.service.ledger.OFF_LOOP_REPLAYED_WRITES", THRESHOLD)
    limits = Limits(max_idempotency_keys=2)
    async with _started(_ledger("memory", tmp_path, limits)) as ledger:
        await _provisional(ledger, "a")
        await ledger.grant("b", 5, 0, 10**6, Idempotency("b0", "0" * 64))  # one of two
        hold = _Hold(monkeypatch, "consume", "a")
        late = asyncio.create_task(ledger.consume("a", 7, 500, KEY))
        await hold.wait_entered()
        await ledger.grant("b", 5, 1, 10**6, Idempotency("b1", "1" * 64))  # the last room
        hold.go.set()
        with pytest.raises(IdempotencyKeysFull):
            await late
        port = ledger.port
        assert isinstance(port, EmbeddedPort)
        assert port._ids_held() <= limits.max_idempotency_keys
        _check_port(ledger)


def _hold_store_read(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> tuple[asyncio.Event, asyncio.Event]:
    """MemoryStore's read ``name`` made to wait: the first event is set once a read has
    begun, and the read goes on once the second one is set."""
    reading, go = asyncio.Event(), asyncio.Event()
    read = getattr(MemoryStore, name)

    async def held(self: MemoryStore, *args: Any) -> Any:
        reading.set()
        await go.wait()
        return await read(self, *args)

    monkeypatch.setattr(MemoryStore, name, held)
    return reading, go


@pytest.mark.parametrize("kind", ["void", "batch"])
async def test_the_bound_on_keys_holds_across_a_void_s_grant_read(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyed void (alone or in a batch) reads its grant's stored entries after its key's
    room was checked: other requests run meanwhile and may take the last of the room
    (found by review). The room is checked again before anything changes: the void is
    refused as it would have been had the other key come first, and changes nothing."""
    limits = Limits(max_idempotency_keys=2)
    async with _started(_ledger("memory", tmp_path, limits)) as ledger:
        await ledger.grant("a", 10, 0, 10**6, Idempotency("k0", "0" * 64))  # one of two
        before = await ledger.balance("a", None)
        reading, go = _hold_store_read(monkeypatch, "read_grant_entry")
        key = Idempotency("k-void", "1" * 64)
        voiding: asyncio.Task[Any]
        if kind == "void":
            voiding = asyncio.create_task(ledger.void("a", 1, 5, key))
        else:
            op = VoidOp("a", 1, 5)
            voiding = asyncio.create_task(ledger.batch([op], False, key))
        await reading.wait()
        await ledger.grant("b", 1, 0, 10**6, Idempotency("k-b", "2" * 64))  # the last room
        go.set()
        with pytest.raises(IdempotencyKeysFull):
            await voiding
        assert await ledger.balance("a", None) == before


async def test_the_bound_on_keys_holds_across_a_batch_s_balance_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyed batch that reads a past balance (``_balance_baselines``: a store read) and then
    grants: the room for its key is checked again after the read, as after a void's (the
    same check covers both reads). Refused, it changes nothing."""
    limits = Limits(max_idempotency_keys=2)
    async with _started(_ledger("memory", tmp_path, limits)) as ledger:
        await ledger.grant("a", 10, 0, 10**6, Idempotency("k0", "0" * 64))  # one of two
        await ledger.grant("a", 10, 5, 10**6)
        before = await ledger.balance("a", None)
        reading, go = _hold_store_read(monkeypatch, "read_totals_at")
        ops: list[Operation] = [BalanceOp("a", 2), GrantOp("a", 3, 6, 10**6)]
        batch = asyncio.create_task(ledger.batch(ops, False, Idempotency("k-batch", "1" * 64)))
        await reading.wait()
        await ledger.grant("b", 1, 0, 10**6, Idempotency("k-b", "2" * 64))  # the last room
        go.set()
        with pytest.raises(IdempotencyKeysFull):
            await batch
        assert await ledger.balance("a", None) == before
