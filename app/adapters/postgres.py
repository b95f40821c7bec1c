"""The PostgreSQL adapter: the same service, for several processes and hosts at once.

The embedded adapter trusts process memory and writes behind it. Here the database decides:
every unit of work is one transaction that locks the rows of its accounts (existing or new,
in one pass in sorted order, so units over overlapping accounts never deadlock), so each
account sees one operation at a time in real-time order, whichever process serves it
(linearizable per account), while different accounts never wait for each other. Trackers
are cached per process and tagged with the row version; a unit of work that finds another
version reloads the account's live grants first. The cache is bounded
by ``Limits.max_live_grants`` (least recently used evicted).

A COMMIT that fails after it may have taken effect is ``OutcomeUnknown`` (503, retry with the
same Idempotency-Key), never ``ServiceUnavailable``, which here means nothing was committed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final, TypeVar

import asyncpg

from app.domain import GPUCreditTracker, LedgerError, TrackerState
from app.domain.timeline import AccountTimeline
from app.quotas import Quota, Tenants, Usage
from app.service import journal
from app.service.errors import (
    AccountLimit,
    AccountNotFound,
    BatchReplayTooLarge,
    CursorGone,
    IdempotencyKeyReused,
    OutcomeUnknown,
    QuotaExceeded,
    ServiceUnavailable,
)
from app.service.history import MAX_REPLAYED_WRITES, as_of, replayed
from app.service.idempotency import Idempotency
from app.service.journal import (
    AccountState,
    AsOfRead,
    grant_view_of,
    loaded_account,
    new_account,
)
from app.service.limits import Limits
from app.service.results import Answer, BalanceView, GrantView, LiveGrantView
from app.storage.base import (
    MAX_EVENT_IDS_PER_READ,
    Change,
    Entry,
    EventRecord,
    GrantEntry,
    IdempotencyRecord,
    LoadedAccount,
    VoidEntry,
    read_entries_after_sequence,
)
from app.storage.postgres import AccountState as RowState
from app.storage.postgres import CommitOutcomeUnknown, PgTransaction, PostgresStore

# Failures of the database rather than of the request: it went away, is starting up or
# shutting down, has no connection slot left, left the connection unusable (asyncpg's
# InternalClientError), or aborted the transaction (deadlock, serialization). Answered with
# 503 (retry): the store raises these only when nothing was committed; a COMMIT that may
# have taken effect is a CommitOutcomeUnknown instead.
_DATABASE_DOWN = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.TransactionRollbackError,
)
# A request the rules refused: the tracker raised before changing anything, so the cache is
# still what the database holds.
_REFUSALS = (
    LedgerError,
    AccountLimit,
    AccountNotFound,
    BatchReplayTooLarge,
    IdempotencyKeyReused,
    QuotaExceeded,
)
READY_TIMEOUT_S: Final = 2.0
_T = TypeVar("_T")


@contextlib.contextmanager
def _service_errors() -> Iterator[None]:
    """Database failures as the service errors the API answers: 503 outcome unknown when a
    COMMIT may have taken effect, 503 unavailable when nothing was committed."""
    try:
        yield
    except CommitOutcomeUnknown as exc:
        raise OutcomeUnknown("the database connection was lost during COMMIT") from exc
    except _DATABASE_DOWN as exc:
        raise ServiceUnavailable(f"database unavailable: {exc}") from exc


def _view_of(
    state: RowState, watermark: int, timestamp: int, totals: tuple[int, int]
) -> BalanceView:
    """A total read of a row: at or after its clock a projection, before it an as-of read."""
    read = AsOfRead(state.account_id, timestamp, None, watermark)
    return journal.as_of_view(read, *totals)


def _totals(state: RowState) -> tuple[int, int]:
    return state.available, state.debt


@dataclass(slots=True)
class _Slot:
    """This process's cache slot for an account: its lock and its cached state."""

    state: AccountState
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # units of work holding or awaiting the lock


class PostgresPort:
    """``LedgerPort`` over PostgreSQL."""

    def __init__(self, store: PostgresStore, limits: Limits) -> None:
        self._pg = store
        self._limits = limits
        self._slots: dict[str, _Slot] = {}
        self._versions: dict[str, int] = {}  # account -> row version its cached tracker has
        # Live grants of each cached tracker as last released, and their sum: the cache is
        # bounded by Limits.max_live_grants, least recently used accounts evicted first.
        self._cached_live: dict[str, int] = {}
        self._cached_live_total = 0
        self._tenants = Tenants()

    # -- lifecycle and health ------------------------------------------------------------

    async def start(self) -> None:
        await self._pg.open()

    async def close(self) -> None:
        await self._pg.close()

    async def ready(self) -> bool:
        try:
            await asyncio.wait_for(self._pg.ping(), READY_TIMEOUT_S)
        except (TimeoutError, *_DATABASE_DOWN):
            return False
        return True

    @property
    def failure(self) -> str | None:
        return None  # the database decides; a failed request leaves the process usable

    async def check_storage(self) -> None:
        return None

    async def schema_version(self) -> int | None:
        return (await self._pg.migration_status()).current

    async def prune_idempotency(self, min_created_at_s: float) -> int:
        keys = await self._pg.prune_idempotency(min_created_at_s)
        return keys + await self._pg.prune_event_ids(min_created_at_s)

    async def outstanding_debt(self) -> int:
        """From the database (every process's accounts), within the readiness timeout."""
        return await asyncio.wait_for(self._pg.total_debt(), READY_TIMEOUT_S)

    def replay_timeline(self, account_id: str) -> AccountTimeline | None:
        """This process's cached tracker of the account, as last released (another process
        may have written since: an estimate)."""
        slot = self._slots.get(account_id)
        return None if slot is None else slot.state.timeline

    def configure_tenants(
        self, quotas: Mapping[str, Quota], prefix_of_key: Mapping[str, str]
    ) -> None:
        """Only the account quota is enforced here, counted in the database when an account
        is created (see README, Quotas): live grants and keys are the database's."""
        self._tenants.configure(quotas, prefix_of_key, lambda _prefix: Usage())

    @property
    def cached_live_grants(self) -> int:
        """Live grants in this process's cache of trackers (bounded by max_live_grants)."""
        return self._cached_live_total

    # -- units of work -------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def unit_of_work(self, account_ids: Sequence[str]) -> AsyncIterator[_PgUnitOfWork]:
        assert list(account_ids) == sorted(set(account_ids)), "sorted, distinct: no deadlock"
        slots = {account_id: self._slot(account_id) for account_id in account_ids}
        locked: list[_Slot] = []
        try:
            for account_id in account_ids:  # one transaction per account at a time here
                await slots[account_id].lock.acquire()
                locked.append(slots[account_id])
            try:
                with _service_errors():
                    async with self._pg.transaction() as tx:
                        uow = _PgUnitOfWork(self, tx, slots)
                        await uow.begin(account_ids)
                        yield uow
                        await uow.finish()
                self._versions.update(uow.versions)  # committed
            except _REFUSALS:
                raise  # refused before anything changed: the cached trackers are intact
            except BaseException:
                # The cache may be ahead of the database (or, when the COMMIT's outcome is
                # unknown, may or may not be): the next unit of work reloads.
                for account_id in account_ids:
                    self._versions.pop(account_id, None)
                raise
        finally:
            for slot in locked:
                slot.lock.release()
            for account_id, slot in slots.items():
                self._release(account_id, slot)

    def _fresh(self, account_id: str) -> AccountState:
        return new_account(account_id, self._limits)

    def _slot(self, account_id: str) -> _Slot:
        slot = self._slots.get(account_id)
        if slot is None:
            slot = self._slots[account_id] = _Slot(self._fresh(account_id))
        slot.users += 1
        return slot

    def _release(self, account_id: str, slot: _Slot) -> None:
        slot.users -= 1
        if slot.users > 0:
            return
        if account_id not in self._versions:
            # Nothing cached worth keeping (unknown or failed): bound memory by dropping it.
            del self._slots[account_id]
            self._cached_live_total -= self._cached_live.pop(account_id, 0)
            return
        live = slot.state.tracker.live_grant_count
        self._cached_live_total += live - self._cached_live.get(account_id, 0)
        self._cached_live[account_id] = live
        # Most recently used last: dicts keep insertion order, so the oldest come first.
        del self._slots[account_id]
        self._slots[account_id] = slot
        if self._cached_live_total > self._limits.max_live_grants:
            self._evict_cached()

    def _evict_cached(self) -> None:
        """Drop the least recently used idle trackers until the cache holds at most
        ``max_live_grants`` live grants: a process's memory stays bounded however many
        accounts it serves. An evicted account is reloaded from the database when used."""
        for account_id in [a for a, slot in self._slots.items() if slot.users == 0]:
            if self._cached_live_total <= self._limits.max_live_grants:
                break
            del self._slots[account_id]
            self._versions.pop(account_id, None)
            self._cached_live_total -= self._cached_live.pop(account_id, 0)

    async def _sync(self, tx: PgTransaction, rows: Mapping[str, RowState]) -> None:
        """Make the cached trackers of the locked ``rows`` current: reload those whose row
        version differs from the cached one (another process wrote, or nothing cached)."""
        stale = [a for a, row in rows.items() if self._versions.get(a) != row.version]
        if not stale:
            return
        live = await tx.load_live_grants(stale)
        for account_id in stale:
            row = rows[account_id]
            loaded = LoadedAccount(
                TrackerState(
                    row.clock, row.debt, row.next_grant_id, tuple(live[account_id]), row.debts
                ),
                row.next_sequence,
                row.watermark,
                row.lateness_window,
                row.folded_since_checkpoint,
            )
            if row.watermark < row.clock:  # provisional writes: what replaying them needs
                event_time = await tx.read_event_time(row)
                loaded.checkpoint = event_time.checkpoint
                loaded.writes_since_checkpoint = event_time.writes_since_checkpoint
                loaded.provisional_entries = event_time.provisional_entries
                # Replaying them (up to 10,000, 0.1-0.2 s) makes new objects from what was
                # read and touches nothing shared: in a worker thread, so that the event
                # loop serves other requests meanwhile (the two share the GIL in 5 ms turns)
                # instead of waiting for all of it. This write waits, holding its locks.
                state = await asyncio.to_thread(loaded_account, account_id, loaded, self._limits)
            else:
                state = loaded_account(account_id, loaded, self._limits)
            assert state.tracker.available == row.available, "state row and live grants disagree"
            self._slots[account_id].state = state
            self._versions[account_id] = row.version

    # -- reads: one committed snapshot each, no lock -----------------------------------------

    async def balance(
        self, account_id: str, timestamp: int | None, resource: str | None = None
    ) -> BalanceView:
        if resource is not None:
            # A class's figures need its live grants and debt: from one snapshot of them.
            row, tracker = await self._snapshot(account_id)
            watermark = self._watermark(row)
            view = journal.read_balance(account_id, tracker, watermark, timestamp, resource)
            if isinstance(view, AsOfRead):
                # The history and the watermark from one snapshot (a late write may commit
                # after the one above): the figures, watermark and ``final`` of one moment.
                state, checkpoint, writes = await self._read(
                    self._pg.read_replay_of_account(
                        account_id, view.timestamp, MAX_REPLAYED_WRITES + 1
                    )
                )
                if state is None:
                    raise AccountNotFound(account_id)
                return replayed(replace(view, watermark=self._watermark(state)), checkpoint, writes)
            return view
        if timestamp is None:
            state = await self._read(self._pg.read_account(account_id))
            if state is None:
                raise AccountNotFound(account_id)
            return _view_of(state, self._watermark(state), state.clock, _totals(state))
        found = await self._read(self._pg.read_balance_at(account_id, timestamp))
        if found is None:
            raise AccountNotFound(account_id)
        return _view_of(found[0], self._watermark(found[0]), timestamp, found[1])

    async def live_grants(
        self, account_id: str, resource: str | None = None
    ) -> tuple[BalanceView, list[LiveGrantView]]:
        state, tracker = await self._snapshot(account_id)
        view = journal.view(account_id, tracker, self._watermark(state), resource)
        return view, journal.live_grant_views(tracker, resource)

    async def _snapshot(self, account_id: str) -> tuple[RowState, GPUCreditTracker]:
        """The account's tracker as one committed snapshot has it (not the cache: reads take
        no lock). 404 for an unknown account."""
        state, live = await self._read(self._pg.read_live_grants(account_id))
        if state is None:
            raise AccountNotFound(account_id)
        return state, GPUCreditTracker.from_state(
            TrackerState(state.clock, state.debt, state.next_grant_id, tuple(live), state.debts),
            max_live_grants=max(len(live), self._limits.max_live_grants_per_account),
        )

    async def grant_view(self, account_id: str, grant_id: int) -> GrantView:
        # The entry and what is left of the grant from one snapshot: a late write restates
        # both (the entry's settled debt and what it kept) in one commit.
        found = await self._read(self._pg.read_grant_now(account_id, grant_id))
        if found is None:
            raise AccountNotFound(account_id)
        return grant_view_of(account_id, grant_id, *found)

    async def grant_entries(
        self, account_id: str, grant_ids: Sequence[int]
    ) -> dict[int, GrantEntry]:
        return await self._read(self._pg.read_grant_entries(account_id, grant_ids))

    async def entries(
        self, account_id: str, after_sequence: int, limit: int
    ) -> tuple[list[Entry], int]:
        state = await self._read(self._pg.read_account(account_id))
        if state is None:
            raise AccountNotFound(account_id)
        found = await self._read(
            read_entries_after_sequence(self._pg, account_id, after_sequence, limit)
        )
        if found is None:
            if after_sequence < state.next_sequence:
                raise CursorGone(account_id, after_sequence)
            found = []  # past the end
        # The watermark read first: entries before it were final then, so they are now.
        return found, self._watermark(state)

    async def latest_entries(self, account_id: str, limit: int) -> tuple[list[Entry], int]:
        state = await self._read(self._pg.read_account(account_id))
        if state is None:
            raise AccountNotFound(account_id)
        found = await self._read(self._pg.read_latest_entries(account_id, limit))
        # The watermark read first, as for a page: entries before it were final then.
        return found, self._watermark(state)

    async def accounts(self, prefix: str, after: str, limit: int) -> list[BalanceView]:
        """One committed snapshot of the account rows (placeholders of accounts being
        created are not committed, so not listed), each at its clock from the row alone."""
        states = await self._read(self._pg.read_account_states(prefix, after, limit))
        return [
            _view_of(state, self._watermark(state), state.clock, _totals(state)) for state in states
        ]

    def _watermark(self, state: RowState) -> int:
        """The row's watermark under the window in force now (see ``watermark_in_force``)."""
        return journal.watermark_in_force(
            state.watermark, state.clock, state.lateness_window, self._limits.lateness_window
        )

    async def _read(self, pending: Awaitable[_T]) -> _T:
        """Await a read; a database that is down is a 503, not a 500."""
        with _service_errors():
            return await pending


class _PgUnitOfWork:
    """``UnitOfWork`` in one PostgreSQL transaction: the accounts' rows are locked."""

    def __init__(self, port: PostgresPort, tx: PgTransaction, slots: dict[str, _Slot]) -> None:
        self._port = port
        self._tx = tx
        self._slots = slots
        self._rows: dict[str, RowState] = {}
        # Rows inserted for accounts this unit may create, locked so that no other process
        # can create them meanwhile; those no committed change writes are removed again.
        self._placeholders: dict[str, RowState] = {}
        self._created: dict[str, None] = {}  # in creation order; a set that keeps it
        self._account_budget = 0  # accounts the service may still create
        self._tenant_room: dict[str, int] = {}  # tenant prefix -> accounts it may create
        self._settled = False
        self.versions: dict[str, int] = {}  # the rows' versions once committed

    async def begin(self, account_ids: Sequence[str]) -> None:
        tx = self._tx
        # One pass in sorted order, existing and new accounts alike: no deadlock.
        self._rows, self._placeholders = await tx.lock_or_create_accounts(account_ids)
        if self._placeholders:
            # account_count() locks the count row: creation is serialised, so both budgets
            # are exact.
            self._account_budget = self._port._limits.max_accounts - await tx.account_count()
            for account_id in self._placeholders:
                for tenant in self._port._tenants.of_account(account_id):
                    if tenant.prefix not in self._tenant_room:
                        ours = sum(1 for a in self._placeholders if a.startswith(tenant.prefix))
                        held = await tx.count_accounts(tenant.prefix) - ours
                        self._tenant_room[tenant.prefix] = tenant.quota.max_accounts - held
        await self._port._sync(tx, self._rows)

    async def finish(self) -> None:
        if not self._settled and self._placeholders:
            await self._tx.settle_accounts(0, list(self._placeholders))

    async def stored_answer(self, scope: str, idempotency: Idempotency) -> Answer | None:
        record = await self._tx.lock_key(scope, idempotency.key)
        if record is None:
            return None
        if record.fingerprint != idempotency.fingerprint:
            raise IdempotencyKeyReused(idempotency.key)
        assert record.body is not None, "records read from PostgreSQL carry their body"
        return Answer(record.status_code, record.body)

    def make_room_for_key(self, scope: str) -> None:
        return None  # keys live in the database here, not in process memory

    async def event_records(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], EventRecord]:
        # The accounts' rows are locked by this transaction: no other one adds their ids
        # meanwhile, so what is read here stays true until commit.
        found: dict[tuple[str, str], EventRecord] = {}
        for start in range(0, len(keys), MAX_EVENT_IDS_PER_READ):
            found.update(
                await self._tx.read_event_ids(keys[start : start + MAX_EVENT_IDS_PER_READ])
            )
        return found

    def take_event_room(self, account_id: str) -> None:
        return None  # event ids live in the database here, as keys do

    def give_back_event_room(self, account_id: str) -> None:
        return None

    def account(self, account_id: str) -> AccountState | None:
        return self._slots[account_id].state if account_id in self._rows else None

    def create(self, account_id: str) -> AccountState:
        assert account_id in self._placeholders
        if len(self._created) >= self._account_budget:
            raise AccountLimit(self._port._limits.max_accounts)
        tenants = self._port._tenants.of_account(account_id)
        for tenant in tenants:
            if self._tenant_room[tenant.prefix] < 1:
                raise QuotaExceeded(tenant.prefix, "accounts", tenant.quota.max_accounts)
        for tenant in tenants:
            self._tenant_room[tenant.prefix] -= 1
        self._created[account_id] = None
        state = self._slots[account_id].state = self._port._fresh(account_id)
        return state

    def forget_new(self, account_id: str) -> None:
        assert not self._slots[account_id].state.exists, "only an account nothing was recorded on"
        del self._created[account_id]
        for tenant in self._port._tenants.of_account(account_id):
            self._tenant_room[tenant.prefix] += 1

    # Live grants are the database's here; the process's cache is bounded instead.
    def live_room(self, account_id: str) -> int | None:
        return None

    def live_quota_error(self, account_id: str) -> QuotaExceeded:
        raise AssertionError("no live room is given, so none can run out")

    def count_live(self, account_id: str, delta: int) -> None:
        return None

    async def history(self, read: AsOfRead) -> BalanceView:
        # On the transaction's own connection, never a second one from the pool (see
        # PgTransaction.read_replay).
        return await as_of(self._tx, read)

    async def grant_record(
        self, account_id: str, grant_id: int
    ) -> tuple[GrantEntry | None, VoidEntry | None]:
        return await self._tx.read_grant_record(account_id, grant_id)

    async def commit(self, changes: Sequence[Change], key: IdempotencyRecord | None) -> None:
        assert not self._settled, "one commit per unit of work"
        tx = self._tx
        if changes:
            if key is not None:
                changes[-1].idempotency = key
            rows = {**self._rows, **self._placeholders}
            touched = {c.account.account_id for c in changes}
            self.versions = await tx.write(
                changes,
                {a: self._slots[a].state.tracker.available for a in touched},
                {a: rows[a].version for a in touched},
            )
        used = [a for a in self._created if self._slots[a].state.exists]
        await tx.settle_accounts(len(used), [a for a in self._placeholders if a not in used])
        self._settled = True
