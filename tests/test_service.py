"""The service layer without HTTP: concurrency, idempotency and failure handling, once for
every adapter (embedded over memory and over a real SQLite file, PostgreSQL on the throwaway
server). What HTTP adds (status codes, problem documents) is tested elsewhere; here the
rules of the one service are held to the same answers whatever holds the accounts."""

from __future__ import annotations

import asyncio
import hashlib
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path

import pytest

from app.adapters.embedded import MAX_QUEUED_CHANGES, EmbeddedPort
from app.api.render import encode_answer
from app.main import embedded_ledger
from app.service.commands import ConsumeOp, GrantOp, Operation
from app.service.errors import (
    AccountNotFound,
    IdempotencyKeyReused,
    ServiceUnavailable,
)
from app.service.idempotency import Idempotency
from app.service.ledger import Ledger, Replay
from app.service.limits import Limits
from app.service.results import BatchOutcome, ConsumptionReceipt, GrantReceipt
from app.storage.base import Change, StorageError
from app.storage.memory import MemoryStore
from app.storage.sqlite import SqliteStore
from tests.support.pg_server import PostgresServer

ADAPTERS = ["memory", "sqlite", "postgres"]


@pytest.fixture(params=ADAPTERS)
async def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Ledger]:
    kind = request.param
    if kind == "postgres":
        from app.adapters.postgres import PostgresPort
        from app.storage.postgres import PostgresStore

        server: PostgresServer = request.getfixturevalue("postgres_url")
        url = server.create_database(f"svc_{uuid.uuid4().hex[:12]}")
        limits = Limits()
        service = Ledger(PostgresPort(PostgresStore(url, 2, 10), limits), encode_answer, limits)
    elif kind == "sqlite":
        service = embedded_ledger(SqliteStore(tmp_path / "ledger.sqlite3"))
    else:
        service = embedded_ledger(MemoryStore())
    await service.start()
    try:
        yield service
    finally:
        await service.close()


def key(name: str, body: str = "") -> Idempotency:
    return Idempotency(name, hashlib.sha256((name + body).encode()).hexdigest())


async def test_concurrent_writes_on_one_account_serialise_exactly(ledger: Ledger) -> None:
    """64 grants and consumptions at once on one account: every answer has its own
    sequence, and replaying them in sequence order through the plain rules gives every
    answer's totals (each write saw exactly the writes before it)."""
    rng = random.Random(9)
    ops: list[tuple[str, int]] = [
        ("grant" if rng.random() < 0.5 else "consume", rng.randint(1, 50)) for _ in range(64)
    ]

    async def run(kind: str, amount: int) -> GrantReceipt | ConsumptionReceipt:
        result: GrantReceipt | ConsumptionReceipt | Replay
        if kind == "grant":
            result = await ledger.grant("hot", amount, 1, 1000)
        else:
            result = await ledger.consume("hot", amount, 1)
        assert not isinstance(result, Replay)
        return result

    answers = await asyncio.gather(*(run(kind, amount) for kind, amount in ops))
    assert sorted(a.sequence for a in answers) == list(range(1, 65))
    available = debt = 0
    for answer in sorted(answers, key=lambda a: a.sequence):
        if isinstance(answer, GrantReceipt):
            settled = min(answer.amount, debt)
            debt -= settled
            available += answer.amount - settled
        else:
            taken = min(answer.amount, available)
            available -= taken
            debt += answer.amount - taken
        assert (answer.available, answer.debt) == (available, debt)
    view = await ledger.balance("hot", None)
    assert (view.available, view.debt) == (available, debt)


async def test_duplicates_in_flight_apply_once_and_replay_the_same_bytes(ledger: Ledger) -> None:
    results = await asyncio.gather(*(ledger.grant("acct", 10, 0, 100, key("k")) for _ in range(8)))
    applied = [r for r in results if isinstance(r, GrantReceipt)]
    replays = [r for r in results if isinstance(r, Replay)]
    assert len(applied) == 1
    assert len(replays) == 7
    assert {r.body for r in replays} == {encode_answer(applied[0]).body}
    assert all(r.status_code == 201 for r in replays)
    assert (await ledger.balance("acct", None)).available == 10
    with pytest.raises(IdempotencyKeyReused):
        await ledger.grant("acct", 11, 0, 100, key("k", "other body"))
    # The key is the account's: the same name on another account is another request.
    other = await ledger.grant("acct-2", 10, 0, 100, key("k"))
    assert isinstance(other, GrantReceipt)


async def test_a_refused_write_leaves_no_trace(ledger: Ledger) -> None:
    with pytest.raises(ValueError, match="expiry"):
        await ledger.grant("new", 5, 10, 10, key("k1"))  # expiry not after timestamp
    with pytest.raises(AccountNotFound):
        await ledger.balance("new", None)
    # The key was not claimed by the refused request.
    result = await ledger.grant("new", 5, 10, 11, key("k1", "fixed"))
    assert isinstance(result, GrantReceipt)
    assert result.sequence == 1


async def test_batches_hold_every_account_and_commit_together(ledger: Ledger) -> None:
    ops: Sequence[Operation] = [
        GrantOp("b", 100, 0, 50),
        GrantOp("a", 100, 0, 50),
        ConsumeOp("a", 30, 1),
        ConsumeOp("b", 150, 2),  # 50 debt
        GrantOp("a", 1, 0, 9),  # timestamp regression: refused alone
    ]
    outcome, concurrent = await asyncio.gather(
        ledger.batch(ops, atomic=False, idempotency=key("batch-1")),
        ledger.consume("a", 1, 5),  # waits for the batch, or goes first: never in between
    )
    assert isinstance(outcome, BatchOutcome)
    assert isinstance(outcome.results[4], ValueError)
    assert isinstance(concurrent, ConsumptionReceipt)
    a = await ledger.balance("a", None)
    assert (a.available, a.debt) == (69, 0)
    b = await ledger.balance("b", None)
    assert (b.available, b.debt) == (0, 50)
    replay = await ledger.batch(ops, atomic=False, idempotency=key("batch-1"))
    assert isinstance(replay, Replay)
    assert replay.body == encode_answer(outcome).body


async def test_listings_during_account_creation_show_only_accounts_that_exist(
    ledger: Ledger,
) -> None:
    """Accounts made (and refused) while accounts are listed: every page is in byte order
    and holds only accounts whose write succeeds, each with that write's figures; once the
    writes are done, every one of them is listed."""

    async def make(i: int) -> str | None:
        account_id = f"acct-{i:02d}"
        if i % 4 == 3:
            with pytest.raises(ValueError, match="expiry"):
                await ledger.grant(account_id, i + 1, 5, 5)  # refused: expiry not after
            return None
        await ledger.grant(account_id, i + 1, 5, 50)
        return account_id

    async def listing() -> list[tuple[str, int]]:
        page = await ledger.accounts("acct-", "", 1000)
        assert page.next_after is None
        return [(v.account_id, v.available) for v in page.accounts]

    tasks: list[Awaitable[object]] = [make(i) for i in range(40)]
    for position in range(0, 40, 4):
        tasks.insert(position, listing())
    results = await asyncio.gather(*tasks)
    made = sorted(r for r in results if isinstance(r, str))
    assert len(made) == 30
    for result in results:
        if isinstance(result, list):
            ids = [account_id for account_id, _ in result]
            assert ids == sorted(ids)
            assert set(ids) <= set(made)
            assert all(available == int(a[-2:]) + 1 for a, available in result)
    final = await ledger.accounts("", "", 1000)
    assert [v.account_id for v in final.accounts] == made
    page = await ledger.accounts("acct-", "acct-10", 5)
    assert made[8] == "acct-10"
    assert [v.account_id for v in page.accounts] == made[9:14]  # strictly after the cursor
    assert page.next_after == made[13]


class FailingStore(MemoryStore):
    """A journal whose commits fail once ``fail`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.fail = False

    def submit(self, changes: Sequence[Change]) -> asyncio.Future[None]:
        if not self.fail:
            return super().submit(changes)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_exception(StorageError("disk on fire"))
        return done


async def test_an_embedded_journal_that_fails_stops_the_service() -> None:
    """Memory has run ahead of disk: nothing more may be acknowledged, reads included,
    until a restart reloads what is durable."""
    store = FailingStore()
    clock: Callable[[], float] = lambda: 1_000.0  # noqa: E731
    limits = Limits()
    ledger = Ledger(EmbeddedPort(store, limits, clock), encode_answer, limits, clock)
    await ledger.start()
    await ledger.grant("a", 5, 0, 10)
    store.fail = True
    with pytest.raises(ServiceUnavailable, match="disk on fire"):
        await ledger.grant("a", 5, 1, 10)
    assert not ledger.healthy
    assert not await ledger.ready()
    store.fail = False
    attempts = (ledger.grant("a", 1, 2, 10), ledger.balance("a", None), ledger.accounts("", "", 9))
    for attempt in attempts:
        with pytest.raises(ServiceUnavailable, match="restart required"):
            await attempt
    await ledger.close()


class StalledStore(MemoryStore):
    """A journal whose disk has fallen behind by ``backlog`` changes."""

    backlog = 0

    @property
    def queued_changes(self) -> int:
        return self.backlog


async def test_a_journal_too_far_behind_refuses_before_applying_anything() -> None:
    store = StalledStore()
    ledger = embedded_ledger(store)
    await ledger.start()
    await ledger.grant("a", 5, 0, 10)
    store.backlog = MAX_QUEUED_CHANGES
    with pytest.raises(ServiceUnavailable, match="waiting for the disk"):
        await ledger.grant("a", 5, 1, 10)
    store.backlog = 0
    assert ledger.healthy  # a refusal, not a failure: the next write goes through
    result = await ledger.consume("a", 1, 1)
    assert isinstance(result, ConsumptionReceipt)
    assert (result.sequence, result.available) == (2, 4)  # the refused grant left nothing
    await ledger.close()
