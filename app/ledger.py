"""The ledger service: the in-process registry of per-account trackers, their locks, and the
path from a validated request to a durable, acknowledged change.

Why it is shaped this way:

- Every account's ``GPUCreditTracker`` lives in memory; computing there is O(log n) and needs
  no database round trip. The storage backend is a write-ahead journal of ``Change`` rows plus
  state rows, so a restart loads state without replaying history.
- Per account, an ``asyncio.Lock`` serialises the compute-and-submit step, so the order in
  which changes reach the backend is the order in which the tracker applied them, and the
  per-account timestamp order is enforced by the tracker itself.
- The lock is released before the commit is awaited, so concurrent requests on one account
  share a group commit instead of paying one fsync each. Nothing is acknowledged before it is
  durable: a writer awaits its own change, and a reader awaits the newest change submitted for
  the account before it answers, so no response ever shows state that a crash could lose.
- If the backend fails to commit, memory has run ahead of disk and cannot be trusted: the
  ledger stops serving (503) until the process restarts and reloads what is on disk. The same
  holds when the backend reports (``check_storage``, about once a second) that it can no
  longer make anything durable, e.g. its database file was deleted or replaced. Reads stop
  too: the service then looks unhealthy as a whole rather than half-serving.
"""

from __future__ import annotations

import asyncio
import bisect
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from app.domain import (
    Batch,
    ConsumeResult,
    Expiration,
    GPUCreditTracker,
    LedgerError,
    NoLiveRoom,
)
from app.quotas import Quota, Resource, Tenant, Tenants, Usage
from app.storage.base import (
    AccountRow,
    Change,
    Entry,
    IdempotencyRecord,
    JsonObject,
    StorageError,
    Store,
)


class ServiceError(Exception):
    """Base of the errors the service raises (the domain raises ``LedgerError``)."""


class AccountNotFound(ServiceError):
    def __init__(self, account_id: str) -> None:
        super().__init__(f"account {account_id!r} has no grants or consumptions yet")
        self.account_id = account_id


class GrantNotFound(ServiceError):
    def __init__(self, account_id: str, grant_id: int) -> None:
        super().__init__(f"account {account_id!r} has no grant {grant_id}")


class IdempotencyKeyReused(ServiceError):
    def __init__(self, key: str) -> None:
        super().__init__(
            f"Idempotency-Key {key!r} was already used on this account with a different "
            "operation or body"
        )


class AccountLimit(ServiceError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the ledger already holds {limit} accounts, the most it may hold "
            "(GPU_CREDITS_MAX_ACCOUNTS)"
        )


class IdempotencyKeysFull(ServiceError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            f"{limit} Idempotency-Keys are held within the retention period, the most the "
            "service keeps (GPU_CREDITS_MAX_IDEMPOTENCY_KEYS); retry later or without a key"
        )


class QuotaExceeded(ServiceError):
    """A tenant's quota (``tenant`` is its account-id prefix), or with ``tenant`` None the
    service's own bound on live grants, would be passed."""

    def __init__(self, tenant: str | None, quota: Resource, limit: int) -> None:
        if tenant is None:
            message = (
                f"the service already holds {limit} {quota}, the most it may hold "
                "(GPU_CREDITS_MAX_LIVE_GRANTS); consume or let some expire first"
            )
        else:
            message = (
                f"the accounts starting with {tenant!r} already hold {limit} {quota}, their quota"
            )
        super().__init__(message)
        self.tenant = tenant
        self.quota = quota
        self.limit = limit


class ServiceUnavailable(ServiceError):
    """The service cannot serve the request now; retry later. The shared ledger raises it
    only when nothing was committed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)


class OutcomeUnknown(ServiceError):
    """The database connection was lost while the change was being committed: it may or may
    not have been applied. Not a ``ServiceUnavailable``, which on the shared ledger means
    nothing was committed: a client retrying this one without its Idempotency-Key could apply
    the change twice."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"the outcome of this request is unknown ({reason}): it may or may not have been "
            "applied. Retry with the same Idempotency-Key to get its answer; without a key, "
            "read the ledger before retrying"
        )


@dataclass(slots=True)
class Allocation:
    grant_id: int
    expiry: int
    amount: int


@dataclass(slots=True)
class GrantReceipt:
    account_id: str
    grant_id: int
    sequence: int
    timestamp: int
    amount: int
    expiry: int
    balance: int
    available: int
    debt: int
    settled_debt: int
    retained: int


@dataclass(slots=True)
class ConsumptionReceipt:
    account_id: str
    sequence: int
    timestamp: int
    amount: int
    balance: int
    available: int
    debt: int
    consumed: int
    debt_added: int
    allocation: list[Allocation]


@dataclass(slots=True)
class BalanceView:
    account_id: str
    timestamp: int
    balance: int
    available: int
    debt: int


@dataclass(slots=True)
class AsOfRead:
    """A balance read at a time before the account's clock: the stored history answers."""

    account_id: str
    timestamp: int


Totals = tuple[int, int]  # (available, debt) at some time


def _as_of_in_batch(
    read: AsOfRead, entries: Sequence[Entry], baselines: dict[tuple[str, int], Totals]
) -> BalanceView:
    """An as-of read inside a batch: after the batch's last own entry at or before its time,
    or as the account stood before the batch. ``entries`` are in time order."""
    index = bisect.bisect_right(entries, read.timestamp, key=lambda e: e.timestamp)
    if index:
        available, debt = entries[index - 1].available, entries[index - 1].debt
    else:
        available, debt = baselines[(read.account_id, read.timestamp)]
    return BalanceView(read.account_id, read.timestamp, available - debt, available, debt)


@dataclass(slots=True)
class LiveGrant:
    grant_id: int
    expiry: int
    remaining: int


@dataclass(slots=True)
class GrantView:
    account_id: str
    grant_id: int
    sequence: int
    timestamp: int
    amount: int
    expiry: int
    settled_debt: int
    retained: int
    remaining: int  # 0 once consumed, expired, or swallowed by debt


MAX_BATCH_OPERATIONS = 10_000
BATCH_SCOPE = "/batch"  # idempotency scope of batches; "/" is in no account id


def batch_scope(api_key_id: str | None) -> str:
    """Batch keys are scoped to the API key that sent them (one tenant's key names say
    nothing about, and cannot block, another's)."""
    return BATCH_SCOPE if api_key_id is None else f"{BATCH_SCOPE}/{api_key_id}"


def _api_key_of_scope(scope: str) -> str | None:
    """The API key id a batch scope names; None for an account's scope or an anonymous
    batch's."""
    head = BATCH_SCOPE + "/"
    return scope[len(head) :] if scope.startswith(head) else None


@dataclass(slots=True)
class GrantOp:
    account_id: str
    amount: int
    timestamp: int
    expiry: int


@dataclass(slots=True)
class ConsumeOp:
    account_id: str
    amount: int
    timestamp: int


@dataclass(slots=True)
class BalanceOp:
    account_id: str
    timestamp: int | None


Operation = GrantOp | ConsumeOp | BalanceOp


@dataclass(slots=True)
class BatchOutcome:
    """One result per operation, in order: a receipt or view, or the error it raised. For an
    atomic batch that failed: just the error, at ``failed_index``, and nothing applied."""

    results: list[GrantReceipt | ConsumptionReceipt | BalanceView | Exception]
    failed_index: int | None
    body: bytes = b""  # the response body, as ``render`` made it


@dataclass(slots=True)
class Replay:
    """A stored response for a retried request: send it again, byte for byte."""

    status_code: int
    body: bytes


@dataclass(slots=True)
class Idempotency:
    key: str
    fingerprint: str
    status_code: int  # the status the first response is sent with
    render: Callable[[Any], bytes]  # the first response's body, from the receipt
    # Used by batches only (see batch_scope); a single operation's scope is its account id.
    scope: str = BATCH_SCOPE


_R = TypeVar("_R", GrantReceipt, ConsumptionReceipt)


def grant_view_of(account_id: str, grant_id: int, entry: Entry | None, remaining: int) -> GrantView:
    """One grant as getGrant shows it: its ledger entry plus what is left of it now."""
    if entry is None:
        raise GrantNotFound(account_id, grant_id)
    d = entry.details
    return GrantView(
        account_id=account_id,
        grant_id=grant_id,
        sequence=entry.seq,
        timestamp=entry.timestamp,
        amount=d["amount"],
        expiry=d["expiry"],
        settled_debt=d["settled_debt"],
        retained=d["retained"],
        remaining=remaining,
    )


def fingerprint(operation: str, account_id: str, body: JsonObject) -> str:
    canonical = json.dumps([operation, account_id, body], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(slots=True)
class _Account:
    tracker: GPUCreditTracker
    next_entry_seq: int
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    writers: int = 0  # requests holding or awaiting the lock to write
    # The future of the newest change submitted for this account: readers await it so they
    # never answer with state that is not yet durable.
    durable: asyncio.Future[None] | None = None


@dataclass(slots=True)
class _PendingKey:
    record: IdempotencyRecord
    durable: asyncio.Future[None]


DEFAULT_TENANT_QUOTA: Final = Quota(
    max_accounts=100_000, max_live_grants=1_000_000, max_idempotency_keys=100_000
)


@dataclass(slots=True)
class Limits:
    """Bounds on what the ledger holds in memory; each refusal is a clear problem document."""

    max_accounts: int = 1_000_000
    max_live_grants_per_account: int = 10_000
    # All accounts together: about 190 bytes each in memory (README, Quotas), so the default
    # bounds live grants at about 2 GiB however the accounts share them.
    max_live_grants: int = 10_000_000
    max_idempotency_keys: int = 1_000_000
    idempotency_ttl_s: float = 24 * 3600.0
    # What a tenant (an API key's account prefix) may hold unless its keys say otherwise.
    tenant_quota: Quota = field(default_factory=lambda: DEFAULT_TENANT_QUOTA)

    def __post_init__(self) -> None:
        assert self.max_accounts >= 1
        assert self.max_live_grants_per_account >= 1
        assert self.max_live_grants >= 1
        assert self.max_idempotency_keys >= 1
        assert self.idempotency_ttl_s > 0


class Ledger:
    def __init__(
        self,
        store: Store,
        limits: Limits | None = None,
        wall_clock_s: Callable[[], float] = time.time,
    ) -> None:
        self._store = store
        self._limits = limits = limits or Limits()
        self._idempotency_ttl_s = limits.idempotency_ttl_s
        self._wall_clock_s = wall_clock_s
        self._accounts: dict[str, _Account] = {}
        self._keys: dict[tuple[str, str], _PendingKey] = {}
        self._failure: str | None = None
        self._tenants = Tenants()
        self._live_grants = 0  # live batches over every account held (Limits.max_live_grants)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        loaded = await self._store.open(self._wall_clock_s() - self._idempotency_ttl_s)
        for account_id, account in loaded.accounts.items():
            tracker = GPUCreditTracker.from_state(
                account.tracker_state,
                max_live_batches=self._limits.max_live_grants_per_account,
            )
            self._accounts[account_id] = _Account(tracker, account.next_entry_seq)
            self._live_grants += tracker.live_batch_count
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        for record in loaded.idempotency:
            self._keys[(record.scope, record.key)] = _PendingKey(record, done)

    async def close(self) -> None:
        await self._store.close()

    async def prune_idempotency(self) -> int:
        """Forget idempotency keys older than the retention period (memory and disk)."""
        cutoff_s = self._wall_clock_s() - self._idempotency_ttl_s
        old = [k for k, p in self._keys.items() if p.record.created_at_s < cutoff_s]
        for k in old:
            self._forget_key(k)
        await self._store.prune_idempotency(cutoff_s)
        return len(old)

    def configure_tenants(
        self, quotas: Mapping[str, Quota], prefix_of_key: Mapping[str, str]
    ) -> None:
        """The tenants in force: each account-id prefix an API key is restricted to, with
        its quota, and which key belongs to which (a batch's Idempotency-Key counts against
        the tenant of the key that sent it). Called at startup and when the keys change; a
        new prefix is counted once from what the ledger holds (O(accounts + keys))."""

        def usage_of(prefix: str) -> Usage:
            usage = Usage()
            for account_id, account in self._accounts.items():
                if account_id.startswith(prefix):
                    usage.accounts += 1
                    usage.live_grants += account.tracker.live_batch_count
            for scope, _ in self._keys:
                owner = _api_key_of_scope(scope)
                if (
                    prefix_of_key.get(owner) == prefix
                    if owner is not None
                    else scope.startswith(prefix)
                ):
                    usage.idempotency_keys += 1
            return usage

        self._tenants.configure(quotas, prefix_of_key, usage_of)

    async def check_storage(self) -> None:
        """Ask the backend whether it can still make changes durable; once it cannot, stop
        serving with its reason (the backend logs it)."""
        if self._failure is not None:
            return
        problem = await self._store.check()
        if problem is not None and self._failure is None:
            self._failure = f"storage failed, restart required: {problem}"

    @property
    def healthy(self) -> bool:
        return self._failure is None

    @property
    def failure(self) -> str | None:
        """Why the service stopped serving, or None."""
        return self._failure

    async def ready(self) -> bool:
        """Can the service serve right now? (The shared ledger also asks its database.)"""
        return self.healthy

    @property
    def account_count(self) -> int:
        return len(self._accounts)

    # -- writes --------------------------------------------------------------------------

    async def grant(
        self,
        account_id: str,
        amount: int,
        timestamp: int,
        expiry: int,
        idempotency: Idempotency | None = None,
    ) -> GrantReceipt | Replay:
        def apply(account: _Account) -> tuple[Change, GrantReceipt]:
            return self._apply_grant(account_id, account, amount, timestamp, expiry)

        return await self._write(account_id, idempotency, apply)

    async def consume(
        self,
        account_id: str,
        amount: int,
        timestamp: int,
        idempotency: Idempotency | None = None,
    ) -> ConsumptionReceipt | Replay:
        def apply(account: _Account) -> tuple[Change, ConsumptionReceipt]:
            return self._apply_consume(account_id, account, amount, timestamp)

        return await self._write(account_id, idempotency, apply)

    async def _write(
        self,
        account_id: str,
        idempotency: Idempotency | None,
        apply: Callable[[_Account], tuple[Change, _R]],
    ) -> _R | Replay:
        """Apply one write under the account's lock, submit it, and wait until durable.

        A grant or consumption on an unknown account creates it; if the operation is
        rejected, the new account is dropped again, so a failed request leaves no trace.
        """
        self._check_serving()
        account = self._account_for_write(account_id)
        account.writers += 1
        try:
            async with account.lock:
                pending = self._find_replay(account_id, idempotency)
                if pending is not None:
                    fut = pending.durable
                else:
                    if idempotency is not None:
                        self._make_room_for_a_key(account_id)
                    change, receipt = apply(account)
                    if idempotency is not None:
                        change.idempotency = self._key_record(
                            account_id, idempotency, idempotency.render(receipt)
                        )
                    fut = self._store.submit([change])
                    account.durable = fut
                    self._remember_key(change.idempotency, fut)
        finally:
            self._release_writer(account_id, account)
        await self._await_durable(fut)
        if pending is not None:
            return await self._replay(pending)
        return receipt

    async def balance(self, account_id: str, timestamp: int | None) -> BalanceView:
        """The balance at ``timestamp``, changing nothing (reads are safe, SPEC section 3):
        at or after the account's clock, the projected state (credits expiring by then no
        longer count); before it, the as-of state from the stored history; None: the state
        at the clock. Unknown accounts are 404 and are not created."""
        account = self._existing(account_id)
        async with account.lock:
            view = self._read_balance(account_id, account.tracker, timestamp)
            fut = account.durable
        await self._await_durable(fut)
        if isinstance(view, AsOfRead):
            return await self._as_of(view)
        return view

    async def batch(
        self,
        operations: Sequence[Operation],
        atomic: bool,
        idempotency: Idempotency | None,
        render: Callable[[BatchOutcome], bytes],
    ) -> BatchOutcome | Replay:
        """Apply ``operations`` in order; all changes are durable in one commit.

        Not atomic: each operation succeeds or fails on its own, as it would alone. Atomic:
        on the first failure every account is put back as it was and nothing is written
        (TigerBeetle's linked events). The accounts involved are locked for the whole batch
        (in sorted order, so two batches cannot deadlock), so each account still sees one
        operation at a time. ``idempotency`` is scoped to batches, not to an account.
        """
        self._check_serving()
        assert len(operations) <= MAX_BATCH_OPERATIONS
        # Existing accounts are locked up front, in sorted order (no deadlock between two
        # batches). Accounts the batch creates are made while it runs, in operation order,
        # exactly as single requests would; nobody else can see them before it ends.
        accounts: dict[str, _Account] = {}
        for account_id in sorted({op.account_id for op in operations}):
            account = self._accounts.get(account_id)
            if account is not None:
                account.writers += 1
                accounts[account_id] = account
        locked: list[_Account] = []
        try:
            for account_id in sorted(accounts):
                await accounts[account_id].lock.acquire()
                locked.append(accounts[account_id])
            scope = idempotency.scope if idempotency is not None else BATCH_SCOPE
            pending = self._find_replay(scope, idempotency)
            if pending is not None:
                fut: asyncio.Future[None] | None = pending.durable
                waits: list[asyncio.Future[None]] = []
            else:
                if idempotency is not None:
                    self._make_room_for_a_key(scope)
                baselines = await self._balance_baselines(operations, accounts, self._history)
                outcome, changes = self._apply_batch(
                    operations, atomic, accounts, self._create_for_batch, baselines
                )
                # Reads in the batch must not answer before earlier changes of their accounts.
                waits = [a.durable for a in accounts.values() if a.durable is not None]
                outcome.body = render(outcome)
                if idempotency is not None and changes:
                    # Kept with what the batch changed. A batch that changed nothing (only
                    # reads, or every operation refused) left no trace, like a failed
                    # single request: a retry runs it again, and it stores nothing.
                    changes[-1].idempotency = self._key_record(scope, idempotency, outcome.body)
                fut = None
                if changes:
                    fut = self._store.submit(changes)
                    for change in changes:
                        accounts[change.account.account_id].durable = fut
                    self._remember_key(changes[-1].idempotency, fut)
        finally:
            for account in locked:
                account.lock.release()
            for account_id, account in accounts.items():
                self._release_writer(account_id, account)
        for earlier in waits:
            await self._await_durable(earlier)
        await self._await_durable(fut)
        if pending is not None:
            return await self._replay(pending)
        return outcome

    def _apply_batch(
        self,
        operations: Sequence[Operation],
        atomic: bool,
        accounts: dict[str, _Account],
        create: Callable[[str], _Account],
        baselines: dict[tuple[str, int], Totals],
    ) -> tuple[BatchOutcome, list[Change]]:
        """Apply in order, without awaiting anything: no other request runs meanwhile.
        ``accounts`` holds the locked existing accounts and gains those ``create`` makes for
        writes to new accounts (it raises AccountLimit when no more may be made).
        ``baselines`` answers balance reads at a time before the batch's own entries (see
        ``_balance_baselines``)."""
        saved: dict[str, tuple[GPUCreditTracker, int]] = {}
        results: list[GrantReceipt | ConsumptionReceipt | BalanceView | Exception] = []
        changes: list[Change] = []
        # Each account's entries made by this batch so far, in time order: an as-of read
        # inside the batch may fall among them.
        batch_entries: dict[str, list[Entry]] = {}
        for index, op in enumerate(operations):
            account_id = op.account_id
            try:
                account = accounts.get(account_id)
                if account is None:
                    if isinstance(op, BalanceOp):
                        raise AccountNotFound(account_id)
                    account = create(account_id)
                    accounts[account_id] = account
                if atomic and account_id not in saved:
                    saved[account_id] = (account.tracker.copy(), account.next_entry_seq)
                if isinstance(op, GrantOp):
                    change, result = self._apply_grant(
                        account_id, account, op.amount, op.timestamp, op.expiry
                    )
                    changes.append(change)
                    batch_entries.setdefault(account_id, []).extend(change.entries)
                    results.append(result)
                elif isinstance(op, ConsumeOp):
                    change, consumed = self._apply_consume(
                        account_id, account, op.amount, op.timestamp
                    )
                    changes.append(change)
                    batch_entries.setdefault(account_id, []).extend(change.entries)
                    results.append(consumed)
                else:
                    if account.next_entry_seq == 1:
                        raise AccountNotFound(account_id)
                    view = self._read_balance(account_id, account.tracker, op.timestamp)
                    if isinstance(view, AsOfRead):
                        view = _as_of_in_batch(view, batch_entries.get(account_id, ()), baselines)
                    results.append(view)
            except (LedgerError, ServiceError) as exc:
                if atomic:
                    for saved_id, (tracker, next_entry_seq) in saved.items():
                        current = accounts[saved_id].tracker
                        undone = tracker.live_batch_count - current.live_batch_count
                        self._count_live(self._tenants.of_account(saved_id), undone)
                        accounts[saved_id].tracker = tracker
                        accounts[saved_id].next_entry_seq = next_entry_seq
                    return BatchOutcome(results=[exc], failed_index=index), []
                results.append(exc)
        return BatchOutcome(results=results, failed_index=None), changes

    def _create_for_batch(self, account_id: str) -> _Account:
        account = self._account_for_write(account_id)  # may raise AccountLimit
        account.writers += 1
        return account

    # -- the operations, shared by the single endpoints and batches ----------------------

    def _apply_grant(
        self, account_id: str, account: _Account, amount: int, timestamp: int, expiry: int
    ) -> tuple[Change, GrantReceipt]:
        tracker = account.tracker
        before = (tracker.available, tracker.debt)
        tenants = self._tenants.of_account(account_id)
        live_before = tracker.live_batch_count
        try:
            result = tracker.apply_grant(amount, timestamp, expiry, self._live_room(tenants))
        except NoLiveRoom:
            raise self._live_quota_error(tenants) from None
        self._count_live(tenants, tracker.live_batch_count - live_before)
        entries = self._expiration_entries(account, result.expired, *before)
        seq = self._next_seq(account)
        details = {
            "grant_id": result.grant_seq,
            "amount": amount,
            "expiry": expiry,
            "settled_debt": result.settled_debt,
            "retained": result.retained,
        }
        entries.append(Entry(seq, "grant", timestamp, result.available, result.debt, details))
        change = self._change(account_id, account, entries)
        change.removed_grant_seqs.extend(e.grant_seq for e in result.expired)
        if result.retained:
            change.upserted_batches.append(Batch(result.grant_seq, expiry, result.retained))
        receipt = GrantReceipt(
            account_id=account_id,
            grant_id=result.grant_seq,
            sequence=seq,
            timestamp=timestamp,
            amount=amount,
            expiry=expiry,
            balance=result.available - result.debt,
            available=result.available,
            debt=result.debt,
            settled_debt=result.settled_debt,
            retained=result.retained,
        )
        return change, receipt

    def _apply_consume(
        self, account_id: str, account: _Account, amount: int, timestamp: int
    ) -> tuple[Change, ConsumptionReceipt]:
        tracker = account.tracker
        before = (tracker.available, tracker.debt)
        live_before = tracker.live_batch_count
        result = tracker.apply_consume(amount, timestamp)
        if tracker.live_batch_count != live_before:
            self._count_live(
                self._tenants.of_account(account_id), tracker.live_batch_count - live_before
            )
        entries = self._expiration_entries(account, result.expired, *before)
        seq = self._next_seq(account)
        allocation = [Allocation(d.grant_seq, d.expiry, d.amount) for d in result.draws]
        details = {
            "amount": amount,
            "consumed": result.consumed,
            "debt_added": result.debt_added,
            "allocation": [
                {"grant_id": d.grant_seq, "expiry": d.expiry, "amount": d.amount}
                for d in result.draws
            ],
        }
        entries.append(Entry(seq, "consumption", timestamp, result.available, result.debt, details))
        change = self._change(account_id, account, entries)
        change.removed_grant_seqs.extend(e.grant_seq for e in result.expired)
        self._record_draws(change, tracker, result)
        receipt = ConsumptionReceipt(
            account_id=account_id,
            sequence=seq,
            timestamp=timestamp,
            amount=amount,
            balance=result.available - result.debt,
            available=result.available,
            debt=result.debt,
            consumed=result.consumed,
            debt_added=result.debt_added,
            allocation=allocation,
        )
        return change, receipt

    @staticmethod
    def _read_balance(
        account_id: str, tracker: GPUCreditTracker, timestamp: int | None
    ) -> BalanceView | AsOfRead:
        """A balance read that changes nothing. At or after the clock it is the projection
        from the live batches; before it, an ``AsOfRead`` the stored history answers."""
        clock = tracker.clock
        if timestamp is None or timestamp == clock:
            # Batches with expiry <= clock were evicted by the write that set the clock.
            return Ledger._view(account_id, tracker)
        if timestamp < clock:
            return AsOfRead(account_id, timestamp)
        available = tracker.available_at(timestamp)
        debt = tracker.debt
        return BalanceView(account_id, timestamp, available - debt, available, debt)

    async def _history(self, account_id: str, timestamp: int) -> Totals:
        """The account's totals after its last stored entry at or before ``timestamp``."""
        account = self._accounts.get(account_id)
        if account is not None:
            await self._await_durable(account.durable)  # entries submitted but not on disk
        return await self._store.read_totals_at(account_id, timestamp)

    async def _as_of(self, read: AsOfRead) -> BalanceView:
        """Entries at or before a time the clock has passed never change (every later write
        and every expiration it records is later), so no lock is needed to read them."""
        available, debt = await self._store.read_totals_at(read.account_id, read.timestamp)
        return BalanceView(read.account_id, read.timestamp, available - debt, available, debt)

    @staticmethod
    async def _balance_baselines(
        operations: Sequence[Operation],
        accounts: dict[str, _Account],
        history: Callable[[str, int], Awaitable[Totals]],
    ) -> dict[tuple[str, int], Totals]:
        """Before a batch changes anything: each timed balance read's totals as the account
        stood before the batch (stored history before the clock, the projection after it;
        nothing for an account the batch would create). Inside the batch a read earlier than
        the batch's own entries for its account answers from here, so every I/O a batch
        needs is done before its first change and a failed read changes nothing."""
        baselines: dict[tuple[str, int], Totals] = {}
        for op in operations:
            if not isinstance(op, BalanceOp) or op.timestamp is None:
                continue
            where = (op.account_id, op.timestamp)
            if where in baselines:
                continue
            account = accounts.get(op.account_id)
            if account is None:
                baselines[where] = (0, 0)
                continue
            tracker = account.tracker
            if op.timestamp < tracker.clock:
                baselines[where] = await history(op.account_id, op.timestamp)
            else:
                baselines[where] = (tracker.available_at(op.timestamp), tracker.debt)
        return baselines

    # -- reads ---------------------------------------------------------------------------

    async def live_grants(self, account_id: str) -> tuple[BalanceView, list[LiveGrant]]:
        """Live batches at the account's latest timestamp, in the order they will be used."""
        account = self._existing(account_id)
        async with account.lock:
            view = self._view(account_id, account.tracker)
            grants = [
                LiveGrant(b.grant_seq, b.expiry, b.remaining) for b in account.tracker.batches()
            ]
            fut = account.durable
        await self._await_durable(fut)
        return view, grants

    async def grant_view(self, account_id: str, grant_id: int) -> GrantView:
        account = self._existing(account_id)
        async with account.lock:
            fut = account.durable
            remaining = 0
            for batch in account.tracker.batches():
                if batch.grant_seq == grant_id:
                    remaining = batch.remaining
        await self._await_durable(fut)
        entry = await self._store.read_grant_entry(account_id, grant_id)
        return grant_view_of(account_id, grant_id, entry, remaining)

    async def entries(self, account_id: str, after_seq: int, limit: int) -> list[Entry]:
        account = self._existing(account_id)
        async with account.lock:
            fut = account.durable
        await self._await_durable(fut)
        return await self._store.read_entries(account_id, after_seq, limit)

    # -- internals -----------------------------------------------------------------------

    def _check_serving(self) -> None:
        if self._failure is not None:
            raise ServiceUnavailable(self._failure)

    def _existing(self, account_id: str) -> _Account:
        """The account for a read: reads never create one, so an unknown account is 404."""
        self._check_serving()
        account = self._accounts.get(account_id)
        if account is None:
            raise AccountNotFound(account_id)
        return account

    @staticmethod
    def _view(account_id: str, tracker: GPUCreditTracker) -> BalanceView:
        return BalanceView(
            account_id=account_id,
            timestamp=tracker.clock,
            balance=tracker.available - tracker.debt,
            available=tracker.available,
            debt=tracker.debt,
        )

    @staticmethod
    def _next_seq(account: _Account) -> int:
        seq = account.next_entry_seq
        account.next_entry_seq = seq + 1
        return seq

    def _expiration_entries(
        self,
        account: _Account,
        expired: tuple[Expiration, ...],
        available_before: int,
        debt_before: int,
    ) -> list[Entry]:
        entries: list[Entry] = []
        available = available_before
        for e in expired:  # popped in (expiry, grant_seq) order
            available -= e.amount
            entries.append(
                Entry(
                    seq=self._next_seq(account),
                    kind="expiration",
                    timestamp=e.expiry,
                    available=available,
                    debt=debt_before,
                    details={"grant_id": e.grant_seq, "expiry": e.expiry, "amount": e.amount},
                )
            )
        return entries

    @staticmethod
    def _change(account_id: str, account: _Account, entries: list[Entry]) -> Change:
        t = account.tracker
        row = AccountRow(account_id, t.clock, t.debt, t.next_grant_seq, account.next_entry_seq)
        return Change(account=row, entries=entries)

    @staticmethod
    def _record_draws(change: Change, tracker: GPUCreditTracker, result: ConsumeResult) -> None:
        if not result.draws:
            return
        # Every batch drawn from is gone, except possibly the last one, which a partial draw
        # leaves at the top of the heap with its key unchanged.
        first = tracker.first_batch()
        for draw in result.draws:
            if first is not None and draw.grant_seq == first.grant_seq:
                change.upserted_batches.append(first)
            else:
                change.removed_grant_seqs.append(draw.grant_seq)

    def _make_room_for_a_key(self, scope: str) -> None:
        """Refuse a new Idempotency-Key in ``scope`` past the service's or its tenant's
        bound, after dropping the expired ones."""
        tenants = self._scope_tenants(scope)
        tight = Tenants.tightest(tenants, "idempotency keys")
        if len(self._keys) < self._limits.max_idempotency_keys and (
            tight is None or tight.room("idempotency keys") >= 1
        ):
            return
        cutoff_s = self._wall_clock_s() - self._idempotency_ttl_s
        for k in [k for k, p in self._keys.items() if p.record.created_at_s < cutoff_s]:
            self._forget_key(k)
        if len(self._keys) >= self._limits.max_idempotency_keys:
            raise IdempotencyKeysFull(self._limits.max_idempotency_keys)
        if tight is not None and tight.room("idempotency keys") < 1:
            raise QuotaExceeded(tight.prefix, "idempotency keys", tight.quota.max_idempotency_keys)

    def _scope_tenants(self, scope: str) -> tuple[Tenant, ...]:
        owner = _api_key_of_scope(scope)
        if owner is not None:
            return self._tenants.of_api_key(owner)
        return () if scope == BATCH_SCOPE else self._tenants.of_account(scope)

    def _forget_key(self, k: tuple[str, str]) -> None:
        del self._keys[k]
        Tenants.add(self._scope_tenants(k[0]), "idempotency keys", -1)

    def _live_room(self, tenants: tuple[Tenant, ...]) -> int | None:
        """How many more live grants the service and the account's tenants allow."""
        room = self._limits.max_live_grants - self._live_grants
        for tenant in tenants:
            room = min(room, tenant.room("live grants"))
        return room

    def _live_quota_error(self, tenants: tuple[Tenant, ...]) -> QuotaExceeded:
        tight = Tenants.tightest(tenants, "live grants")
        if tight is None or self._limits.max_live_grants - self._live_grants <= tight.room(
            "live grants"
        ):
            return QuotaExceeded(None, "live grants", self._limits.max_live_grants)
        return QuotaExceeded(tight.prefix, "live grants", tight.quota.max_live_grants)

    def _count_live(self, tenants: tuple[Tenant, ...], delta: int) -> None:
        self._live_grants += delta
        assert self._live_grants >= 0
        Tenants.add(tenants, "live grants", delta)

    def _find_replay(self, scope: str, idempotency: Idempotency | None) -> _PendingKey | None:
        """The earlier request with this key in ``scope`` (an account id, or a batch scope);
        422 if it was made with another operation or body."""
        if idempotency is None:
            return None
        pending = self._keys.get((scope, idempotency.key))
        if pending is not None and pending.record.fingerprint != idempotency.fingerprint:
            raise IdempotencyKeyReused(idempotency.key)
        return pending

    def _account_for_write(self, account_id: str) -> _Account:
        account = self._accounts.get(account_id)
        if account is None:
            if len(self._accounts) >= self._limits.max_accounts:
                raise AccountLimit(self._limits.max_accounts)
            tenants = self._tenants.of_account(account_id)
            tight = Tenants.tightest(tenants, "accounts")
            if tight is not None and tight.room("accounts") < 1:
                raise QuotaExceeded(tight.prefix, "accounts", tight.quota.max_accounts)
            account = self._new_account(account_id)
            Tenants.add(tenants, "accounts", 1)
        return account

    def _new_account(self, account_id: str) -> _Account:
        tracker = GPUCreditTracker(max_live_batches=self._limits.max_live_grants_per_account)
        account = _Account(tracker, next_entry_seq=1)
        self._accounts[account_id] = account
        return account

    def _release_writer(self, account_id: str, account: _Account) -> None:
        account.writers -= 1
        if account.next_entry_seq == 1 and account.writers == 0:
            # Created for a request that failed, and nobody else is waiting on it.
            del self._accounts[account_id]
            Tenants.add(self._tenants.of_account(account_id), "accounts", -1)

    def _key_record(self, scope: str, idempotency: Idempotency, body: bytes) -> IdempotencyRecord:
        return IdempotencyRecord(
            scope=scope,
            key=idempotency.key,
            fingerprint=idempotency.fingerprint,
            status_code=idempotency.status_code,
            body=body,
            created_at_s=self._wall_clock_s(),
        )

    def _remember_key(self, record: IdempotencyRecord | None, fut: asyncio.Future[None]) -> None:
        """From now on a retry with this key waits for ``fut`` and replays the answer."""
        if record is None:
            return
        self._keys[(record.scope, record.key)] = _PendingKey(record, fut)
        Tenants.add(self._scope_tenants(record.scope), "idempotency keys", 1)
        if self._store.persists_idempotency_bodies:
            # Once durable, the body is on disk: hold only what matching a retry needs.
            def forget_body(done: asyncio.Future[None]) -> None:
                if not done.cancelled() and done.exception() is None:
                    record.body = None

            fut.add_done_callback(forget_body)

    async def _replay(self, pending: _PendingKey) -> Replay:
        record = pending.record
        body = record.body
        if body is None:
            body = await self._store.read_idempotency_body(record.scope, record.key)
        if body is None:  # pruned from disk between the match and the read: rare, retryable
            raise ServiceUnavailable("the idempotency record expired meanwhile; retry")
        return Replay(record.status_code, body)

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
