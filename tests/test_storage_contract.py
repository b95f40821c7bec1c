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

from app.domain import Allocation, LiveGrant, TrackerState
from app.storage import postgres as pg_backend
from app.storage import rows
from app.storage import sqlite as sqlite_backend
from app.storage.base import (
    AccountRow,
    Change,
    Checkpoint,
    ConsumptionEntry,
    EmbeddedJournal,
    Entry,
    EventRecord,
    ExpirationEntry,
    GrantEntry,
    IdempotencyRecord,
    LoadedAccount,
    LoadedState,
    StorageBackend,
    StorageError,
    TransactionalStore,
    position_of,
    read_entries_after_sequence,
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
        change = Change(AccountRow("acme", *row, watermark=row[0]), entries=entries)
        for name, value in kw.items():
            if name == "account_watermark":
                assert isinstance(value, int)
                change.account.watermark = value
            else:
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
        "watermark-after-the-clock": [fine, acme((0, 0, 2, 2), [e1], account_watermark=1)],
        "two-entries-at-one-position": [
            fine,
            acme(
                (0, 0, 2, 3),
                [ExpirationEntry(1, 0, 0, 0, 1, 0, 5), ExpirationEntry(2, 0, 0, 0, 1, 0, 5)],
            ),
        ],
        "restated-entry-is-new": [fine, acme((0, 0, 2, 1), [], restated=[e1])],
        "restated-and-removed": [
            fine,
            acme((1, 0, 3, 3), [e2], restated=[e1], removed_sequences=[1]),
        ],
        "checkpoint-after-the-watermark": [
            fine,
            acme(
                (0, 0, 2, 2),
                [e1],
                checkpoint=Checkpoint((1, 1), TrackerState(0, 0, 1, ())),
            ),
        ],
        "key-without-body": [fine, acme((0, 0, 2, 2), [e1], idempotency=keyless)],
    }


BROKEN = _broken_changes()
# Account ids whose byte order differs from a natural-language collation's.
EDGE_IDS = [
    "team-a:x", "A", "team-a-", "a", "team-a:", "team-a_x", "team-ab", "a0", "Z", "0",
    "team-a.", "team-a:1", "aA", "team-a-x", "b", "a:b", "a.b", "B",
]  # fmt: skip
EDGE_IDS_IN_BYTE_ORDER = [
    "0", "A", "B", "Z", "a", "a.b", "a0", "a:b", "aA", "b",
    "team-a-", "team-a-x", "team-a.", "team-a:", "team-a:1", "team-a:x", "team-a_x", "team-ab",
]  # fmt: skip


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
        assert await store.read_entries("acme", None, 10) == []
        assert await store.read_account_state("acme") is None
        assert await store.read_grant_entry("acme", 1) is None
        assert await store.read_totals_at("acme", 5) == (0, 0)
        assert await store.read_idempotency("acme", "g-1") is None
        assert await store.read_idempotency_body("acme", "g-1") is None
        assert await store.read_accounts("", "", 10) == []
        assert await store.read_accounts("acme", "", 10) == []
        assert await store.migrate() == []  # open applied them

    # -- what is written reads back --------------------------------------------------------

    async def test_changes_read_back(self, store: S) -> None:
        await self.write_all(store)
        await data.assert_holds(store, NOW_S)
        assert await store.check() is None

    async def test_entries_page_by_position(self, store: S) -> None:
        await self.write_all(store)
        acme = data.ENTRIES["acme"]
        assert await store.read_entries("acme", None, 2) == acme[:2]
        assert await store.read_entries("acme", position_of(acme[1]), 2) == acme[2:4]
        assert await store.read_entries("acme", position_of(acme[3]), 2) == acme[4:]
        assert await store.read_entries("acme", position_of(acme[4]), 2) == []
        assert await store.read_entry_position("acme", 2) == position_of(acme[1])
        assert await store.read_entry_position("acme", 6) is None
        assert await read_entries_after_sequence(store, "acme", 2, 2) == acme[2:4]
        assert await read_entries_after_sequence(store, "acme", 0, 1) == acme[:1]
        assert await read_entries_after_sequence(store, "acme", 9, 1) is None  # no such entry
        team = data.ENTRIES["team-b:1"]  # an expiration at 8 comes before a write at 8
        assert await store.read_entries("team-b:1", (8, -1), 5) == team[2:]

    async def test_the_end_of_the_ledger_is_read_in_effective_order(self, store: S) -> None:
        await self.write_all(store)
        acme = data.ENTRIES["acme"]
        assert await store.read_latest_entries("acme", 2) == acme[-2:]
        assert await store.read_latest_entries("acme", 1) == acme[-1:]
        assert await store.read_latest_entries("acme", 100) == acme
        team = data.ENTRIES["team-b:1"]  # an expiration at 8 comes before a write at 8
        assert await store.read_latest_entries("team-b:1", 2) == team[1:]
        assert await store.read_latest_entries("nobody", 5) == []

    async def test_a_late_write_restates_what_follows_it(self, store: S) -> None:
        """SPEC section 6, Example 4's third write, as storage sees it: a late grant is
        appended, the consumption after it is restated in place, a live grant comes back,
        a checkpoint of the final state is kept, and the account has provisional writes."""
        g1 = GrantEntry(1, 10, 50, 0, 1, 50, 100, 0, 50)
        c1 = ConsumptionEntry(2, 20, 0, 30, 80, 50, 30, (Allocation(1, 100, 50),))
        g2 = GrantEntry(3, 12, 90, 0, 2, 40, 60, 0, 40)
        c1_now = ConsumptionEntry(
            2, 20, 10, 0, 80, 80, 0, (Allocation(2, 60, 40), Allocation(1, 100, 40)), revision=1
        )
        final = TrackerState(10, 0, 2, (LiveGrant(1, 100, 50, granted_at=10),))
        checkpoint = Checkpoint((10, 1), final)

        def row(clock: int, debt: int, next_grant_id: int, next_sequence: int) -> AccountRow:
            return AccountRow("late", clock, debt, next_grant_id, next_sequence, (), 10, 10, 0)

        await self.write(
            store,
            [
                Change(
                    replace(row(10, 0, 2, 2), watermark=0),
                    [LiveGrant(1, 100, 50, granted_at=10)],
                    entries=[g1],
                )
            ],
        )
        await self.write(store, [Change(row(20, 30, 2, 3), [], [1], [c1])])
        await self.write(
            store,
            [
                Change(
                    row(20, 0, 3, 4),
                    [LiveGrant(2, 60, 40, granted_at=12), LiveGrant(1, 100, 10, granted_at=10)],
                    entries=[g2],
                    restated=[c1_now],
                    checkpoint=checkpoint,
                )
            ],
        )
        assert await store.read_entries("late", None, 10) == [g1, g2, c1_now]
        assert await store.read_entries("late", (12, 3), 10) == [c1_now]
        assert await store.read_latest_entries("late", 2) == [g2, c1_now]  # not by sequence
        assert await store.read_entry_position("late", 2) == (20, 2)
        assert await store.read_writes("late", None, 15, 10) == [g1, g2]
        assert await store.read_writes("late", (10, 1), 100, 1) == [g2]
        assert await store.read_checkpoint("late", 9) is None
        assert await store.read_checkpoint("late", 10) == checkpoint
        assert await store.read_checkpoint("late", 10**15) == checkpoint
        assert await store.read_totals_at("late", 15) == (90, 0)
        assert await store.read_totals_at("late", 20) == (10, 0)
        loaded = await store.read_account_state("late")
        assert loaded is not None
        assert loaded.watermark == 10
        assert loaded.lateness_window == 10
        assert sorted(loaded.tracker_state.live_grants, key=lambda g: g.grant_id) == [
            LiveGrant(1, 100, 10, granted_at=10),
            LiveGrant(2, 60, 40, granted_at=12),
        ]
        assert loaded.checkpoint == checkpoint
        assert loaded.writes_since_checkpoint == (g2, c1_now)
        assert loaded.provisional_entries == (g2, c1_now)
        # A restated grant keeps its label: only its effect is written over.
        restated = replace(g2, available=95, revision=1)
        await self.write(store, [Change(row(20, 0, 3, 4), restated=[restated])])
        assert await store.read_grant_entry("late", 2) == restated
        named = replace(g2, name="pool", metadata={"k": "v"})
        await self.write(store, [Change(row(20, 0, 3, 4), restated=[named])])
        await self.write(store, [Change(row(20, 0, 3, 4), restated=[restated])])
        labelled = replace(restated, name="pool", metadata={"k": "v"})
        assert await store.read_grant_entry("late", 2) == labelled
        assert await store.read_entries("late", (10, 1), 1) == [labelled]

    async def test_an_undone_entry_is_gone(self, store: S) -> None:
        await self.write_all(store)
        team = data.ENTRIES["team-b:1"]
        row = replace(data.account_row("team-b:1"), watermark=0)
        await self.write(store, [Change(row, removed_sequences=[2])])
        assert await store.read_entries("team-b:1", None, 10) == [team[0], team[2]]
        assert await store.read_entry_position("team-b:1", 2) is None

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
        assert await store.read_entries("bat", position_of(data.ENTRIES["bat"][1]), 5) == [labelled]

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

    # -- usage-stream event ids --------------------------------------------------------------

    async def test_event_ids_read_back_and_are_pruned(self, store: S) -> None:
        groups = _with_events(data.groups(NOW_S), NOW_S)
        for c in groups[0]:
            assert c.event is not None
            c.event.created_at_s = NOW_S - 100
        for group in groups:
            await self.write(store, group)
        everything = _events_of(groups)
        keys = [*everything, ("acme", "nobody"), ("nobody", "e-acme-1")]
        assert await store.read_event_ids(keys) == everything
        assert await store.read_event_ids([]) == {}
        # Per account: the same id on another account is another event.
        assert await store.read_event_ids([("bat", "e-acme-1")]) == {}
        assert await store.prune_event_ids(NOW_S - 50) == 2
        older = {(e.account_id, e.event_id) for c in groups[0] if (e := c.event)}
        kept = {k: r for k, r in everything.items() if k not in older}
        assert await store.read_event_ids(keys) == kept
        assert await store.prune_event_ids(NOW_S - 50) == 0
        # The idempotency records are swept apart (by the same service call).
        assert await store.read_idempotency("acme", "g-1") == data.record("g-1", NOW_S)

    async def test_an_event_id_is_written_with_its_change_or_not_at_all(self, store: S) -> None:
        first = _with_events(data.groups(NOW_S), NOW_S)[0]
        await self.write(store, first)
        again = ConsumptionEntry(1, 1, 150, 0, amount=0, consumed=0, debt_added=0, allocation=())
        clash = Change(AccountRow("acme", 1, 0, 3, 2), entries=[again])
        made = _with_events(data.groups(NOW_S), NOW_S)[2][0]
        with pytest.raises(self.refused):
            await self.write(store, [made, clash])
        assert made.event is not None
        assert await store.read_event_ids([("team-b:1", made.event.event_id)]) == {}
        kept = _events_of([first])
        assert await store.read_event_ids(list(kept)) == kept

    async def test_an_event_naming_another_entry_is_not_written(self, store: S) -> None:
        change = _with_events(data.groups(NOW_S), NOW_S)[0][0]
        assert change.event is not None
        change.event.sequence = 7
        with pytest.raises((AssertionError, StorageError)):
            await self.write(store, [change])
        assert await store.read_event_ids([("acme", "e-acme-1")]) == {}
        assert await store.read_account_state("acme") is None

    # -- listing accounts --------------------------------------------------------------------

    async def test_accounts_are_listed_by_prefix_after_a_cursor(self, store: S) -> None:
        await self.write_all(store)
        acme, bat, team = (data.account_row(a) for a in ("acme", "bat", "team-b:1"))
        cases: list[tuple[str, str, int, list[AccountRow]]] = [
            ("", "", 10, [acme, bat, team]),
            ("", "", 2, [acme, bat]),  # at most limit
            ("", "", 1, [acme]),
            ("", "bat", 10, [team]),  # strictly after the cursor
            ("", "b", 10, [bat, team]),  # a cursor need not be an account
            ("", "team-b:1", 10, []),
            ("team-b:", "", 10, [team]),
            ("team-b:1", "", 10, [team]),  # a prefix may be a whole id
            ("team-b:10", "", 10, []),
            ("a", "", 10, [acme]),
            ("a", "acme", 10, []),
            ("b", "a", 10, [bat]),  # a cursor before the prefix's range
            ("acme", "zzz", 10, []),  # a cursor past it
            ("nobody", "", 10, []),
        ]
        for prefix, after, limit, expected in cases:
            assert await store.read_accounts(prefix, after, limit) == expected, (prefix, after)

    async def test_accounts_are_listed_in_byte_order(self, store: S) -> None:
        """Byte order of the id, whatever the database's collation: upper case before lower
        case, and a prefix takes exactly the ids that start with it (``team-a:`` is not
        ``team-a-``, ``a`` is not ``A``)."""
        await self.write(store, [data.first_grant(a) for a in EDGE_IDS])

        async def ids(prefix: str, after: str = "", limit: int = 100) -> list[str]:
            return [r.account_id for r in await store.read_accounts(prefix, after, limit)]

        assert await ids("") == EDGE_IDS_IN_BYTE_ORDER
        assert sorted(EDGE_IDS, key=lambda a: a.encode()) == EDGE_IDS_IN_BYTE_ORDER
        assert await ids("a") == ["a", "a.b", "a0", "a:b", "aA"]
        assert await ids("A") == ["A"]
        assert await ids("team-a:") == ["team-a:", "team-a:1", "team-a:x"]
        assert await ids("team-a-") == ["team-a-", "team-a-x"]
        assert await ids("team-a") == [
            "team-a-",
            "team-a-x",
            "team-a.",
            "team-a:",
            "team-a:1",
            "team-a:x",
            "team-a_x",
            "team-ab",
        ]
        assert await ids("team-a:", after="team-a-x") == ["team-a:", "team-a:1", "team-a:x"]
        assert await ids("team-a:", after="team-a:") == ["team-a:1", "team-a:x"]
        assert await ids("", after="Z") == EDGE_IDS_IN_BYTE_ORDER[4:]
        for limit in (1, 2, 3, 7):
            pages: list[str] = []
            after = ""
            while page := await ids("", after, limit):
                assert len(page) <= limit
                pages += page
                after = page[-1]
            assert pages == EDGE_IDS_IN_BYTE_ORDER, limit

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
        assert await store.read_entries("team-b:1", None, 10) == []
        assert [r.account_id for r in await store.read_accounts("", "", 10)] == ["acme"]
        assert await store.read_entries("acme", None, 10) == data.ENTRIES["acme"][:2]
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
            assert await store.read_entries(account_id, None, 10) == []
        assert await store.read_idempotency("acme", "g-1") is None
        assert await store.read_accounts("", "", 10) == []
        await self.assert_refuses_writes_after_a_failure(store)

    def assert_loaded(self, loaded: LoadedState) -> None:
        """What ``open`` hands the service of a store that holds the dataset."""
        raise NotImplementedError


def _with_events(groups: list[list[Change]], created_at_s: float) -> list[list[Change]]:
    """The dataset's changes, each made by a usage-stream line (id e-<account>-<n>, naming
    the change's first entry; a grant's entry names its grant)."""
    for group in groups:
        for change in group:
            account_id = change.account.account_id
            first = change.entries[0]
            grant_id = first.grant_id if isinstance(first, GrantEntry) else None
            change.event = EventRecord(
                account_id,
                f"e-{account_id}-{first.sequence}",
                f"fp-{first.sequence}",
                first.sequence,
                grant_id,
                created_at_s,
            )
    return groups


def _events_of(groups: Sequence[Sequence[Change]]) -> dict[tuple[str, str], EventRecord]:
    return {(e.account_id, e.event_id): e for group in groups for c in group if (e := c.event)}


class DurableContract(StorageContract[S]):
    """What a backend that keeps its data across a close promises besides (not memory)."""

    async def test_event_ids_survive_a_reopen_until_they_expire(
        self, make_store: Callable[[], S]
    ) -> None:
        groups = _with_events(data.groups(NOW_S), NOW_S)
        store = make_store()
        await store.open(0.0)
        try:
            for group in groups:
                await self.write(store, group)
        finally:
            await store.close()
        everything = _events_of(groups)
        store = make_store()
        loaded = await store.open(0.0)
        try:
            assert await store.read_event_ids(list(everything)) == everything
            self.assert_loaded_events(loaded, everything)
        finally:
            await store.close()
        store = make_store()
        loaded = await store.open(NOW_S + 1)
        try:
            assert await store.read_event_ids(list(everything)) == {}
            self.assert_loaded_events(loaded, {})
        finally:
            await store.close()

    def assert_loaded_events(
        self, loaded: LoadedState, events: dict[tuple[str, str], EventRecord]
    ) -> None:
        """What ``open`` hands the service of the event ids a store holds."""
        raise NotImplementedError

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
            assert await store.read_entries("acme", None, 10) == data.ENTRIES["acme"]
        finally:
            await store.close()


class EmbeddedContract(StorageContract[EmbeddedJournal]):
    refused = (StorageError,)

    def assert_loaded_events(
        self, loaded: LoadedState, events: dict[tuple[str, str], EventRecord]
    ) -> None:
        # The service holds them, to answer duplicates without reading.
        assert {(e.account_id, e.event_id): e for e in loaded.event_ids} == events

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
    return replace(account, tracker_state=replace(state, live_grants=live_grants))


class TestMemoryStore(EmbeddedContract):
    @pytest.fixture
    def make_store(self) -> Callable[[], EmbeddedJournal]:
        return MemoryStore


class TestSqliteStore(EmbeddedContract, DurableContract[EmbeddedJournal]):
    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[[], EmbeddedJournal]:
        return lambda: SqliteStore(tmp_path / "ledger.sqlite3")

    async def test_listing_accounts_is_a_primary_key_range(
        self, store: EmbeddedJournal, tmp_path: Path
    ) -> None:
        """Bounded work per page: a range of the primary key read in order (no scan of
        every account, no sort)."""
        with sqlite3.connect(tmp_path / "ledger.sqlite3") as db:
            plan = " | ".join(
                r[3]
                for r in db.execute(
                    f"EXPLAIN QUERY PLAN {sqlite_backend.ACCOUNTS_RANGE}",
                    ("", "team-a:", "team-a:\x7f", 10),
                )
            )
        assert "SEARCH accounts USING PRIMARY KEY (account_id>? AND account_id<?)" in plan, plan
        assert "TEMP B-TREE" not in plan, plan

    async def test_the_end_of_the_ledger_is_an_index_read_backwards(
        self, store: EmbeddedJournal, tmp_path: Path
    ) -> None:
        """Bounded work whatever the history's length: the position index, no sort."""
        with sqlite3.connect(tmp_path / "ledger.sqlite3") as db:
            plan = " | ".join(
                r[3]
                for r in db.execute(f"EXPLAIN QUERY PLAN {sqlite_backend.LATEST_ENTRIES}", ("a", 5))
            )
        assert "SEARCH entries USING INDEX entries_by_position (account=?)" in plan, plan
        assert "SEARCH accounts USING PRIMARY KEY (account_id=?)" in plan, plan
        assert "TEMP B-TREE" not in plan, plan

    @pytest.mark.parametrize(
        ("query", "index", "args"),
        [
            (sqlite_backend.GRANT_ENTRY, "entries_by_grant", ("a", 1)),
            (sqlite_backend.VOID_ENTRY, "entries_by_void", ("a", 1)),
            (sqlite_backend.GRANT_ENTRIES.format(marks="?, ?"), "entries_by_grant", ("a", 1, 2)),
        ],
        ids=["grant", "void", "grants"],
    )
    async def test_a_grant_entry_is_an_index_lookup(
        self,
        store: EmbeddedJournal,
        tmp_path: Path,
        query: str,
        index: str,
        args: tuple[object, ...],
    ) -> None:
        """Not a scan of the account's history (the primary key's account prefix, which
        SQLite's planner picks by itself)."""
        with sqlite3.connect(tmp_path / "ledger.sqlite3") as db:
            plan = " | ".join(r[3] for r in db.execute(f"EXPLAIN QUERY PLAN {query}", args))
        assert f"SEARCH entries USING INDEX {index} (account=? AND grant_id=?)" in plan, plan


class TransactionalContract(StorageContract[TransactionalStore]):
    # The database's own refusal; AssertionError when the group's checks refuse it first.
    refused = (asyncpg.PostgresError,)

    async def write(self, store: TransactionalStore, changes: Sequence[Change]) -> None:
        """As the shared service writes: lock (or create) the accounts, write, count the new
        ones, in one transaction."""
        account_ids = list(dict.fromkeys(c.account.account_id for c in changes))
        async with store.transaction() as tx:
            states, created = await tx.lock_or_create_accounts(account_ids)
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

    def assert_loaded_events(
        self, loaded: LoadedState, events: dict[tuple[str, str], EventRecord]
    ) -> None:
        assert loaded.event_ids == []  # read in the transaction that applies the lines

    async def test_account_states_are_listed_with_their_available_credits(
        self, store: TransactionalStore
    ) -> None:
        await self.write_all(store)
        states = await store.read_account_states("", "", 10)
        assert [(s.account_id, s.clock, s.available, s.debt) for s in states] == [
            ("acme", 15, 15, 0),
            ("bat", 3, 3, 0),
            ("team-b:1", 9, 9, 0),
        ]
        assert all(s.version >= 1 for s in states)
        assert await store.read_account_states("b", "", 10) == states[1:2]
        assert await store.read_account_states("", "acme", 1) == states[1:2]

    async def test_an_account_being_created_is_not_listed(self, store: TransactionalStore) -> None:
        """A transaction that may create an account holds a placeholder row until it
        commits: nobody lists it meanwhile, and nobody ever does if it is not used."""
        await self.write_all(store)
        listed = [data.account_row(a) for a in data.ACCOUNTS]
        async with store.transaction() as tx:
            existing, created = await tx.lock_or_create_accounts(["ant", "zed"])
            assert (existing, set(created)) == ({}, {"ant", "zed"})
            assert await store.read_accounts("", "", 10) == listed  # another connection
            await tx.settle_accounts(0, ["ant", "zed"])
        assert await store.read_accounts("", "", 10) == listed

    async def test_accounts_are_locked_or_created_in_one_pass(
        self, store: TransactionalStore
    ) -> None:
        """Existing rows are returned as they are, missing ones as new placeholders (counted
        or removed at settle time)."""
        await self.write_all(store)
        listed = [data.account_row(a) for a in data.ACCOUNTS]
        async with store.transaction() as tx:
            existing, created = await tx.lock_or_create_accounts(["zed", "bat", "ant", "acme"])
            assert set(existing) == {"acme", "bat"}
            assert existing["bat"] == await store.read_account("bat")
            assert set(created) == {"ant", "zed"}
            assert all(s.version == 0 for s in created.values())
            await tx.settle_accounts(0, list(created))
        assert await store.read_accounts("", "", 10) == listed


class TestPostgresStore(TransactionalContract, DurableContract[TransactionalStore]):
    """On a database whose default collation is ICU's en-US, not byte order (``a`` before
    ``A``): the listing must not depend on the database's collation."""

    @pytest.fixture
    def url(self, postgres_url: PostgresServer) -> str:
        return postgres_url.create_database(f"contract_{uuid.uuid4().hex[:16]}", "en-US")

    @pytest.fixture
    def make_store(self, url: str) -> Callable[[], TransactionalStore]:
        return lambda: PostgresStore(url, 1, 4)

    async def test_listing_accounts_is_an_index_range(
        self, store: TransactionalStore, url: str
    ) -> None:
        """Bounded work per page: a range of ``accounts_by_prefix`` read in order (no scan
        of every account, no sort). Sequential and bitmap scans are disabled: on a table this
        small the planner rightly prefers them, and what is checked is that the index serves
        the range in the order asked for."""
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
            plan = "\n".join(
                r[0]
                for r in await conn.fetch(
                    f"EXPLAIN {pg_backend.ACCOUNTS_RANGE}", "", "team-a:", "team-a:\x7f", 10
                )
            )
        finally:
            await conn.close()
        assert "Index Scan using accounts_by_prefix on accounts" in plan, plan
        assert "Sort" not in plan, plan

    async def test_the_end_of_the_ledger_is_an_index_read_backwards(
        self, store: TransactionalStore, url: str
    ) -> None:
        """Bounded work whatever the history's length: the position index read backwards,
        no sort (sequential and bitmap scans disabled, as above)."""
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
            plan = "\n".join(
                r[0] for r in await conn.fetch(f"EXPLAIN {pg_backend.LATEST_ENTRIES}", "a", 5)
            )
        finally:
            await conn.close()
        assert "Index Scan Backward using entries_by_position on entries" in plan, plan
        assert "Sort" not in plan, plan


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
