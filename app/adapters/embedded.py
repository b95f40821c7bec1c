"""The embedded adapter (memory and SQLite): every account's tracker lives in this process.

Why it is shaped this way:

- Computing on an in-memory tracker is O(log n) and needs no database round trip. Storage
  is a write-ahead journal of ``Change`` rows plus state rows (``app.storage``), so a restart
  loads state without replaying history.
- Per account, an ``asyncio.Lock`` serialises the compute-and-submit step, so changes reach
  the journal in the order the tracker applied them.
- The locks are released before the commit is awaited, so concurrent requests on one
  account share a group commit instead of paying one fsync each. Nothing is acknowledged
  before it is durable: a unit of work is left only once its own change and the earlier
  changes of its accounts are durable, and a read waits for the newest change of its
  account, so no answer ever shows state that a crash could lose.
- If the journal fails to commit, memory has run ahead of disk and cannot be trusted: the
  adapter reports ``failure`` (503 everywhere) until the process restarts and reloads.
- Bounds on what the process holds (accounts, live grants, Idempotency-Keys, globally and
  per tenant: ``app.quotas``) are counted here, where it is held.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Final

from app.domain.timeline import AccountTimeline
from app.quotas import Quota, Tenant, Tenants, Usage
from app.service import journal
from app.service.errors import (
    AccountLimit,
    AccountNotFound,
    CursorGone,
    IdempotencyKeyReused,
    IdempotencyKeysFull,
    QuotaExceeded,
    ServiceUnavailable,
)
from app.service.history import as_of
from app.service.idempotency import BATCH_SCOPE, Idempotency, api_key_of_scope
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
    Change,
    EmbeddedJournal,
    Entry,
    EventRecord,
    GrantEntry,
    IdempotencyRecord,
    StorageError,
    VoidEntry,
    read_entries_after_sequence,
)
from app.storage.by_age import FORGET_SLICE, ByAge

# About ten full commit groups (app.storage.sqlite.MAX_CHANGES_PER_COMMIT): far more than a
# healthy disk ever has queued, small enough that a stalled one cannot take the memory.
MAX_QUEUED_CHANGES: Final = 200_000


@dataclass(slots=True)
class _Slot:
    """An account's place in the registry: its state, its lock, and who is using it."""

    state: AccountState
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0  # units of work holding or awaiting the lock
    counted: bool = False  # counted against the account bounds (a created account)
    # The newest change submitted for the account: readers await it, so they never answer
    # with state that is not yet durable.
    durable: asyncio.Future[None] | None = None
    # The account's debt as its newest change submitted (or its load) left it: each change
    # adds the difference to the port's total.
    debt: int = 0


@dataclass(slots=True)
class _PendingKey:
    record: IdempotencyRecord
    durable: asyncio.Future[None]


@dataclass(slots=True)
class _PendingEvent:
    record: EventRecord
    durable: asyncio.Future[None]


def _key_of_key(p: _PendingKey) -> tuple[str, str]:
    return (p.record.scope, p.record.key)


def _key_of_event(p: _PendingEvent) -> tuple[str, str]:
    return (p.record.account_id, p.record.event_id)


class EmbeddedPort:
    """``LedgerPort`` over an ``EmbeddedJournal`` (memory or SQLite)."""

    def __init__(
        self, store: EmbeddedJournal, limits: Limits, wall_clock_s: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._limits = limits
        self._wall_clock_s = wall_clock_s
        self._slots: dict[str, _Slot] = {}
        self._accounts = 0  # slots counted against Limits.max_accounts
        self._keys: ByAge[tuple[str, str], _PendingKey] = ByAge(_key_of_key)
        # Keys a unit of work has looked up and found free, until it ends (with the key's
        # record submitted, or without it): another request with the same key waits for
        # that, then looks again. A batch's key is scoped to the API key, not to its
        # accounts, so two batches with one key over different accounts do not share a lock.
        self._claims: dict[tuple[str, str], asyncio.Future[None]] = {}
        # Usage-stream ids by (account, event id): counted with the keys against the bounds
        # on Idempotency-Keys, as is the room units of work have taken for new ones.
        self._events: ByAge[tuple[str, str], _PendingEvent] = ByAge(_key_of_event)
        self._event_room_taken = 0
        self._failure: str | None = None
        self._tenants = Tenants()
        self._live_grants = 0  # over every account held (Limits.max_live_grants)
        # Debt outstanding over every account: kept up to date by each change submitted (the
        # difference it made to its account's debt, see ``_Slot.debt``), read by metrics.
        self._debt = 0

    # -- lifecycle and health ------------------------------------------------------------

    async def start(self) -> None:
        loaded = await self._store.open(self._wall_clock_s() - self._limits.idempotency_ttl_s)
        for account_id, account in loaded.accounts.items():
            state = loaded_account(account_id, account, self._limits)
            self._slots[account_id] = _Slot(state, counted=True, debt=state.tracker.debt)
            self._accounts += 1
            self._live_grants += state.tracker.live_grant_count
            self._debt += state.tracker.debt
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        # Oldest first: the sweeps forget from the front (app.storage.by_age).
        for record in sorted(loaded.idempotency, key=lambda r: r.created_at_s):
            self._keys.put(_PendingKey(record, done))
        for event in sorted(loaded.event_ids, key=lambda e: e.created_at_s):
            self._events.put(_PendingEvent(event, done))

    async def close(self) -> None:
        await self._store.close()

    async def ready(self) -> bool:
        return self._failure is None

    @property
    def failure(self) -> str | None:
        return self._failure

    async def check_storage(self) -> None:
        if self._failure is not None:
            return
        problem = await self._store.check()
        if problem is not None and self._failure is None:
            self._failure = f"storage failed, restart required: {problem}"

    async def schema_version(self) -> int | None:
        status = await self._store.migration_status()
        return status.current if status.known else None  # memory has no schema

    async def outstanding_debt(self) -> int:
        return self._debt

    async def prune_idempotency(self, min_created_at_s: float) -> int:
        forgotten = 0
        while True:  # a slice at a time, requests served between (see app.storage.by_age)
            count, more = self._forget_expired(min_created_at_s)
            forgotten += count
            if not more:
                break
            await asyncio.sleep(0)
        await self._store.prune_idempotency(min_created_at_s)
        await self._store.prune_event_ids(min_created_at_s)
        return forgotten

    def _forget_expired(self, min_created_at_s: float) -> tuple[int, bool]:
        """Forget the oldest keys and ids made before ``min_created_at_s``, at most
        FORGET_SLICE of each (an id once durable: a retry may still be waiting for it). How
        many went, and whether a slice was full (more may be left)."""
        keys = self._keys.pop_oldest(
            lambda p: p.record.created_at_s < min_created_at_s, FORGET_SLICE
        )
        for scope, _ in keys:
            Tenants.add(self._scope_tenants(scope), "idempotency keys", -1)
        events = self._events.pop_oldest(
            lambda p: p.record.created_at_s < min_created_at_s and p.durable.done(),
            FORGET_SLICE,
        )
        for account_id, _ in events:
            Tenants.add(self._tenants.of_account(account_id), "idempotency keys", -1)
        return len(keys) + len(events), FORGET_SLICE in (len(keys), len(events))

    def replay_timeline(self, account_id: str) -> AccountTimeline | None:
        slot = self._slots.get(account_id)
        return None if slot is None else slot.state.timeline

    def configure_tenants(
        self, quotas: Mapping[str, Quota], prefix_of_key: Mapping[str, str]
    ) -> None:
        """A new prefix is counted once from what is held (O(accounts + keys))."""

        def usage_of(prefix: str) -> Usage:
            usage = Usage()
            for account_id, slot in self._slots.items():
                if slot.counted and account_id.startswith(prefix):
                    usage.accounts += 1
                    usage.live_grants += slot.state.tracker.live_grant_count
            for scope, _ in self._keys:
                owner = api_key_of_scope(scope)
                # A batch's key counts against the tenants of the key that sent it (see
                # Tenants.of_api_key), any other against its account's.
                if owner is not None:
                    owner_prefix = self._tenants.prefix_of_api_key(owner)
                    if owner_prefix is not None and owner_prefix.startswith(prefix):
                        usage.idempotency_keys += 1
                elif scope.startswith(prefix):
                    usage.idempotency_keys += 1
            for account_id, _ in self._events:
                if account_id.startswith(prefix):
                    usage.idempotency_keys += 1
            return usage

        self._tenants.configure(quotas, prefix_of_key, usage_of)

    # -- units of work -------------------------------------------------------------------

    def unit_of_work(self, account_ids: Sequence[str]) -> _EmbeddedUnitOfWork:
        assert list(account_ids) == sorted(set(account_ids)), "sorted, distinct: no deadlock"
        return _EmbeddedUnitOfWork(self, {a: self._slot(a) for a in account_ids})

    def _slot(self, account_id: str) -> _Slot:
        """The account's slot, made (empty, uncounted) if it has none: every request on a
        new account then shares one lock."""
        slot = self._slots.get(account_id)
        if slot is None:
            slot = self._slots[account_id] = _Slot(new_account(account_id, self._limits))
        slot.users += 1
        return slot

    def _release(self, account_id: str, slot: _Slot) -> None:
        slot.users -= 1
        if slot.users == 0 and not slot.state.exists:
            # Made for requests that failed or only read: nobody is waiting on it.
            del self._slots[account_id]
            self._uncount_new_account(account_id, slot)

    def _uncount_new_account(self, account_id: str, slot: _Slot) -> None:
        assert not slot.state.exists, "only an account nothing was recorded on"
        if slot.counted:
            slot.counted = False
            self._accounts -= 1
            Tenants.add(self._tenants.of_account(account_id), "accounts", -1)

    def _count_new_account(self, account_id: str, slot: _Slot) -> None:
        if slot.counted:
            return
        if self._accounts >= self._limits.max_accounts:
            raise AccountLimit(self._limits.max_accounts)
        tenants = self._tenants.of_account(account_id)
        tight = Tenants.tightest(tenants, "accounts")
        if tight is not None and tight.room("accounts") < 1:
            raise QuotaExceeded(tight.prefix, "accounts", tight.quota.max_accounts)
        slot.counted = True
        self._accounts += 1
        Tenants.add(tenants, "accounts", 1)

    # -- Idempotency-Keys ------------------------------------------------------------------

    async def _stored_answer(self, scope: str, idempotency: Idempotency) -> Answer | None:
        k = (scope, idempotency.key)
        pending = self._keys.get(k)
        if pending is None:
            return None
        if pending.record.fingerprint != idempotency.fingerprint:
            raise IdempotencyKeyReused(idempotency.key)
        await self._await_durable(pending.durable)
        record = pending.record
        body = record.body
        if body is None:
            body = await self._store.read_idempotency_body(record.scope, record.key)
        if body is None:
            # Expired and deleted from the file while memory still holds it: memory forgets
            # oldest first up to the first key not expired, the file every expired row, so
            # after a wall clock stepped back a key dated before an older one can be here
            # until that one expires (or the sweep deleted it during the read). Forgotten
            # now, as the sweep would: the request runs as new, as for any expired key.
            cutoff_s = self._wall_clock_s() - self._limits.idempotency_ttl_s
            if record.created_at_s < cutoff_s and self._keys.discard(k, pending):
                Tenants.add(self._scope_tenants(scope), "idempotency keys", -1)
                return None
            raise ServiceUnavailable("the idempotency record expired meanwhile; retry")
        return Answer(record.status_code, body)

    def _make_room_for_key(self, scope: str) -> None:
        self._make_room_for_id(self._scope_tenants(scope))

    def _ids_held(self) -> int:
        """Idempotency-Keys and usage-stream ids held, and room taken for new ids."""
        return len(self._keys) + len(self._events) + self._event_room_taken

    def _make_room_for_id(self, tenants: tuple[Tenant, ...]) -> None:
        """Refuse a new Idempotency-Key or event id past the bounds on keys."""
        tight = Tenants.tightest(tenants, "idempotency keys")
        if self._ids_held() < self._limits.max_idempotency_keys and (
            tight is None or tight.room("idempotency keys") >= 1
        ):
            return
        # At a bound: drop the keys and ids past their retention first (the hourly sweep
        # may not have run yet), a slice at most per request. Every time: the oldest come
        # first (app.storage.by_age), so finding none expired is a look at the oldest, and
        # a key that expired a moment ago is given up at once (found by an adversarial
        # test: a look at most once a second refused it for up to a second).
        self._forget_expired(self._wall_clock_s() - self._limits.idempotency_ttl_s)
        if self._ids_held() >= self._limits.max_idempotency_keys:
            raise IdempotencyKeysFull(self._limits.max_idempotency_keys)
        if tight is not None and tight.room("idempotency keys") < 1:
            raise QuotaExceeded(tight.prefix, "idempotency keys", tight.quota.max_idempotency_keys)

    # -- usage-stream event ids ------------------------------------------------------------

    def _take_event_room(self, account_id: str) -> None:
        tenants = self._tenants.of_account(account_id)
        self._make_room_for_id(tenants)
        self._event_room_taken += 1
        Tenants.add(tenants, "idempotency keys", 1)

    def _give_back_event_room(self, account_id: str, count: int) -> None:
        self._event_room_taken -= count
        assert self._event_room_taken >= 0
        Tenants.add(self._tenants.of_account(account_id), "idempotency keys", -count)

    def _event_room_used(self) -> None:
        """Room taken for an id is now the id itself, held in ``_events`` (and still counted
        for its tenants until it is forgotten): no longer room taken beside it."""
        self._event_room_taken -= 1
        assert self._event_room_taken >= 0

    async def _event_records(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], EventRecord]:
        found: dict[tuple[str, str], EventRecord] = {}
        waits: dict[int, asyncio.Future[None]] = {}
        for k in keys:
            pending = self._events.get(k)
            if pending is not None:
                found[k] = pending.record
                if not pending.durable.done():
                    waits[id(pending.durable)] = pending.durable  # one per commit group
        for fut in waits.values():
            await self._await_durable(fut)
        return found

    def _remember_key(self, record: IdempotencyRecord, fut: asyncio.Future[None]) -> None:
        """From now on a retry with this key waits for ``fut`` and replays the answer."""
        self._keys.put(_PendingKey(record, fut))
        Tenants.add(self._scope_tenants(record.scope), "idempotency keys", 1)
        if self._store.persists_idempotency_bodies:
            # Once durable, the body is on disk: hold only what matching a retry needs.
            def forget_body(done: asyncio.Future[None]) -> None:
                if not done.cancelled() and done.exception() is None:
                    record.body = None

            fut.add_done_callback(forget_body)

    def _scope_tenants(self, scope: str) -> tuple[Tenant, ...]:
        owner = api_key_of_scope(scope)
        if owner is not None:
            return self._tenants.of_api_key(owner)
        return () if scope == BATCH_SCOPE else self._tenants.of_account(scope)

    # -- live grants across accounts -------------------------------------------------------

    def _live_room(self, account_id: str) -> int:
        room = self._limits.max_live_grants - self._live_grants
        for tenant in self._tenants.of_account(account_id):
            room = min(room, tenant.room("live grants"))
        return room

    def _live_quota_error(self, account_id: str) -> QuotaExceeded:
        tight = Tenants.tightest(self._tenants.of_account(account_id), "live grants")
        service_room = self._limits.max_live_grants - self._live_grants
        if tight is None or service_room <= tight.room("live grants"):
            return QuotaExceeded(None, "live grants", self._limits.max_live_grants)
        return QuotaExceeded(tight.prefix, "live grants", tight.quota.max_live_grants)

    def _count_live(self, account_id: str, delta: int) -> None:
        self._live_grants += delta
        assert self._live_grants >= 0
        Tenants.add(self._tenants.of_account(account_id), "live grants", delta)

    # -- commits ---------------------------------------------------------------------------

    def _submit(
        self, slots: Mapping[str, _Slot], changes: Sequence[Change], key: IdempotencyRecord | None
    ) -> asyncio.Future[None]:
        if key is not None:
            changes[-1].idempotency = key
        fut = self._store.submit(changes)
        debt = self._debt
        for change in changes:
            row = change.account
            slot = slots[row.account_id]
            slot.durable = fut
            debt += row.debt - slot.debt
            slot.debt = row.debt
            event = change.event
            if event is not None:
                # Counted already (the room its unit of work took): now held until pruned.
                self._events.put(_PendingEvent(event, fut))
        self._debt = debt
        if key is not None:
            self._remember_key(key, fut)
        return fut

    async def _await_durable(self, fut: asyncio.Future[None] | None) -> None:
        if fut is None:
            return
        try:
            if fut.done():
                fut.result()  # already durable (or failed): no need to wait or shield
            else:
                # shield: a client that disconnects must not cancel a commit others wait on.
                await asyncio.shield(fut)
        except StorageError as exc:
            self._failure = f"storage failed, restart required: {exc}"
            raise ServiceUnavailable(self._failure) from exc

    # -- reads -----------------------------------------------------------------------------

    async def balance(
        self, account_id: str, timestamp: int | None, resource: str | None = None
    ) -> BalanceView:
        slot = self._existing(account_id)
        async with slot.lock:
            timeline = slot.state.timeline
            view = journal.read_balance(
                account_id, timeline.current, timeline.watermark, timestamp, resource
            )
            if isinstance(view, AsOfRead) and view.timestamp >= timeline.watermark:
                # From the watermark on, the state at T can still change: the timeline holds
                # it, so the figures are of the same moment as the watermark and ``final``
                # (a history read after the lock could see a late write that committed
                # meanwhile, with the watermark from before the write that let it in).
                view = journal.as_of_view(view, *timeline.balance_at(view.timestamp, resource))
            fut = slot.durable
        await self._await_durable(fut)
        if isinstance(view, AsOfRead):
            # Before the watermark the state at T is final: what is durable, read without
            # the lock, is the same in every later moment.
            return await as_of(self._store, view)
        return view

    async def live_grants(
        self, account_id: str, resource: str | None = None
    ) -> tuple[BalanceView, list[LiveGrantView]]:
        slot = self._existing(account_id)
        async with slot.lock:
            tracker = slot.state.tracker
            view = journal.view(account_id, tracker, slot.state.timeline.watermark, resource)
            grants = journal.live_grant_views(tracker, resource)
            fut = slot.durable
        await self._await_durable(fut)
        return view, grants

    async def grant_view(self, account_id: str, grant_id: int) -> GrantView:
        slot = self._existing(account_id)
        # The entry (restated by a late write before the grant: its settled debt, what it
        # kept) and what is left of the grant, of one moment: both under the lock, once the
        # account's changes so far are durable, so no write of the account lands in between.
        async with slot.lock:
            await self._await_durable(slot.durable)
            live = slot.state.tracker.live_grant(grant_id)
            remaining = 0 if live is None else live.remaining
            entry = await self._store.read_grant_entry(account_id, grant_id)
        return grant_view_of(account_id, grant_id, entry, remaining)

    async def grant_entries(
        self, account_id: str, grant_ids: Sequence[int]
    ) -> dict[int, GrantEntry]:
        # Read for the grants' labels (name, metadata), which never change once written (a
        # late write restates a grant entry's settled debt and what it kept, never its
        # label); and the grants asked about were listed after their entries were durable.
        return await self._store.read_grant_entries(account_id, grant_ids)

    async def entries(
        self, account_id: str, after_sequence: int, limit: int
    ) -> tuple[list[Entry], int]:
        slot = self._existing(account_id)
        async with slot.lock:
            fut = slot.durable
            watermark = slot.state.timeline.watermark
            next_sequence = slot.state.timeline.next_sequence
        await self._await_durable(fut)
        found = await read_entries_after_sequence(self._store, account_id, after_sequence, limit)
        if found is None:
            if after_sequence < next_sequence:
                raise CursorGone(account_id, after_sequence)
            found = []  # past the end
        return found, watermark

    async def latest_entries(self, account_id: str, limit: int) -> tuple[list[Entry], int]:
        slot = self._existing(account_id)
        async with slot.lock:
            fut = slot.durable
            watermark = slot.state.timeline.watermark
        await self._await_durable(fut)
        return await self._store.read_latest_entries(account_id, limit), watermark

    async def accounts(self, prefix: str, after: str, limit: int) -> list[BalanceView]:
        """Which accounts exist, and their order, come from the store: it holds exactly the
        accounts whose first write is committed, sorted (the registry is a dict, and also
        holds accounts that requests in flight may yet fail to create). A write is
        acknowledged only once committed, so an acknowledged account is always listed. The
        figures come from the trackers, which every existing account has here, as a balance
        read takes them; like one, the page waits until what it shows is durable. No lock is
        taken: a tracker changes only between awaits, together with its submission."""
        rows = await self._store.read_accounts(prefix, after, limit)
        views: list[BalanceView] = []
        waits: dict[int, asyncio.Future[None]] = {}
        for row in rows:
            slot = self._slots.get(row.account_id)
            assert slot is not None, "an account, once committed, stays registered"
            assert slot.state.exists
            timeline = slot.state.timeline
            views.append(journal.view(row.account_id, timeline.current, timeline.watermark))
            if slot.durable is not None:
                waits[id(slot.durable)] = slot.durable  # one per commit group
        for fut in waits.values():
            await self._await_durable(fut)
        return views

    def _existing(self, account_id: str) -> _Slot:
        """The account for a read: reads never create one, so an unknown account is 404."""
        slot = self._slots.get(account_id)
        if slot is None or not slot.state.exists:
            raise AccountNotFound(account_id)
        return slot


class _EmbeddedUnitOfWork:
    """``UnitOfWork`` over the registry: the accounts are locked while it is in use."""

    # A class, not an asynccontextmanager generator: this is every write's path, and the
    # generator's machinery cost about a tenth of a memory-backed request's time.

    def __init__(self, port: EmbeddedPort, slots: dict[str, _Slot]) -> None:
        # The slots are made (and counted as used) here; __aexit__ gives them back.
        self._port = port
        self._slots = slots
        self._locked: list[_Slot] = []
        self._waits: list[asyncio.Future[None]] = []
        self._event_room: dict[str, int] = {}  # room taken for new event ids, by account
        self._claimed: tuple[str, str] | None = None  # the Idempotency-Key it claimed
        self.committed: asyncio.Future[None] | None = None

    async def __aenter__(self) -> _EmbeddedUnitOfWork:
        try:
            for slot in self._slots.values():
                await slot.lock.acquire()
                self._locked.append(slot)
            store = self._port._store
            if store.queued_changes >= MAX_QUEUED_CHANGES:
                # Bound the journal's queue (and the memory ahead of disk): refuse before
                # anything is applied, so the refusal changes nothing.
                raise ServiceUnavailable(
                    f"{store.queued_changes} changes are waiting for the disk; retry shortly"
                )
        except BaseException:
            self._give_back()
            raise
        # Earlier changes of these accounts: nothing this unit answers may be read back
        # before they are durable.
        # Each distinct commit once: a batch's accounts mostly share the last one, and every
        # wait on one still pending costs a shield and a callback (1,000 for a 1,000-account
        # batch).
        earlier = {id(s.durable): s.durable for s in self._slots.values() if s.durable is not None}
        self._waits = list(earlier.values())
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._give_back()
        if exc is not None:
            return
        for earlier in self._waits:
            await self._port._await_durable(earlier)
        await self._port._await_durable(self.committed)

    def _give_back(self) -> None:
        if self._claimed is not None:
            # After commit() submitted the key's record (if it did): a waiter finds it.
            self._port._claims.pop(self._claimed).set_result(None)
            self._claimed = None
        for account_id, count in self._event_room.items():
            if count:
                self._port._give_back_event_room(account_id, count)
        self._event_room = {}
        for slot in self._locked:
            slot.lock.release()
        self._locked = []
        for account_id, slot in self._slots.items():
            self._port._release(account_id, slot)

    async def stored_answer(self, scope: str, idempotency: Idempotency) -> Answer | None:
        """The key's stored answer; None once this unit of work holds the key's claim (no
        other request with the key runs until this one has ended)."""
        k = (scope, idempotency.key)
        while True:
            answer = await self._port._stored_answer(scope, idempotency)
            if answer is not None:
                return answer
            claim = self._port._claims.get(k)
            if claim is None:
                break
            await asyncio.shield(claim)  # another request with this key is in flight
        assert self._claimed is None, "one key per unit of work"
        self._port._claims[k] = asyncio.get_running_loop().create_future()
        self._claimed = k
        return None

    def make_room_for_key(self, scope: str) -> None:
        self._port._make_room_for_key(scope)

    async def event_records(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], EventRecord]:
        return await self._port._event_records(keys)

    def take_event_room(self, account_id: str) -> None:
        self._port._take_event_room(account_id)
        self._event_room[account_id] = self._event_room.get(account_id, 0) + 1

    def give_back_event_room(self, account_id: str) -> None:
        assert self._event_room.get(account_id, 0) >= 1, "room was taken"
        self._event_room[account_id] -= 1
        self._port._give_back_event_room(account_id, 1)

    def account(self, account_id: str) -> AccountState | None:
        state = self._slots[account_id].state
        return state if state.exists else None

    def create(self, account_id: str) -> AccountState:
        slot = self._slots[account_id]
        assert not slot.state.exists
        self._port._count_new_account(account_id, slot)
        return slot.state

    def forget_new(self, account_id: str) -> None:
        self._port._uncount_new_account(account_id, self._slots[account_id])

    def live_room(self, account_id: str) -> int | None:
        return self._port._live_room(account_id)

    def live_quota_error(self, account_id: str) -> QuotaExceeded:
        return self._port._live_quota_error(account_id)

    def count_live(self, account_id: str, delta: int) -> None:
        self._port._count_live(account_id, delta)

    async def history(self, read: AsOfRead) -> BalanceView:
        # Entries submitted but not yet on disk are not in the store's answer: wait for them.
        await self._port._await_durable(self._slots[read.account_id].durable)
        return await as_of(self._port._store, read)

    async def grant_record(
        self, account_id: str, grant_id: int
    ) -> tuple[GrantEntry | None, VoidEntry | None]:
        await self._port._await_durable(self._slots[account_id].durable)
        store = self._port._store
        grant = await store.read_grant_entry(account_id, grant_id)
        assert grant is None or isinstance(grant, GrantEntry)
        return grant, await store.read_void_entry(account_id, grant_id)

    async def commit(self, changes: Sequence[Change], key: IdempotencyRecord | None) -> None:
        assert self.committed is None, "one commit per unit of work"
        for change in changes:
            if change.event is not None:
                account_id = change.account.account_id
                assert self._event_room.get(account_id, 0) >= 1, "event ids take room first"
                self._event_room[account_id] -= 1  # used: held by the port from now on
                self._port._event_room_used()
        if changes:
            self.committed = self._port._submit(self._slots, changes, key)
