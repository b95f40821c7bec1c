"""The ledger service on a shared database (PostgreSQL): same API, same answers, same ledger
history and idempotency as ``Ledger``, for several processes and hosts at once.

``Ledger`` (embedded backends) trusts process memory and writes behind it. Here the database
decides: every operation runs in a transaction that locks the rows of its accounts, so each
account sees one operation at a time in real-time order, whichever process serves it
(linearizable per account), while different accounts never wait for each other. Trackers are
cached per process and tagged with the row version; a write that finds another version
reloads the account's batches first. The rules themselves (``_apply_grant`` and friends) are
``Ledger``'s, unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Final, TypeVar

import asyncpg

from app.domain import GPUCreditTracker, LedgerError, TrackerState
from app.ledger import (
    _R,
    MAX_BATCH_OPERATIONS,
    AccountLimit,
    AccountNotFound,
    BalanceView,
    BatchOutcome,
    ConsumptionReceipt,
    GrantReceipt,
    GrantView,
    Idempotency,
    IdempotencyKeyReused,
    Ledger,
    Limits,
    LiveGrant,
    Operation,
    OutcomeUnknown,
    QuotaExceeded,
    Replay,
    ServiceError,
    ServiceUnavailable,
    _Account,
    grant_view_of,
)
from app.quotas import Quota, Tenant, Usage
from app.storage.base import Change, Entry, IdempotencyRecord
from app.storage.postgres import (
    AccountState,
    CommitOutcomeUnknown,
    PgTransaction,
    PostgresStore,
)

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


def _replay_of(record: IdempotencyRecord) -> Replay:
    assert record.body is not None, "records read from PostgreSQL carry their body"
    return Replay(record.status_code, record.body)


def _view_of(state: AccountState) -> BalanceView:
    return BalanceView(
        state.account_id,
        state.clock,
        state.available - state.debt,
        state.available,
        state.debt,
    )


class SharedLedger(Ledger):
    def __init__(
        self,
        store: PostgresStore,
        limits: Limits | None = None,
        wall_clock_s: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(store, limits, wall_clock_s)  # type: ignore[arg-type]
        self._pg = store
        self._versions: dict[str, int] = {}  # account -> row version its cached tracker has
        # Live batches of each cached tracker as last released, and their sum: the cache is
        # bounded by Limits.max_live_grants, least recently used accounts evicted first.
        self._cached_live: dict[str, int] = {}
        self._cached_live_total = 0

    async def start(self) -> None:
        await self._pg.open()

    async def close(self) -> None:
        await self._pg.close()

    async def prune_idempotency(self) -> int:
        return await self._pg.prune_idempotency(self._wall_clock_s() - self._idempotency_ttl_s)

    # -- writes --------------------------------------------------------------------------

    async def _write(
        self,
        account_id: str,
        idempotency: Idempotency | None,
        apply: Callable[[_Account], tuple[Change, _R]],
    ) -> _R | Replay:
        account = self._local(account_id)
        account.writers += 1
        try:
            with _service_errors():
                async with account.lock:  # one transaction per account at a time here
                    try:
                        return await self._write_locked(account_id, account, idempotency, apply)
                    except (LedgerError, ServiceError):
                        raise  # refused before anything changed: the cached tracker is intact
                    except BaseException:
                        # The cache may be ahead of the database (or, when the COMMIT's
                        # outcome is unknown, may or may not be): the next write reloads.
                        self._versions.pop(account_id, None)
                        raise
        finally:
            self._release_local(account_id, account)

    async def _write_locked(
        self,
        account_id: str,
        account: _Account,
        idempotency: Idempotency | None,
        apply: Callable[[_Account], tuple[Change, _R]],
    ) -> _R | Replay:
        async with self._pg.transaction() as tx:
            states = await tx.lock_accounts([account_id])
            created = False
            if account_id not in states:
                new = await tx.create_accounts([account_id])
                if account_id in new:
                    if await tx.account_count() >= self._limits.max_accounts:
                        raise AccountLimit(self._limits.max_accounts)
                    for tenant in self._tenants.of_account(account_id):
                        # Counted with this row already inserted: more than the quota means
                        # it was full. account_count() serialises creation, so this is exact.
                        if await tx.count_accounts(tenant.prefix) > tenant.quota.max_accounts:
                            raise QuotaExceeded(
                                tenant.prefix, "accounts", tenant.quota.max_accounts
                            )
                    states, created = new, True
                else:  # created by another process meanwhile
                    states = await tx.lock_accounts([account_id])
            if idempotency is not None:
                record = await tx.lock_key(account_id, idempotency.key)
                if record is not None:
                    if record.fingerprint != idempotency.fingerprint:
                        raise IdempotencyKeyReused(idempotency.key)
                    if created:
                        await tx.settle_accounts(0, [account_id])
                    return _replay_of(record)
            await self._sync(tx, states)
            change, receipt = apply(account)
            if idempotency is not None:
                change.idempotency = self._key_record(
                    account_id, idempotency, idempotency.render(receipt)
                )
            versions = await tx.write(
                [change], {account_id: account.tracker.available}, self._row_versions(states)
            )
            if created:
                await tx.settle_accounts(1, [])
        self._versions.update(versions)  # committed
        return receipt

    async def balance(self, account_id: str, timestamp: int | None) -> BalanceView:
        """As ``Ledger.balance``: reads are safe, so this takes no lock and writes nothing;
        each answer comes from one committed snapshot."""
        if timestamp is None:
            state = await self._read(self._pg.read_account(account_id))
            if state is None:
                raise AccountNotFound(account_id)
            return _view_of(state)
        found = await self._read(self._pg.read_balance_at(account_id, timestamp))
        if found is None:
            raise AccountNotFound(account_id)
        _, (available, debt) = found
        return BalanceView(account_id, timestamp, available - debt, available, debt)

    async def batch(
        self,
        operations: Sequence[Operation],
        atomic: bool,
        idempotency: Idempotency | None,
        render: Callable[[BatchOutcome], bytes],
    ) -> BatchOutcome | Replay:
        self._check_serving()
        assert len(operations) <= MAX_BATCH_OPERATIONS
        account_ids = sorted({op.account_id for op in operations})
        locals_ = {account_id: self._local(account_id) for account_id in account_ids}
        for account in locals_.values():
            account.writers += 1
        locked: list[_Account] = []
        try:
            for account_id in account_ids:
                await locals_[account_id].lock.acquire()
                locked.append(locals_[account_id])
            with _service_errors():
                try:
                    return await self._batch_locked(
                        operations, atomic, idempotency, render, account_ids, locals_
                    )
                except BaseException:
                    for account_id in account_ids:
                        self._versions.pop(account_id, None)
                    raise
        finally:
            for account in locked:
                account.lock.release()
            for account_id, account in locals_.items():
                self._release_local(account_id, account)

    async def _batch_locked(
        self,
        operations: Sequence[Operation],
        atomic: bool,
        idempotency: Idempotency | None,
        render: Callable[[BatchOutcome], bytes],
        account_ids: list[str],
        locals_: dict[str, _Account],
    ) -> BatchOutcome | Replay:
        async with self._pg.transaction() as tx:
            if idempotency is not None:
                record = await tx.lock_key(idempotency.scope, idempotency.key)
                if record is not None:
                    if record.fingerprint != idempotency.fingerprint:
                        raise IdempotencyKeyReused(idempotency.key)
                    return _replay_of(record)
            states = await tx.lock_accounts(account_ids)
            # Rows for accounts the batch may create, locked now so no other process can
            # create them under us; the ones no operation ends up creating are removed.
            missing = [a for a in account_ids if a not in states]
            placeholders: dict[str, AccountState] = {}
            budget = 0
            tenant_room: dict[str, int] = {}  # tenant prefix -> accounts it may still create
            if missing:
                placeholders = await tx.create_accounts(missing)
                raced = [a for a in missing if a not in placeholders]
                states.update(await tx.lock_accounts(raced))
                budget = self._limits.max_accounts - await tx.account_count()
                for account_id in placeholders:
                    for tenant in self._tenants.of_account(account_id):
                        if tenant.prefix not in tenant_room:
                            ours = sum(1 for a in placeholders if a.startswith(tenant.prefix))
                            held = await tx.count_accounts(tenant.prefix) - ours
                            tenant_room[tenant.prefix] = tenant.quota.max_accounts - held
            await self._sync(tx, states)
            accounts = {a: locals_[a] for a in states}
            baselines = await self._balance_baselines(operations, accounts, tx.read_totals_at)
            created: list[str] = []

            def create(account_id: str) -> _Account:
                if len(created) >= budget:
                    raise AccountLimit(self._limits.max_accounts)
                tenants = self._tenants.of_account(account_id)
                for tenant in tenants:
                    if tenant_room[tenant.prefix] < 1:
                        raise QuotaExceeded(tenant.prefix, "accounts", tenant.quota.max_accounts)
                for tenant in tenants:
                    tenant_room[tenant.prefix] -= 1
                created.append(account_id)
                account = locals_[account_id]
                account.tracker = self._fresh_tracker()
                account.next_entry_seq = 1
                return account

            outcome, changes = self._apply_batch(operations, atomic, accounts, create, baselines)
            outcome.body = render(outcome)
            if idempotency is not None and changes:  # as Ledger.batch: only with changes
                changes[-1].idempotency = self._key_record(
                    idempotency.scope, idempotency, outcome.body
                )
            used = {a for a in created if locals_[a].next_entry_seq > 1}
            all_states = {**states, **placeholders}
            touched = {c.account.account_id for c in changes}
            versions = await tx.write(
                changes,
                {a: locals_[a].tracker.available for a in touched},
                {a: all_states[a].version for a in touched},
            )
            await tx.settle_accounts(len(used), [a for a in placeholders if a not in used])
        self._versions.update(versions)
        return outcome

    # -- reads ---------------------------------------------------------------------------

    async def live_grants(self, account_id: str) -> tuple[BalanceView, list[LiveGrant]]:
        state, batches = await self._read(self._pg.read_live_batches(account_id))
        if state is None:
            raise AccountNotFound(account_id)
        return _view_of(state), [LiveGrant(b.grant_seq, b.expiry, b.remaining) for b in batches]

    async def grant_view(self, account_id: str, grant_id: int) -> GrantView:
        _, grants = await self.live_grants(account_id)  # 404 for an unknown account
        remaining = next((g.remaining for g in grants if g.grant_id == grant_id), 0)
        entry = await self._read(self._pg.read_grant_entry(account_id, grant_id))
        return grant_view_of(account_id, grant_id, entry, remaining)

    async def entries(self, account_id: str, after_seq: int, limit: int) -> list[Entry]:
        if await self._read(self._pg.read_account(account_id)) is None:
            raise AccountNotFound(account_id)
        return await self._read(self._pg.read_entries(account_id, after_seq, limit))

    # -- internals -----------------------------------------------------------------------

    async def _read(self, pending: Awaitable[_T]) -> _T:
        """Await a read; a database that is down is a 503, not a 500."""
        self._check_serving()
        with _service_errors():
            return await pending

    async def ready(self) -> bool:
        try:
            await asyncio.wait_for(self._pg.ping(), READY_TIMEOUT_S)
        except (TimeoutError, *_DATABASE_DOWN):
            return False
        return self.healthy

    def _fresh_tracker(self) -> GPUCreditTracker:
        return GPUCreditTracker(max_live_batches=self._limits.max_live_grants_per_account)

    def _local(self, account_id: str) -> _Account:
        """This process's cache slot for the account (its lock, its cached tracker)."""
        account = self._accounts.get(account_id)
        if account is None:
            account = _Account(self._fresh_tracker(), next_entry_seq=1)
            self._accounts[account_id] = account
        return account

    def _release_local(self, account_id: str, account: _Account) -> None:
        account.writers -= 1
        if account.writers > 0:
            return
        if account_id not in self._versions:
            # Nothing cached worth keeping (unknown or failed): bound memory by dropping it.
            del self._accounts[account_id]
            self._cached_live_total -= self._cached_live.pop(account_id, 0)
            return
        live = account.tracker.live_batch_count
        self._cached_live_total += live - self._cached_live.get(account_id, 0)
        self._cached_live[account_id] = live
        # Most recently used last: dicts keep insertion order, so the oldest come first.
        del self._accounts[account_id]
        self._accounts[account_id] = account
        if self._cached_live_total > self._limits.max_live_grants:
            self._evict_cached()

    @property
    def cached_live_grants(self) -> int:
        """Live batches in this process's cache of trackers (bounded by max_live_grants)."""
        return self._cached_live_total

    def _evict_cached(self) -> None:
        """Drop the least recently used idle trackers until the cache holds at most
        ``max_live_grants`` live batches: a process's memory stays bounded however many
        accounts it serves. An evicted account is reloaded from the database when used."""
        for account_id in [a for a, acc in self._accounts.items() if acc.writers == 0]:
            if self._cached_live_total <= self._limits.max_live_grants:
                break
            del self._accounts[account_id]
            self._versions.pop(account_id, None)
            self._cached_live_total -= self._cached_live.pop(account_id, 0)

    # Live grants and their quotas live in the database here; the cache is bounded instead.
    def _live_room(self, tenants: tuple[Tenant, ...]) -> int | None:
        return None

    def _count_live(self, tenants: tuple[Tenant, ...], delta: int) -> None:
        return None

    def configure_tenants(
        self, quotas: Mapping[str, Quota], prefix_of_key: Mapping[str, str]
    ) -> None:
        """Only the account quota is enforced here, counted in the database when an account
        is created (see README, Quotas)."""
        self._tenants.configure(quotas, prefix_of_key, lambda _prefix: Usage())

    async def _sync(self, tx: PgTransaction, states: dict[str, AccountState]) -> None:
        """Make the cached trackers of the locked ``states`` current: reload those whose row
        version differs from the cached one (another process wrote, or nothing cached)."""
        stale = [a for a, s in states.items() if self._versions.get(a) != s.version]
        if not stale:
            return
        batches = await tx.load_batches(stale)
        for account_id in stale:
            s = states[account_id]
            account = self._local(account_id)
            account.tracker = GPUCreditTracker.from_state(
                TrackerState(s.clock, s.debt, s.next_grant_seq, tuple(batches[account_id])),
                max_live_batches=self._limits.max_live_grants_per_account,
            )
            assert account.tracker.available == s.available, "state row and batches disagree"
            account.next_entry_seq = s.next_entry_seq
            self._versions[account_id] = s.version

    @staticmethod
    def _row_versions(states: dict[str, AccountState]) -> dict[str, int]:
        return {a: s.version for a, s in states.items()}


__all__ = ["ConsumptionReceipt", "GrantReceipt", "SharedLedger"]
