"""The storage contract: one suite, written once against the protocols of ``app.storage.base``
and run on every backend (as pyeventsourcing runs one recorder test case per backend, each
subclass saying only how to make its store).

- ``StorageContract``: what every backend promises (``StorageBackend``). A subclass gives
  the ``make_store`` fixture (a fresh, empty store per test; several calls reach the same
  data, as a restarted process would) and says how to write.
- ``EmbeddedContract`` writes with ``submit`` (memory, SQLite on a real file);
  ``TransactionalContract`` writes through ``transaction()`` (PostgreSQL on the throwaway
  server the tests start), with the same ``Change`` objects.
- ``DurableContract``: what a backend that keeps its data across a close promises besides
  (SQLite, PostgreSQL; memory keeps nothing by design, so it does not run them).

Also here: both databases have one schema (the tables and columns of ``app.storage.rows``).
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import ClassVar, Generic, TypeVar

import asyncpg
import pytest

from app.domain import LiveGrant
from app.storage import rows
from app.storage.base import (
    AccountRow,
    Change,
    ConsumptionEntry,
    EmbeddedJournal,
    Entry,
    GrantEntry,
    IdempotencyRecord,
    LoadedAccount,
    LoadedState,
    StorageBackend,
    StorageError,
    TransactionalStore,
)
from app.storage.memory import MemoryStore
from app.storage.postgres import PostgresStore
from app.storage.sqlite import SqliteStore
from tests import storage_dataset as data
from tests.support.pg_server import PostgresServer

S = TypeVar("S", bound=StorageBackend)
NOW_S = 1_800_000_000.0


def _broken_changes() -> dict[str, list[Change]]:
    """Groups that break one invariant each. Their first change is fine, and must not be
    written either."""
    fine = data.groups(NOW_S)[2][0]  # team-b:1's first grant
    e1, e2, e3 = data.ENTRIES["acme"][:3]
    keyless = data.record("g-1", NOW_S)
    keyless.body = None

    def acme(row: tuple[int, int, int, int], entries: list[Entry], **kw: object) -> Change:
        change = Change(AccountRow("acme", *row), entries=entries)
        for name, value in kw.items():
            setattr(change, name, value)
        return change

    return {
        "entries-not-contiguous": [fine, acme((5, 0, 3, 4), [e1, e3])],
        "entries-end-before-next-sequence": [fine, acme((0, 0, 2, 5), [e1])],
        "entry-after-the-clock": [fine, acme((0, 0, 3, 3), [e1, e2])],
        "grant-not-made": [fine, acme((0, 0, 1, 2), [e1])],
        "empty-live-grant": [
            fine,
            acme((0, 0, 2, 2), [e1], upserted_live_grants=[LiveGrant(1, 10, 0)]),
        ],
        "expired-live-grant": [
            fine,
            acme((0, 0, 2, 2), [e1], upserted_live_grants=[LiveGrant(1, 0, 5)]),
        ],
        "live-grant-kept-and-removed": [
            fine,
            acme(
                (0, 0, 2, 2),
                [e1],
                upserted_live_grants=[LiveGrant(1, 10, 5)],
                removed_grant_ids=[1],
            ),
        ],
        "live-grant-kept-after-removal": [
            fine,
            acme((0, 0, 2, 2), [e1], removed_grant_ids=[1]),
            acme((0, 0, 2, 2), [], upserted_live_grants=[LiveGrant(1, 10, 5)]),
        ],
        "key-without-body": [fine, acme((0, 0, 2, 2), [e1], idempotency=keyless)],
    }


BROKEN = _broken_changes()


class StorageContract(Generic[S]):
    # What writing a group that the database refuses raises.
    refused: ClassVar[tuple[type[BaseException], ...]]

    async def write(self, store: S, changes: Sequence[Change]) -> None:
        raise NotImplementedError

    async def write_all(self, store: S) -> None:
        for group in data.groups(NOW_S):
            await self.write(store, group)

    async def assert_refuses_writes_after_a_failure(self, store: S) -> None:
        """What a failed write does to the store: an embedded journal fails for good."""

    @pytest.fixture
    async def store(self, make_store: Callable[[], S]) -> AsyncIterator[S]:
        store = make_store()
        await store.open(0.0)
        try:
            yield store
        finally:
            await store.close()

    # -- lifecycle ---------------------------------------------------------------------------

    async def test_a_new_store_is_empty_healthy_and_current(self, store: S) -> None:
        assert await store.check() is None
        await store.ping()
        status = await store.migration_status()
        assert status.pending == ()
        assert status.current == max(status.known, default=0)
        assert await store.read_entries("acme", 0, 10) == []
        assert await store.read_account_state("acme") is None
        assert await store.read_grant_entry("acme", 1) is None
        assert await store.read_totals_at("acme", 5) == (0, 0)
        assert await store.read_idempotency("acme", "g-1") is None
        assert await store.read_idempotency_body("acme", "g-1") is None
        assert await store.migrate() == []  # open applied them

    # -- what is written reads back --------------------------------------------------------

    async def test_changes_read_back(self, store: S) -> None:
        await self.write_all(store)
        await data.assert_holds(store, NOW_S)
        assert await store.check() is None

    async def test_entries_page_by_sequence(self, store: S) -> None:
        await self.write_all(store)
        acme = data.ENTRIES["acme"]
        assert await store.read_entries("acme", 0, 2) == acme[:2]
        assert await store.read_entries("acme", 2, 2) == acme[2:4]
        assert await store.read_entries("acme", 4, 2) == acme[4:]
        assert await store.read_entries("acme", 5, 2) == []

    async def test_a_grant_entry_is_found_by_its_grant_id(self, store: S) -> None:
        await self.write_all(store)
        assert await store.read_grant_entry("acme", 3) == data.ENTRIES["acme"][4]
        assert await store.read_grant_entry("team-b:1", 1) == data.ENTRIES["team-b:1"][0]
        assert await store.read_grant_entry("acme", 4) is None
        assert await store.read_grant_entry("bat", 2) is None

    async def test_grant_entries_are_read_many_at_once_with_their_labels(self, store: S) -> None:
        await self.write_all(store)
        labelled = GrantEntry(3, 4, 13, 0, 2, 10, 50, 0, 10, "pool ✓", {"k": "v\nw", "e": ""})
        change = Change(AccountRow("bat", 4, 0, 3, 4), [LiveGrant(2, 50, 10)], [], [labelled])
        await self.write(store, [change])
        assert await store.read_grant_entries("bat", [2, 1, 7]) == {
            1: data.ENTRIES["bat"][0],
            2: labelled,
        }
        assert await store.read_grant_entries("bat", []) == {}
        assert await store.read_grant_entries("nobody", [1]) == {}
        assert await store.read_entries("bat", 2, 5) == [labelled]

    async def test_idempotency_keys_are_per_scope(self, store: S) -> None:
        await self.write_all(store)
        assert await store.read_idempotency("bat", "b-1") is None  # the batch's scope only
        assert await store.read_idempotency("/batch", "g-1") is None

    async def test_prune_drops_only_older_idempotency_records(self, store: S) -> None:
        groups = data.groups(NOW_S)
        for c in groups[0]:
            if c.idempotency is not None:
                c.idempotency.created_at_s = NOW_S - 100
        for group in groups:
            await self.write(store, group)
        assert await store.prune_idempotency(NOW_S - 50) == 1
        assert await store.read_idempotency("acme", "g-1") is None
        assert await store.read_idempotency_body("acme", "g-1") is None
        assert await store.read_idempotency("acme", "c-1") == data.record("c-1", NOW_S)
        assert await store.prune_idempotency(NOW_S - 50) == 0

    # -- all or nothing ----------------------------------------------------------------------

    async def test_a_group_the_database_refuses_leaves_nothing(self, store: S) -> None:
        first = data.groups(NOW_S)[0]
        await self.write(store, first)
        # team-b:1 is new; the acme change passes the group's own checks but its entry 1
        # is on disk already (the database's primary key refuses it).
        again = ConsumptionEntry(1, 1, 150, 0, amount=0, consumed=0, debt_added=0, allocation=())
        clash = Change(AccountRow("acme", 1, 0, 3, 2), entries=[again])
        with pytest.raises(self.refused):
            await self.write(store, [data.groups(NOW_S)[2][0], clash])
        assert await store.read_account_state("team-b:1") is None
        assert await store.read_entries("team-b:1", 0, 10) == []
        assert await store.read_entries("acme", 0, 10) == data.ENTRIES["acme"][:2]
        state = await store.read_account_state("acme")
        assert state is not None
        assert state.next_sequence == 3
        await self.assert_refuses_writes_after_a_failure(store)

    @pytest.mark.parametrize("broken", sorted(BROKEN))
    async def test_a_group_that_breaks_an_invariant_is_not_written(
        self, store: S, broken: str
    ) -> None:
        with pytest.raises((AssertionError, StorageError)):
            await self.write(store, BROKEN[broken])
        for account_id in ("acme", "team-b:1"):
            assert await store.read_account_state(account_id) is None
            assert await store.read_entries(account_id, 0, 10) == []
        assert await store.read_idempotency("acme", "g-1") is None
        await self.assert_refuses_writes_after_a_failure(store)

    def assert_loaded(self, loaded: LoadedState) -> None:
        """What ``open`` hands the service of a store that holds the dataset."""
        raise NotImplementedError


class DurableContract(StorageContract[S]):
    """What a backend that keeps its data across a close promises besides (not memory)."""

    async def test_a_reopened_store_finds_everything(self, make_store: Callable[[], S]) -> None:
        store = make_store()
        await store.open(0.0)
        try:
            await self.write_all(store)
        finally:
            await store.close()
        store = make_store()
        loaded = await store.open(0.0)
        try:
            await data.assert_holds(store, NOW_S)
            self.assert_loaded(loaded)
        finally:
            await store.close()

    async def test_open_drops_expired_idempotency_records(
        self, make_store: Callable[[], S]
    ) -> None:
        store = make_store()
        await store.open(0.0)
        try:
            await self.write_all(store)
        finally:
            await store.close()
        store = make_store()
        await store.open(NOW_S + 1)
        try:
            for scope, key, *_ in data.KEYS:
                assert await store.read_idempotency(scope, key) is None
            assert await store.read_entries("acme", 0, 10) == data.ENTRIES["acme"]
        finally:
            await store.close()


class EmbeddedContract(StorageContract[EmbeddedJournal]):
    refused = (StorageError,)

    async def write(self, store: EmbeddedJournal, changes: Sequence[Change]) -> None:
        await store.submit(changes)

    async def assert_refuses_writes_after_a_failure(self, store: EmbeddedJournal) -> None:
        # Memory (the service's) has run ahead of the journal: only a restart may serve.
        assert await store.check() is not None
        with pytest.raises(StorageError):
            await store.submit(data.groups(NOW_S)[4])

    def assert_loaded(self, loaded: LoadedState) -> None:
        assert {a: _in_grant_order(s) for a, s in loaded.accounts.items()} == data.STATES
        # The service matches retries from these; the bodies stay on disk until a replay.
        assert sorted(loaded.idempotency, key=lambda r: (r.scope, r.key)) == sorted(
            (
                IdempotencyRecord(scope, key, fp, status, None, NOW_S)
                for scope, key, fp, status, _ in data.KEYS
            ),
            key=lambda r: (r.scope, r.key),
        )


def _in_grant_order(account: LoadedAccount) -> LoadedAccount:
    state = account.tracker_state
    live_grants = tuple(sorted(state.live_grants, key=lambda b: b.grant_id))
    return LoadedAccount(replace(state, live_grants=live_grants), account.next_sequence)


class TestMemoryStore(EmbeddedContract):
    @pytest.fixture
    def make_store(self) -> Callable[[], EmbeddedJournal]:
        return MemoryStore


class TestSqliteStore(EmbeddedContract, DurableContract[EmbeddedJournal]):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[[], EmbeddedJournal]:
        return lambda: SqliteStore(tmp_path / "ledger.sqlite3")


class TransactionalContract(StorageContract[TransactionalStore]):
    # The database's own refusal; AssertionError when the group's checks refuse it first.
    refused = (asyncpg.PostgresError,)

    async def write(self, store: TransactionalStore, changes: Sequence[Change]) -> None:
        """As the shared service writes: lock (or create) the accounts, write, count the new
        ones, in one transaction."""
        account_ids = list(dict.fromkeys(c.account.account_id for c in changes))
        async with store.transaction() as tx:
            states = await tx.lock_accounts(account_ids)
            created = await tx.create_accounts([a for a in account_ids if a not in states])
            states.update(created)
            versions = {a: s.version for a, s in states.items()}
            await tx.write(changes, data.available_after(list(changes)), versions)
            await tx.settle_accounts(len(created), [])

    async def assert_refuses_writes_after_a_failure(self, store: TransactionalStore) -> None:
        # Nothing was committed and nothing is cached here: the next transaction works.
        await self.write(store, data.groups(NOW_S)[4])
        assert await store.read_account_state("bat") == data.STATES["bat"]

    def assert_loaded(self, loaded: LoadedState) -> None:
        assert loaded == LoadedState()  # the service reads accounts under their row locks


class TestPostgresStore(TransactionalContract, DurableContract[TransactionalStore]):
    @pytest.fixture
    def make_store(self, postgres_url: PostgresServer) -> Callable[[], TransactionalStore]:
        url = postgres_url.create_database(f"contract_{uuid.uuid4().hex[:16]}")
        return lambda: PostgresStore(url, 1, 4)


# -- one schema --------------------------------------------------------------------------------


def _expected_schema(backend: str) -> dict[str, list[str]]:
    tables = {t: sorted(cols) for t, cols in rows.SHARED_TABLES.items()}
    for table, extra in rows.BACKEND_ONLY_COLUMNS[backend].items():
        tables[table] = sorted([*tables.get(table, []), *extra])
    return tables


async def test_sqlite_and_postgres_have_one_schema(
    tmp_path: Path, postgres_url: PostgresServer
) -> None:
    sqlite_store = SqliteStore(tmp_path / "schema.sqlite3")
    await sqlite_store.open(0.0)
    await sqlite_store.close()
    with sqlite3.connect(tmp_path / "schema.sqlite3") as db:
        names = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        sqlite_tables = {
            t: sorted(r[1] for r in db.execute(f"PRAGMA table_info({t})")) for t in names
        }
    assert sqlite_tables == _expected_schema("sqlite")

    url = postgres_url.create_database(f"schema_{uuid.uuid4().hex[:16]}")
    pg_store = PostgresStore(url, 1, 1)
    await pg_store.open()
    await pg_store.close()
    conn = await asyncpg.connect(url)
    try:
        found = await conn.fetch(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public'"
        )
    finally:
        await conn.close()
    pg_tables: dict[str, list[str]] = {}
    for r in found:
        pg_tables.setdefault(r["table_name"], []).append(r["column_name"])
    assert {t: sorted(c) for t, c in pg_tables.items()} == _expected_schema("postgres")
