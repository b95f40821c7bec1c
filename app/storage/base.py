"""The storage interface: what the ledger service asks of a backend, and nothing more.

The service keeps every account's tracker in memory and computes there; a backend only has to
(1) hand back the state of every account at startup, (2) make a batch of changes durable,
atomically and in order, before the service acknowledges them, and (3) serve the ledger
history, which is too large to keep in memory.

A ``Change`` is everything one operation did to one account: the account's new row, the
batches it added, updated or removed, the ledger entries it appended and, when the request
carried one, its idempotency record. ``submit`` queues changes synchronously (so the order
in which the service submits is the order on disk) and returns a future that completes once they are
durable. Changes submitted together are committed together, all or none; a durable backend
also groups the changes of concurrent requests into one transaction (group commit).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

# Records here and in app.service are plain (not frozen) slotted dataclasses: they are made
# several times per operation on the hot path, and a frozen dataclass's __init__ costs about
# twice as much. Nothing mutates them after construction.
from typing import Any, Protocol

from app.domain import Batch, TrackerState

JsonObject = dict[str, Any]


@dataclass(slots=True)
class Entry:
    """One ledger entry: a grant, a consumption or an expiration, with the totals after it."""

    seq: int  # 1-based position in the account's ledger
    kind: str  # "grant" | "consumption" | "expiration"
    timestamp: int
    available: int
    debt: int
    details: JsonObject  # kind-specific members, JSON-serialisable


@dataclass(slots=True)
class IdempotencyRecord:
    account_id: str
    key: str
    fingerprint: str  # hash of the operation and its body: a retry must match it
    status_code: int
    # The exact response body, replayed byte for byte; None once it is durable in a backend
    # that keeps it (the ledger then reads it back on a replay instead of holding it).
    body: bytes | None
    created_at_s: float  # wall clock, seconds since the epoch: drives retention only


@dataclass(slots=True)
class AccountRow:
    account_id: str
    clock: int
    debt: int
    next_grant_seq: int
    next_entry_seq: int


@dataclass(slots=True)
class Change:
    account: AccountRow
    upserted_batches: list[Batch] = field(default_factory=list)
    removed_grant_seqs: list[int] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    idempotency: IdempotencyRecord | None = None


@dataclass(slots=True)
class LoadedAccount:
    tracker_state: TrackerState
    next_entry_seq: int


@dataclass(slots=True)
class LoadedState:
    accounts: dict[str, LoadedAccount] = field(default_factory=dict)
    idempotency: list[IdempotencyRecord] = field(default_factory=list)


class StorageError(RuntimeError):
    """The backend could not make a change durable. The service stops accepting writes."""


class Store(Protocol):
    """A storage backend. Every method is called from the event loop."""

    name: str

    async def open(self, idempotency_min_created_at_s: float) -> LoadedState:
        """Open the backend and return every account's state and the idempotency records
        created at or after ``idempotency_min_created_at_s`` (older ones may be dropped)."""
        ...

    # True when committed idempotency bodies can be read back with read_idempotency_body,
    # so the ledger need not keep them in memory.
    persists_idempotency_bodies: bool

    async def read_idempotency_body(self, scope: str, key: str) -> bytes | None:
        """The stored response body of a committed idempotency record, if any."""
        ...

    def submit(self, changes: Sequence[Change]) -> asyncio.Future[None]:
        """Queue ``changes``; the future completes when they are durable, in order, all or
        none, or fails with StorageError. Must be called from the event loop thread."""
        ...

    async def read_entries(self, account_id: str, after_seq: int, limit: int) -> list[Entry]:
        """Up to ``limit`` committed entries of the account with seq > ``after_seq``."""
        ...

    async def read_grant_entry(self, account_id: str, grant_seq: int) -> Entry | None:
        """The committed grant entry of ``grant_seq``, if any."""
        ...

    async def read_totals_at(self, account_id: str, timestamp: int) -> tuple[int, int]:
        """(available, debt) after the account's last committed entry with a timestamp at
        or before ``timestamp``; (0, 0) when there is none. Entries are in non-decreasing
        timestamp order (an expiration is stamped with its expiry, which lies after the
        clock it was live at), so this is a search, not a scan."""
        ...

    async def prune_idempotency(self, min_created_at_s: float) -> int:
        """Drop idempotency records created before ``min_created_at_s``; return how many."""
        ...

    async def check(self) -> str | None:
        """None while the backend can keep its promises; otherwise why not, and from then on
        every submit fails (a durable backend whose files are no longer the ones at their
        paths must not acknowledge anything). Cheap: the service calls it about once a
        second."""
        ...

    async def close(self) -> None: ...
