"""The storage interface: what the ledger services ask of a backend, and nothing more.

Three backends, two ways of writing, one interface for everything else:

- ``StorageBackend``: what every backend has. Its lifecycle (``open``, ``close``, ``check``,
  ``ping``), its schema (``migrate``, ``migration_status``) and its read side (the ledger
  history, account state, idempotency records and their retention).
- ``EmbeddedJournal`` (memory, sqlite): the service keeps every account's tracker in memory
  and computes there; the backend hands back every account's state at startup and makes
  changes durable, atomically and in order, before the service acknowledges them.
  ``submit`` queues changes synchronously (so the order in which the service submits is the
  order on disk) and returns a future that completes once they are durable. Changes
  submitted together are committed together, all or none; a durable backend also groups
  the changes of concurrent requests into one transaction (group commit).
- ``TransactionalStore`` (postgres): the database is the authority and several processes
  share it. The service runs each operation in a ``transaction()`` that locks the rows of
  its accounts, reads what its cache lacks and writes the same ``Change`` records.

A ``Change`` is everything one operation did to one account: the account's new row, the
live grants it added, updated or removed, the ledger entries it appended and, when the request
carried one, its idempotency record. ``app.storage.rows`` checks changes and turns them into
rows, for every backend that has rows.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field

# Records here and in app.service are plain (not frozen) slotted dataclasses: they are made
# several times per operation on the hot path, and a frozen dataclass's __init__ costs about
# twice as much. Nothing mutates them after construction.
from typing import ClassVar, Final, Literal, Protocol, final, runtime_checkable

from app.domain import Allocation, Debt, LiveGrant, TrackerState
from app.observe import Observer

# Grant ids one read_grant_entries call takes: one SQL statement's parameters stay bounded.
MAX_GRANT_IDS_PER_READ: Final = 500
# Event ids one read_event_ids call takes (a usage stream's chunk: see app.api.events).
MAX_EVENT_IDS_PER_READ: Final = 10_000

# Ledger entries: one typed record per kind, from the service to the API (no untyped
# details cross a layer; ``app.storage.rows`` alone turns the kind-specific members into the
# ``details`` column and back). Each carries its position and the totals right after it.


@final  # rank_of and the row encoders test type() is
@dataclass(slots=True)
class GrantEntry:
    sequence: int  # 1-based position in the account's ledger
    timestamp: int
    available: int
    debt: int
    grant_id: int
    amount: int
    expiry: int
    settled_debt: int
    retained: int
    # The caller's label for the grant (SPEC section 7), as given; None when not given.
    name: str | None = None
    metadata: dict[str, str] | None = None
    resources: tuple[str, ...] | None = None  # the classes it pays for; None: unrestricted
    revision: int = 0  # +1 each time a late write restates its effect (SPEC section 6)
    kind: ClassVar[Literal["grant"]] = "grant"


@final  # rank_of and the row encoders test type() is
@dataclass(slots=True)
class ConsumptionEntry:
    sequence: int
    timestamp: int
    available: int
    debt: int
    amount: int
    consumed: int
    debt_added: int
    allocation: tuple[Allocation, ...]  # which grants gave how much, in the order drawn
    resource: str | None = None  # the class it ran on; None: no class
    revision: int = 0  # +1 each time a late write restates its effect (SPEC section 6)
    kind: ClassVar[Literal["consumption"]] = "consumption"


@final  # rank_of and the row encoders test type() is
@dataclass(slots=True)
class ExpirationEntry:
    """A grant's unused rest, recorded when a write moves the clock to its expiry."""

    sequence: int
    timestamp: int  # the grant's expiry
    available: int
    debt: int
    grant_id: int
    expiry: int
    amount: int
    resources: tuple[str, ...] | None = None  # the grant's classes
    revision: int = 0  # +1 each time a late write restates its effect (SPEC section 6)
    kind: ClassVar[Literal["expiration"]] = "expiration"


@final  # rank_of and the row encoders test type() is
@dataclass(slots=True)
class VoidEntry:
    """A grant voided (SPEC section 7): its live remainder, ``amount``, removed; what it
    already paid or settled stays. At most one per grant."""

    sequence: int
    timestamp: int
    available: int
    debt: int
    grant_id: int
    amount: int  # the live remainder removed; 0 when it was used up or expired
    revision: int = 0  # +1 each time a late write restates its effect (SPEC section 6)
    kind: ClassVar[Literal["void"]] = "void"


Entry = GrantEntry | ConsumptionEntry | ExpirationEntry | VoidEntry
WriteEntry = GrantEntry | ConsumptionEntry | VoidEntry  # the entries of accepted writes

# Effective order (SPEC section 6) is (timestamp, rank): at one timestamp the expirations
# come first (credits expiring at T cannot pay a write at T), then the writes in arrival order.
# A write's rank is its sequence (sequences are given in arrival order); an expiration's is
# RANK_OF_EXPIRATIONS plus a number that orders the expirations of one timestamp (see
# ``rank_of``), so it is negative. Ledger pages and as-of reads follow this order.
RANK_OF_EXPIRATIONS: Final = -(2**53)
Position = tuple[int, int]  # (timestamp, rank): an entry's place in effective order


def rank_of(entry: Entry) -> int:
    """The entry's rank among the entries of its timestamp (see ``RANK_OF_EXPIRATIONS``).
    Expirations of one timestamp are ordered by grant id, which is the order the ledger
    lists them in and computes their balances in."""
    if type(entry) is ExpirationEntry:  # final class: type() is isinstance, and cheaper
        return RANK_OF_EXPIRATIONS + entry.grant_id
    return entry.sequence


def position_of(entry: Entry) -> Position:
    return (entry.timestamp, rank_of(entry))


@dataclass(slots=True)
class IdempotencyRecord:
    # Whose key this is: an account id for the single endpoints, a batch scope ("/batch" or
    # "/batch/<API key id>") for batches. Keys are unique within a scope.
    scope: str
    key: str
    fingerprint: str  # hash of the operation and its body: a retry must match it
    status_code: int
    # The exact response body, replayed byte for byte; None once it is durable in a backend
    # that keeps it (the ledger then reads it back on a replay instead of holding it).
    body: bytes | None
    created_at_s: float  # wall clock, seconds since the epoch: drives retention only


@dataclass(slots=True)
class EventRecord:
    """A usage-stream line applied (``POST /v1/events``): its client id, unique per account,
    and where its effect is, so a replay of the line answers ``duplicate`` and changes
    nothing. Kept as long as Idempotency-Keys are (the same retention and sweep)."""

    account_id: str
    event_id: str
    fingerprint: str  # hash of what the line asked: the same id with another line is refused
    sequence: int  # the ledger entry the line made
    grant_id: int | None  # the grant a grant line made or a void line voided; None otherwise
    created_at_s: float  # wall clock, seconds since the epoch: drives retention only


@dataclass(slots=True)
class AccountRow:
    account_id: str
    clock: int
    debt: int
    next_grant_id: int
    next_sequence: int
    # The debt queue by class (``TrackerState.debts``): () when there is none or all of it is
    # of no class, as every account before classes existed.
    debts: tuple[Debt, ...] = ()
    # Event time (SPEC section 6). The row holds the CURRENT state (every accepted write
    # applied); the watermark says which writes are final: those at or before it are, the
    # rest (only when watermark < clock) are provisional and are replayed from the latest
    # checkpoint at or before the watermark when the account is loaded.
    watermark: int = 0
    lateness_window: int | None = None  # the account's own window; None: the service's
    # Writes made final since the latest checkpoint: a new checkpoint is due every so many.
    folded_since_checkpoint: int = 0


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """An account's final state right after the write at ``position`` (SPEC section 6: as-of
    reads and restarts replay from the nearest checkpoint, never from the beginning)."""

    position: Position
    state: TrackerState


@dataclass(slots=True)
class Change:
    account: AccountRow
    # Sequences, not lists: a change is made per operation and lives until its commit, and
    # a batch's are many (each list is one more object for the cyclic collector to scan while
    # the batches are in flight; an empty tuple is none).
    upserted_live_grants: Sequence[LiveGrant] = ()
    removed_grant_ids: Sequence[int] = ()
    # The entries it appended: sequences contiguous, ending just before next_sequence.
    entries: Sequence[Entry] = ()
    idempotency: IdempotencyRecord | None = None
    # Entries written before that a late write restated (same sequence, new effect, balance
    # after or revision; SPEC section 6), and those it undid (an expiration that no longer
    # happens), by sequence.
    restated: Sequence[Entry] = ()
    removed_sequences: Sequence[int] = ()
    checkpoint: Checkpoint | None = None
    # The usage-stream line that made this change, when one did (its id is then taken).
    event: EventRecord | None = None


@dataclass(slots=True)
class LoadedAccount:
    """An account as stored: enough to rebuild its tracker exactly."""

    tracker_state: TrackerState  # the current state (every accepted write applied)
    next_sequence: int
    watermark: int = 0
    lateness_window: int | None = None
    folded_since_checkpoint: int = 0
    # Only when watermark < clock (provisional writes exist): the latest checkpoint at or
    # before the watermark (None: the account's beginning) and every write entry after it;
    # and every entry after the final state's clock (the timestamp of the last write at or
    # before the watermark: what the provisional writes made), with its revision. All in
    # effective order.
    checkpoint: Checkpoint | None = None
    writes_since_checkpoint: tuple[WriteEntry, ...] = ()
    provisional_entries: tuple[Entry, ...] = ()


@dataclass(slots=True)
class LoadedState:
    """What ``open`` hands the service: every account and idempotency record for an
    embedded journal (the service holds them in memory); nothing for a transactional store,
    whose service reads each account under its row lock when it needs it."""

    accounts: dict[str, LoadedAccount] = field(default_factory=dict)
    idempotency: list[IdempotencyRecord] = field(default_factory=list)
    event_ids: list[EventRecord] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AccountState:
    """An account's row in a transactional store: what ``AccountRow`` holds, plus what
    several processes sharing the database need (see ``app.storage.rows``)."""

    account_id: str
    clock: int
    debt: int
    available: int  # sum of the live grants: a balance read needs no live-grant rows
    next_grant_id: int
    next_sequence: int
    version: int  # bumped by every committed write: tells caches they are stale
    debts: tuple[Debt, ...] = ()  # as ``AccountRow.debts``
    watermark: int = 0  # as ``AccountRow``
    lateness_window: int | None = None
    folded_since_checkpoint: int = 0


@dataclass(frozen=True, slots=True)
class EventTime:
    """What replaying an account's provisional writes needs (see ``LoadedAccount``): empty
    when it has none."""

    checkpoint: Checkpoint | None = None
    writes_since_checkpoint: tuple[WriteEntry, ...] = ()
    provisional_entries: tuple[Entry, ...] = ()


@dataclass(frozen=True, slots=True)
class MigrationStatus:
    """Where a database's schema stands against the migrations a release knows."""

    applied: tuple[int, ...]  # versions recorded in the database, ascending
    known: tuple[int, ...]  # versions this release can apply, ascending

    @property
    def current(self) -> int:
        """The schema version: the newest applied migration (0: an empty database)."""
        return max(self.applied, default=0)

    @property
    def pending(self) -> tuple[int, ...]:
        return tuple(v for v in self.known if v not in self.applied)

    @property
    def newer_than_known(self) -> bool:
        """Made by a newer release: this one must not use it."""
        return self.current > max(self.known, default=0)


# Account ids are 1 to 128 characters of ASCII below 0x7f (SPEC section 3), so in byte order
# the ids that start with a prefix ``p`` are exactly those in [p, p + ACCOUNT_ID_END). Every
# backend lists accounts by that range: an index range scan, never a scan of every account.
ACCOUNT_ID_END: Final = "\x7f"


class StorageError(RuntimeError):
    """The backend could not make a change durable. The service stops accepting writes."""


class SchemaTooNew(StorageError):
    """The database was migrated by a newer release than this one."""


class StorageBackend(Protocol):
    """What every backend has. Methods are called from the event loop."""

    async def open(self, idempotency_min_created_at_s: float) -> LoadedState:
        """Apply pending migrations, open the backend and return what the service must hold
        (see ``LoadedState``). Idempotency records created before
        ``idempotency_min_created_at_s`` may be dropped."""
        ...

    async def close(self) -> None: ...

    async def check(self) -> str | None:
        """None while the backend can keep its promises; otherwise why not, and from then on
        every write fails (a durable backend whose files are no longer the ones at their
        paths must not acknowledge anything). Cheap: the service calls it about once a
        second."""
        ...

    async def ping(self) -> None:
        """Raise unless the backend answers a trivial read now."""
        ...

    async def migrate(self) -> list[int]:
        """Apply the migrations the database lacks; return the versions applied. Works on a
        store that is not open (``gpu-credits migrate``)."""
        ...

    async def migration_status(self) -> MigrationStatus:
        """Where the database's schema stands, changing nothing and taking no lock. Works on a
        store that is not open, and while another process serves the database."""
        ...

    async def read_entries(
        self, account_id: str, after: Position | None, limit: int
    ) -> list[Entry]:
        """Up to ``limit`` committed entries of the account in effective order (timestamp,
        rank), after position ``after`` (None: from the first). A position stays a valid
        cursor whatever late writes insert before it or restate after it."""
        ...

    async def read_latest_entries(self, account_id: str, limit: int) -> list[Entry]:
        """The last ``limit`` committed entries of the account, in effective order (the
        newest last): the end of the ledger, read backwards along the same index as pages
        are read forwards, so the work is bounded by ``limit`` whatever the history's
        length."""
        ...

    async def read_entry_position(self, account_id: str, sequence: int) -> Position | None:
        """Where the committed entry with this sequence stands in effective order, if it
        exists (a cursor given as a sequence, as pages before late events had)."""
        ...

    async def read_writes(
        self, account_id: str, after: Position | None, until_timestamp: int, limit: int
    ) -> list[WriteEntry]:
        """Up to ``limit`` committed entries of writes (grants, consumptions, voids) after
        ``after`` (None: from the first) with timestamp <= ``until_timestamp``, in effective
        order: what a replay from a checkpoint applies."""
        ...

    async def read_checkpoint(self, account_id: str, timestamp: int) -> Checkpoint | None:
        """The account's latest checkpoint whose position is at or before ``timestamp``."""
        ...

    async def read_replay(
        self, account_id: str, timestamp: int, limit: int
    ) -> tuple[Checkpoint | None, list[WriteEntry]]:
        """From one snapshot: the latest checkpoint at or before ``timestamp`` and up to
        ``limit`` writes after it with a timestamp <= ``timestamp`` (an as-of read replays
        them; checkpoints are close enough that ``limit`` is a bound, not a cut)."""
        ...

    async def read_grant_entries(
        self, account_id: str, grant_ids: Sequence[int]
    ) -> dict[int, GrantEntry]:
        """The grant entries of these grants that exist, by grant id (at most
        ``MAX_GRANT_IDS_PER_READ`` ids: the caller splits a longer list)."""
        ...

    async def read_void_entry(self, account_id: str, grant_id: int) -> VoidEntry | None:
        """The entry that voided this grant, if it was voided."""
        ...

    async def read_grant_entry(self, account_id: str, grant_id: int) -> Entry | None:
        """The committed grant entry of ``grant_id``, if any."""
        ...

    async def read_totals_at(self, account_id: str, timestamp: int) -> tuple[int, int]:
        """(available, debt) after the account's last committed entry in effective order
        with a timestamp at or before ``timestamp``; (0, 0) when there is none: one descent
        of an index on (account, timestamp, rank), not a scan."""
        ...

    async def read_account_state(self, account_id: str) -> LoadedAccount | None:
        """The account's committed row and live grants (in grant order), from one
        snapshot; None for an account never written."""
        ...

    async def read_accounts(self, prefix: str, after: str, limit: int) -> list[AccountRow]:
        """Up to ``limit`` committed account rows whose id starts with ``prefix`` ("": every
        account) and is greater than ``after`` ("": from the first), in byte order of the
        id. Only accounts a committed write made: a failed request leaves none behind. The
        work is bounded by ``limit``, whatever the number of accounts."""
        ...

    async def read_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        """The committed idempotency record, with its body, if any."""
        ...

    async def read_idempotency_body(self, scope: str, key: str) -> bytes | None:
        """The stored response body of a committed idempotency record, if any."""
        ...

    async def prune_idempotency(self, min_created_at_s: float) -> int:
        """Drop idempotency records created before ``min_created_at_s``; return how many."""
        ...

    async def read_event_ids(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], EventRecord]:
        """The committed event records among these (account id, event id) pairs (at most
        ``MAX_EVENT_IDS_PER_READ``)."""
        ...

    async def prune_event_ids(self, min_created_at_s: float) -> int:
        """Drop event records created before ``min_created_at_s``; return how many."""
        ...


@runtime_checkable  # app.main tells the two ways of writing apart with isinstance
class EmbeddedJournal(StorageBackend, Protocol):
    """A journal behind a service that computes in process memory (memory, sqlite)."""

    # True when committed idempotency bodies can be read back with read_idempotency_body,
    # so the ledger need not keep them in memory.
    persists_idempotency_bodies: bool
    # Told of each commit (``Observer.committed``); a store without commits (memory) never
    # calls it.
    observer: Observer

    def submit(self, changes: Sequence[Change]) -> asyncio.Future[None]:
        """Queue ``changes``; the future completes when they are durable, in order, all or
        none, or fails with StorageError (and so does every later submit: memory has run
        ahead of the journal). Must be called from the event loop thread."""
        ...

    @property
    def queued_changes(self) -> int:
        """Changes submitted and not yet durable: how far the journal is behind."""
        ...


class Transaction(Protocol):
    """One transaction of a ``TransactionalStore``; every method runs inside it."""

    async def lock_or_create_accounts(
        self, account_ids: Sequence[str]
    ) -> tuple[dict[str, AccountState], dict[str, AccountState]]:
        """Lock the existing rows and insert placeholders for the missing ones, in one pass
        in sorted order (no deadlock); returns (existing rows, new placeholders).
        ``settle_accounts`` counts or removes the placeholders before commit."""
        ...

    async def account_count(self) -> int:
        """The number of accounts, locked until commit (account creation is serialised)."""
        ...

    async def count_accounts(self, prefix: str) -> int:
        """Accounts whose id starts with ``prefix``, this transaction's new rows included."""
        ...

    async def settle_accounts(self, created: int, unused: Sequence[str]) -> None:
        """Count the accounts this transaction created; delete its unused placeholders."""
        ...

    async def read_totals_at(self, account_id: str, timestamp: int) -> tuple[int, int]: ...

    async def read_grant_record(
        self, account_id: str, grant_id: int
    ) -> tuple[GrantEntry | None, VoidEntry | None]:
        """A grant's entry and the entry that voided it, each None if there is none."""
        ...

    async def load_live_grants(self, account_ids: Sequence[str]) -> dict[str, list[LiveGrant]]: ...

    async def read_event_time(self, state: AccountState) -> EventTime:
        """For an account with provisional writes (watermark < clock), what replaying them
        needs; empty otherwise."""
        ...

    async def lock_key(self, scope: str, key: str) -> IdempotencyRecord | None:
        """Serialise requests with this key, then read its record."""
        ...

    async def read_event_ids(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], EventRecord]:
        """The event records among these pairs, within the transaction (their accounts'
        rows are locked by it, so no other transaction adds one meanwhile)."""
        ...

    async def write(
        self, changes: Sequence[Change], available: dict[str, int], versions: dict[str, int]
    ) -> dict[str, int]:
        """Write ``changes`` in order; each account's row gets its newest values, its
        ``available`` credits and version + 1. Returns the new versions."""
        ...


class TransactionalStore(StorageBackend, Protocol):
    """A database several service processes share (postgres)."""

    def transaction(self) -> contextlib.AbstractAsyncContextManager[Transaction]:
        """One transaction, committed when the block ends without an exception."""
        ...

    async def read_account(self, account_id: str) -> AccountState | None: ...

    async def read_account_states(self, prefix: str, after: str, limit: int) -> list[AccountState]:
        """``read_accounts`` with what a balance at the clock needs (``available``), from
        the same rows."""
        ...

    async def read_balance_at(
        self, account_id: str, timestamp: int
    ) -> tuple[AccountState, tuple[int, int]] | None:
        """The account and its (available, debt) at ``timestamp``, changing nothing."""
        ...

    async def read_live_grants(
        self, account_id: str
    ) -> tuple[AccountState | None, list[LiveGrant]]:
        """The account and its live grants in consumption order, from one snapshot."""
        ...


class SnapshotError(Exception):
    """An offline reader cannot read the database: it does not exist, is not one, cannot be
    reached, or its schema is not the one this release reads. The message is one line."""


class SnapshotReader(Protocol):
    """A database read offline, from one snapshot (``gpu-credits check`` and ``export``): it
    takes no lock, writes nothing and applies no migration, so it can read a database a
    service is using, and everything it reads is from one moment."""

    where: str  # what it reads, fit to print (no password)

    async def read_accounts(self, prefix: str, after: str, limit: int) -> list[AccountRow]:
        """As ``StorageBackend.read_accounts``."""
        ...

    async def read_account_state(self, account_id: str) -> LoadedAccount | None:
        """As ``StorageBackend.read_account_state``."""
        ...

    async def read_entries(
        self, account_id: str, after: Position | None, limit: int
    ) -> list[Entry]:
        """As ``StorageBackend.read_entries``."""
        ...

    async def read_checkpoint(self, account_id: str, timestamp: int) -> Checkpoint | None:
        """As ``StorageBackend.read_checkpoint``."""
        ...

    async def integrity_problems(self) -> list[str]:
        """What the database itself can tell is wrong, beyond any one account: the engine's
        own consistency check, rows of accounts that have no account row, counters and
        totals kept apart from the rows they count. Empty when nothing is."""
        ...


async def read_entries_after_sequence(
    store: StorageBackend, account_id: str, after_sequence: int, limit: int
) -> list[Entry] | None:
    """A ledger page whose cursor is an entry's sequence (0: from the first): the entries
    after that entry in effective order; None when no entry has that sequence (a cursor past
    the end, or an entry a late write undid: the caller tells them apart)."""
    after: Position | None = None
    if after_sequence:
        after = await store.read_entry_position(account_id, after_sequence)
        if after is None:
            return None
    return await store.read_entries(account_id, after, limit)


def final_clock(checkpoint: Checkpoint | None, writes: Sequence[WriteEntry], watermark: int) -> int:
    """The clock of an account's final state: the timestamp of its last write at or before
    the watermark, from its latest checkpoint and the writes after it (effective order)."""
    clock = 0 if checkpoint is None else checkpoint.position[0]
    for w in writes:
        if w.timestamp > watermark:
            break
        clock = w.timestamp
    return clock
