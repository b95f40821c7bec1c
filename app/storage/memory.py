"""In-memory backend: explicit opt-in for ephemeral use and fast tests. Nothing survives the
process (``close`` forgets everything); ``submit`` completes on the next loop turn because
there is no disk to wait for.

It keeps what the other backends keep, so that the one storage contract holds for it too:
entries, account rows, live grants and idempotency records. Account ids are also kept in a
sorted list, so that listing a page of accounts is a binary search and a slice (adding an
account is a binary search and a list insertion: a memmove of 8 bytes per account held,
under a millisecond at a million accounts). A group is checked whole before
any of it is applied, so it is all or nothing like a transaction; a group that fails its
checks fails this store for good, as a failed commit fails the SQLite one.
"""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import itertools
import logging
from collections.abc import Sequence
from typing import TypeVar

from app.domain import LiveGrant, TrackerState
from app.observe import NULL_OBSERVER, Observer
from app.storage import rows
from app.storage.base import (
    ACCOUNT_ID_END,
    MAX_EVENT_IDS_PER_READ,
    MAX_GRANT_IDS_PER_READ,
    AccountRow,
    Change,
    Checkpoint,
    Entry,
    EventRecord,
    ExpirationEntry,
    GrantEntry,
    IdempotencyRecord,
    LoadedAccount,
    LoadedState,
    MigrationStatus,
    Position,
    StorageError,
    VoidEntry,
    WriteEntry,
    final_clock,
    position_of,
)
from app.storage.by_age import FORGET_SLICE, ByAge

log = logging.getLogger("app.storage.memory")


class MemoryStore:
    # The ledger keeps the bodies it replays. It holds the very record objects this store
    # keeps (nothing is copied), so keeping them here too costs a dict slot each.
    persists_idempotency_bodies = False

    def __init__(self) -> None:
        self._forget()
        self.observer: Observer = NULL_OBSERVER  # never told anything: nothing to commit

    def _forget(self) -> None:
        self._entries: dict[str, _Ledger] = {}
        self._checkpoints: dict[str, list[Checkpoint]] = {}  # in position order
        self._grant_entries: dict[tuple[str, int], GrantEntry] = {}
        self._void_entries: dict[tuple[str, int], VoidEntry] = {}
        self._accounts: dict[str, AccountRow] = {}
        self._account_ids: list[str] = []  # the keys of _accounts, in byte (code point) order
        self._live_grants: dict[str, dict[int, LiveGrant]] = {}
        # Dropped by the ledger's hourly prune: at most the keys of the retention period
        # and one sweep interval.
        self._keys: ByAge[tuple[str, str], IdempotencyRecord] = ByAge(lambda r: (r.scope, r.key))
        # The same retention as keys.
        self._event_ids: ByAge[tuple[str, str], EventRecord] = ByAge(
            lambda e: (e.account_id, e.event_id)
        )
        self._failure: StorageError | None = None

    async def open(self, idempotency_min_created_at_s: float) -> LoadedState:
        return LoadedState()  # nothing survives a close

    async def close(self) -> None:
        self._forget()  # as the process would

    @property
    def queued_changes(self) -> int:
        return 0  # nothing waits for a disk here

    def submit(self, changes: Sequence[Change]) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        if self._failure is None:
            try:
                self._check(changes)
            except Exception as exc:  # a broken invariant: see the module docstring
                self._failure = StorageError(f"change refused: {exc}")
                log.critical("%s; refusing writes", self._failure, exc_info=exc)
        if self._failure is not None:
            done.set_exception(self._failure)
            return done
        for change in changes:
            self._apply(change)
        # Completes on the next turn of the event loop, not at once: a request that never
        # yields runs start to finish inside the turn that read it, and under load that
        # starves other connections (measured: p99 at 64 connections 330 ms this way, 40 ms
        # with the yield, at the same throughput).
        loop.call_soon(done.set_result, None)
        return done

    def _check(self, changes: Sequence[Change]) -> None:
        """The group's own invariants, and where its entries start against what is stored
        (the primary key a database would check)."""
        rows.check_changes(changes)
        next_seq: dict[str, int] = {}
        for change in changes:
            account_id = change.account.account_id
            if change.entries:
                stored = self._accounts.get(account_id)
                expected = next_seq.get(account_id, 1 if stored is None else stored.next_sequence)
                if change.entries[0].sequence != expected:
                    raise StorageError(
                        f"{account_id}: entry {change.entries[0].sequence} is not entry {expected}"
                    )
                next_seq[account_id] = change.entries[-1].sequence + 1

    def _apply(self, change: Change) -> None:
        account_id = change.account.account_id
        if account_id not in self._accounts:
            bisect.insort(self._account_ids, account_id)
        self._accounts[account_id] = change.account
        ledger = self._entries.setdefault(account_id, _Ledger())
        for sequence in change.removed_sequences:
            ledger.remove(sequence)
        for entry in (*change.entries, *change.restated):
            stored = ledger.by_sequence.get(entry.sequence)
            if isinstance(stored, GrantEntry) and isinstance(entry, GrantEntry):
                # As the databases' merge: members a restatement leaves out (a label) stay.
                entry = dataclasses.replace(
                    entry,
                    name=stored.name if entry.name is None else entry.name,
                    metadata=stored.metadata if entry.metadata is None else entry.metadata,
                )
            ledger.put(entry)
            if isinstance(entry, GrantEntry):
                self._grant_entries[(account_id, entry.grant_id)] = entry
            elif isinstance(entry, VoidEntry):
                self._void_entries[(account_id, entry.grant_id)] = entry
        live_grants = self._live_grants.setdefault(account_id, {})
        for live in change.upserted_live_grants:
            kept = live_grants.get(live.grant_id)
            # As the databases' upsert: a live grant's row changes only its remaining credits.
            live_grants[live.grant_id] = (
                live if kept is None else dataclasses.replace(kept, remaining=live.remaining)
            )
        for grant_id in change.removed_grant_ids:
            live_grants.pop(grant_id, None)
        if change.checkpoint is not None:
            checkpoints = self._checkpoints.setdefault(account_id, [])
            checkpoints.append(change.checkpoint)
            checkpoints.sort(key=lambda c: c.position)
        record = change.idempotency
        if record is not None:
            self._keys.put(record)
        event = change.event
        if event is not None:
            self._event_ids.put(event)

    async def check(self) -> str | None:
        return None if self._failure is None else str(self._failure)  # no files to lose

    async def ping(self) -> None:
        return None

    async def migrate(self) -> list[int]:
        return []  # no schema

    async def migration_status(self) -> MigrationStatus:
        return MigrationStatus(applied=(), known=())

    async def read_entries(
        self, account_id: str, after: Position | None, limit: int
    ) -> list[Entry]:
        ledger = self._entries.get(account_id)
        return [] if ledger is None else ledger.after(after, limit)

    async def read_latest_entries(self, account_id: str, limit: int) -> list[Entry]:
        ledger = self._entries.get(account_id)
        return [] if ledger is None else ledger.latest(limit)

    async def read_entry_position(self, account_id: str, sequence: int) -> Position | None:
        ledger = self._entries.get(account_id)
        entry = None if ledger is None else ledger.by_sequence.get(sequence)
        return None if entry is None else position_of(entry)

    async def read_writes(
        self, account_id: str, after: Position | None, until_timestamp: int, limit: int
    ) -> list[WriteEntry]:
        ledger = self._entries.get(account_id)
        return [] if ledger is None else ledger.writes(after, until_timestamp, limit)

    async def read_checkpoint(self, account_id: str, timestamp: int) -> Checkpoint | None:
        return _checkpoint_at(self._checkpoints.get(account_id, []), timestamp)

    async def read_replay(
        self, account_id: str, timestamp: int, limit: int
    ) -> tuple[Checkpoint | None, list[WriteEntry]]:
        checkpoint = _checkpoint_at(self._checkpoints.get(account_id, []), timestamp)
        after = None if checkpoint is None else checkpoint.position
        return checkpoint, await self.read_writes(account_id, after, timestamp, limit)

    async def read_grant_entries(
        self, account_id: str, grant_ids: Sequence[int]
    ) -> dict[int, GrantEntry]:
        assert len(grant_ids) <= MAX_GRANT_IDS_PER_READ
        found = (self._grant_entries.get((account_id, g)) for g in grant_ids)
        return {e.grant_id: e for e in found if e is not None}

    async def read_void_entry(self, account_id: str, grant_id: int) -> VoidEntry | None:
        return self._void_entries.get((account_id, grant_id))

    async def read_grant_entry(self, account_id: str, grant_id: int) -> Entry | None:
        return self._grant_entries.get((account_id, grant_id))

    async def read_totals_at(self, account_id: str, timestamp: int) -> tuple[int, int]:
        ledger = self._entries.get(account_id)
        entry = None if ledger is None else ledger.last_at(timestamp)
        return (0, 0) if entry is None else (entry.available, entry.debt)

    async def read_account_state(self, account_id: str) -> LoadedAccount | None:
        row = self._accounts.get(account_id)
        if row is None:
            return None
        live_grants = tuple(b for _, b in sorted(self._live_grants.get(account_id, {}).items()))
        state = TrackerState(row.clock, row.debt, row.next_grant_id, live_grants, row.debts)
        loaded = LoadedAccount(
            state,
            row.next_sequence,
            row.watermark,
            row.lateness_window,
            row.folded_since_checkpoint,
        )
        if row.watermark < row.clock:  # provisional writes: see LoadedAccount
            ledger = self._entries[account_id]
            checkpoint = _checkpoint_at(self._checkpoints.get(account_id, []), row.watermark)
            loaded.checkpoint = checkpoint
            after = None if checkpoint is None else checkpoint.position
            size = len(ledger.order)
            loaded.writes_since_checkpoint = tuple(ledger.writes(after, row.clock, size))
            start = final_clock(checkpoint, loaded.writes_since_checkpoint, row.watermark)
            loaded.provisional_entries = tuple(ledger.after((start, 2**63 - 1), size))
        return loaded

    async def read_accounts(self, prefix: str, after: str, limit: int) -> list[AccountRow]:
        ids = self._account_ids
        start = max(bisect.bisect_right(ids, after), bisect.bisect_left(ids, prefix))
        end = prefix + ACCOUNT_ID_END
        found: list[AccountRow] = []
        for account_id in ids[start : start + limit]:
            if account_id >= end:
                break
            found.append(self._accounts[account_id])
        return found

    async def read_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        return self._keys.get((scope, key))

    async def read_idempotency_body(self, scope: str, key: str) -> bytes | None:
        record = self._keys.get((scope, key))
        return None if record is None else record.body

    async def prune_idempotency(self, min_created_at_s: float) -> int:
        return await _prune(self._keys, min_created_at_s)

    async def read_event_ids(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], EventRecord]:
        assert len(keys) <= MAX_EVENT_IDS_PER_READ
        return {k: r for k in keys if (r := self._event_ids.get(k)) is not None}

    async def prune_event_ids(self, min_created_at_s: float) -> int:
        return await _prune(self._event_ids, min_created_at_s)


_Aged = TypeVar("_Aged", IdempotencyRecord, EventRecord)


async def _prune(records: ByAge[tuple[str, str], _Aged], min_created_at_s: float) -> int:
    """Forget the records made before ``min_created_at_s``, oldest first, a slice at a time
    with the event loop free between (see ``app.storage.by_age``)."""
    forgotten = 0
    while True:
        old = records.pop_oldest(lambda r: r.created_at_s < min_created_at_s, FORGET_SLICE)
        forgotten += len(old)
        if len(old) < FORGET_SLICE:
            return forgotten
        await asyncio.sleep(0)


def _checkpoint_at(checkpoints: list[Checkpoint], timestamp: int) -> Checkpoint | None:
    index = bisect.bisect_right(checkpoints, timestamp, key=lambda c: c.position[0])
    return checkpoints[index - 1] if index else None


class _Ledger:
    """One account's entries by sequence, and their sequences in effective order (a sorted
    list: an append at the end is the common case; a late write's insert is a memmove)."""

    __slots__ = ("by_sequence", "order")

    def __init__(self) -> None:
        self.by_sequence: dict[int, Entry] = {}
        self.order: list[tuple[Position, int]] = []

    def put(self, entry: Entry) -> None:
        old = self.by_sequence.get(entry.sequence)
        if old is not None:
            self._drop(old)
        self.by_sequence[entry.sequence] = entry
        key = (position_of(entry), entry.sequence)
        if not self.order or self.order[-1] < key:
            self.order.append(key)
        else:
            bisect.insort(self.order, key)

    def remove(self, sequence: int) -> None:
        old = self.by_sequence.pop(sequence, None)
        if old is not None:
            self._drop(old)

    def _drop(self, entry: Entry) -> None:
        key = (position_of(entry), entry.sequence)
        index = bisect.bisect_left(self.order, key)
        assert self.order[index] == key, "the order lists every entry"
        del self.order[index]

    def after(self, after: Position | None, limit: int) -> list[Entry]:
        start = 0 if after is None else bisect.bisect_right(self.order, (after, 2**63))
        return [self.by_sequence[s] for _, s in self.order[start : start + limit]]

    def latest(self, limit: int) -> list[Entry]:
        assert limit >= 1
        return [self.by_sequence[s] for _, s in self.order[-limit:]]

    def writes(self, after: Position | None, until_timestamp: int, limit: int) -> list[WriteEntry]:
        start = 0 if after is None else bisect.bisect_right(self.order, (after, 2**63))
        found: list[WriteEntry] = []
        for (timestamp, _), sequence in itertools.islice(self.order, start, None):
            if timestamp > until_timestamp or len(found) == limit:
                break
            entry = self.by_sequence[sequence]
            if not isinstance(entry, ExpirationEntry):
                found.append(entry)
        return found

    def last_at(self, timestamp: int) -> Entry | None:
        index = bisect.bisect_right(self.order, ((timestamp, 2**63), 0))
        return self.by_sequence[self.order[index - 1][1]] if index else None
