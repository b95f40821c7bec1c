"""The port the service is written against: how it holds accounts while it changes them,
and how it reads them. Two adapters implement it (``app.adapters``): the embedded one
(memory or SQLite: trackers in process memory, asyncio locks, a group-commit journal) and
the PostgreSQL one (row locks, a version-checked cache of trackers, one transaction).

A ``UnitOfWork`` is one request's hold on its accounts (cosmicpython's pattern): entered
with the accounts locked and current, left with its changes committed all or none. Every
rule of the ledger is applied by the service between the two, the same way for both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from app.domain.timeline import AccountTimeline
from app.quotas import Quota
from app.service.errors import QuotaExceeded
from app.service.idempotency import Idempotency
from app.service.journal import AccountState, AsOfRead
from app.service.results import Answer, BalanceView, GrantView, LiveGrantView
from app.storage.base import (
    Change,
    Entry,
    EventRecord,
    GrantEntry,
    IdempotencyRecord,
    VoidEntry,
)


class UnitOfWork(Protocol):
    async def stored_answer(self, scope: str, idempotency: Idempotency) -> Answer | None:
        """The answer stored with this key in ``scope`` by an earlier request (waiting until
        that request is durable), or None the first time. ``IdempotencyKeyReused`` if the
        earlier request asked something else."""
        ...

    def make_room_for_key(self, scope: str) -> None:
        """Refuse (``IdempotencyKeysFull``, ``QuotaExceeded``) a new key the bounds on keys
        held would not allow."""
        ...

    async def event_records(
        self, keys: Sequence[tuple[str, str]]
    ) -> Mapping[tuple[str, str], EventRecord]:
        """The records of the usage-stream ids among these (account, event id) pairs of the
        held accounts that earlier requests applied (waiting until they are durable)."""
        ...

    def take_event_room(self, account_id: str) -> None:
        """Room for one more event id on the account, or ``IdempotencyKeysFull`` /
        ``QuotaExceeded`` (event ids count as Idempotency-Keys). Room taken and not used by
        a committed change's ``event`` is given back when the unit of work ends."""
        ...

    def give_back_event_room(self, account_id: str) -> None:
        """Room taken with ``take_event_room`` for a line that was refused: free at once."""
        ...

    def account(self, account_id: str) -> AccountState | None:
        """An existing account among the locked ones, current; None if it has no writes."""
        ...

    def create(self, account_id: str) -> AccountState:
        """A new, empty account among the locked ones (``AccountLimit``, ``QuotaExceeded``
        past a bound). It is forgotten again unless a committed change writes it."""
        ...

    def forget_new(self, account_id: str) -> None:
        """Forget at once an account ``create`` made that nothing was recorded on (its write
        was refused), giving its place in the account bounds back for the rest of the unit
        of work; ``create`` may make it again."""
        ...

    def live_room(self, account_id: str) -> int | None:
        """How many more live grants the bounds across accounts allow this account now
        (None: no such bound here)."""
        ...

    def live_quota_error(self, account_id: str) -> QuotaExceeded:
        """The error naming the bound a grant without ``live_room`` met."""
        ...

    def count_live(self, account_id: str, delta: int) -> None:
        """The account now holds ``delta`` more live grants (negative: fewer)."""
        ...

    async def history(self, read: AsOfRead) -> BalanceView:
        """The committed state of a held account at a time before its clock (an as-of read,
        see ``app.service.history``)."""
        ...

    async def grant_record(
        self, account_id: str, grant_id: int
    ) -> tuple[GrantEntry | None, VoidEntry | None]:
        """The committed grant entry of one of the held accounts' grants, and the entry that
        voided it; None for what does not exist."""
        ...

    async def commit(self, changes: Sequence[Change], key: IdempotencyRecord | None) -> None:
        """Make ``changes`` (in order) and ``key`` durable together, all or none. The
        adapter may finish waiting for durability after the locks are released (group
        commit), but before the unit of work is left."""
        ...


class LedgerPort(Protocol):
    """Everything the service needs from an adapter."""

    def unit_of_work(self, account_ids: Sequence[str]) -> AbstractAsyncContextManager[UnitOfWork]:
        """Hold ``account_ids`` (sorted, distinct) for one request."""
        ...

    # -- lifecycle and health ------------------------------------------------------------

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def ready(self) -> bool:
        """Can the service serve right now?"""
        ...

    @property
    def failure(self) -> str | None:
        """Why the service stopped serving for good (a restart is needed), or None."""
        ...

    async def check_storage(self) -> None:
        """Ask storage whether it can still make changes durable (see ``failure``)."""
        ...

    async def schema_version(self) -> int | None:
        """The schema version the storage is at (None: a backend without a schema)."""
        ...

    async def prune_idempotency(self, min_created_at_s: float) -> int:
        """Forget Idempotency-Keys and usage-stream event ids created before
        ``min_created_at_s``; how many."""
        ...

    async def outstanding_debt(self) -> int:
        """The debt outstanding over every account (what metrics show)."""
        ...

    def configure_tenants(
        self, quotas: Mapping[str, Quota], prefix_of_key: Mapping[str, str]
    ) -> None:
        """The tenants in force (see ``app.quotas``)."""
        ...

    def replay_timeline(self, account_id: str) -> AccountTimeline | None:
        """The account's timeline as this process holds it now, read without its lock, for
        a cost estimate only (``AccountTimeline.replay_cost``): None when it holds none."""
        ...

    # -- reads: safe, they change nothing ---------------------------------------------------

    async def balance(
        self, account_id: str, timestamp: int | None, resource: str | None = None
    ) -> BalanceView: ...

    async def live_grants(
        self, account_id: str, resource: str | None = None
    ) -> tuple[BalanceView, list[LiveGrantView]]: ...

    async def grant_view(self, account_id: str, grant_id: int) -> GrantView: ...

    async def entries(
        self, account_id: str, after_sequence: int, limit: int
    ) -> tuple[list[Entry], int]:
        """A page of the ledger in effective order, and the account's watermark (entries
        before it are final)."""
        ...

    async def latest_entries(self, account_id: str, limit: int) -> tuple[list[Entry], int]:
        """The last ``limit`` entries of the ledger in effective order, and the account's
        watermark."""
        ...

    async def grant_entries(
        self, account_id: str, grant_ids: Sequence[int]
    ) -> Mapping[int, GrantEntry]:
        """The committed grant entries of these grants (at most ``MAX_GRANT_IDS_PER_READ``)."""
        ...

    async def accounts(self, prefix: str, after: str, limit: int) -> list[BalanceView]:
        """Up to ``limit`` existing accounts whose id starts with ``prefix`` and is greater
        than ``after`` ("": from the first), in byte order of the id, each at its clock (what
        ``balance`` answers without a time). An account exists once a write that made it is
        durable: a failed request's account is never listed, an acknowledged one always is.
        Bounded work: no account outside the page is read, and no history."""
        ...
