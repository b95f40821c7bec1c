"""PostgreSQL backend: one ledger shared by many service processes (asyncpg, a pool each).

Why it is shaped this way (the embedded backends are different on purpose):

- The database is the authority, not process memory. Every write runs in one transaction
  that first locks its accounts' rows, existing or new, in one pass in sorted order
  (``lock_or_create_accounts``: no deadlock): operations on one account are serialised in
  the database whichever process serves them, operations on different
  accounts never wait for each other, and the journal (``entries``), the state rows and the
  idempotency record commit together or not at all.
- Each process keeps a cache of trackers tagged with the row's ``version``. A write that finds
  the version it cached skips loading the account's live grants; any other version (another
  process wrote) reloads them. So one process on a hot account stays O(log n) per operation.
- Schema changes are versioned migrations, applied at startup (or by ``gpu-credits migrate``)
  under an advisory lock, so several processes starting together migrate once. Tables and
  columns are SQLite's, plus what sharing needs (``app.storage.rows``), and a change becomes
  rows through the same code as there.
- A write has three phases, and a failure means something different in each (see
  ``PostgresStore.transaction``): before COMMIT is sent nothing is committed; while COMMIT is
  in flight the outcome is unknown (``CommitOutcomeUnknown``); once COMMIT has answered, the
  write stands whatever fails next (giving the connection back to the pool is logged, never
  raised).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final, TypeAlias

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from app.domain import LiveGrant, TrackerState
from app.observe import NULL_OBSERVER, Observer
from app.storage import migrations, rows
from app.storage.base import (
    ACCOUNT_ID_END,
    MAX_EVENT_IDS_PER_READ,
    MAX_GRANT_IDS_PER_READ,
    AccountRow,
    Change,
    Checkpoint,
    Entry,
    EventRecord,
    EventTime,
    ExpirationEntry,
    GrantEntry,
    IdempotencyRecord,
    LoadedAccount,
    LoadedState,
    MigrationStatus,
    Position,
    SnapshotError,
    StorageError,
    VoidEntry,
    WriteEntry,
    final_clock,
)
from app.storage.base import AccountState as AccountState  # where app.adapters.postgres finds it
from app.storage.migrations import Migration
from app.storage.rows import (
    CHECKPOINT_COLUMNS,
    ENTRY_COLUMNS,
    EVENT_ID_COLUMNS,
    IDEMPOTENCY_COLUMNS,
    LIVE_GRANT_COLUMNS,
    columns,
)

# What a pool hands out: a proxy for a connection, used exactly like one. (The stubs make
# these generic; at run time they are not, hence the string.)
Connection: TypeAlias = "asyncpg.Connection[Any] | PoolConnectionProxy[Any]"

MIGRATION_LOCK_ID: Final = 0x6770_7563  # "gpuc": one advisory lock id for migrations

# What the driver raises when the database or the connection to it fails (OSError covers
# refused connections, resets and timeouts). InternalClientError is how asyncpg reports a
# connection left unusable by a message it did not expect, typically the FATAL "terminating
# connection" a server shutting down sends to idle connections.
DRIVER_ERRORS: Final[tuple[type[Exception], ...]] = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)

log = logging.getLogger("app.storage.postgres")


class CommitOutcomeUnknown(StorageError):
    """COMMIT was sent and no definite answer came back (the connection died, the server
    went away mid-COMMIT, a timeout): the transaction may or may not have committed."""


# (version, statements). Append only: a released migration is never edited.
MIGRATIONS: Final[tuple[Migration, ...]] = (
    (
        1,
        """
        CREATE TABLE accounts (
            account_id text PRIMARY KEY,
            clock bigint NOT NULL,
            debt bigint NOT NULL,
            available bigint NOT NULL,
            next_grant_seq bigint NOT NULL,
            next_entry_seq bigint NOT NULL,
            version bigint NOT NULL
        );
        CREATE TABLE account_count (
            only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
            n bigint NOT NULL
        );
        INSERT INTO account_count VALUES (true, 0);
        CREATE TABLE batches (
            account_id text NOT NULL,
            grant_seq bigint NOT NULL,
            expiry bigint NOT NULL,
            remaining bigint NOT NULL,
            PRIMARY KEY (account_id, grant_seq)
        );
        CREATE TABLE entries (
            account_id text NOT NULL,
            seq bigint NOT NULL,
            kind text NOT NULL,
            timestamp bigint NOT NULL,
            available bigint NOT NULL,
            debt bigint NOT NULL,
            grant_seq bigint,
            details jsonb NOT NULL,
            PRIMARY KEY (account_id, seq)
        );
        CREATE INDEX entries_by_grant ON entries (account_id, grant_seq) WHERE kind = 'grant';
        CREATE TABLE idempotency (
            scope text NOT NULL,
            key text NOT NULL,
            fingerprint text NOT NULL,
            status_code integer NOT NULL,
            body bytea NOT NULL,
            created_at_s double precision NOT NULL,
            PRIMARY KEY (scope, key)
        );
        CREATE INDEX idempotency_by_age ON idempotency (created_at_s);
        """,
    ),
    (
        2,
        # As-of balance reads find the last entry at or before a time by index.
        """
        CREATE INDEX entries_by_time ON entries (account_id, timestamp, seq);
        """,
    ),
    (
        3,
        # Tenant quotas count a prefix's accounts by range; byte order makes the range exact.
        """
        CREATE INDEX accounts_by_prefix ON accounts (account_id COLLATE "C");
        """,
    ),
    (
        4,
        # One name per concept from the core to the JSON (SQLite's migration 3 does the
        # same): the rest of a grant is a live grant, a grant is named by its grant_id, an
        # entry's position is its sequence. Indexes follow their columns; the primary key's
        # index is renamed with its table.
        """
        ALTER TABLE batches RENAME TO live_grants;
        ALTER INDEX batches_pkey RENAME TO live_grants_pkey;
        ALTER TABLE live_grants RENAME COLUMN grant_seq TO grant_id;
        ALTER TABLE accounts RENAME COLUMN next_grant_seq TO next_grant_id;
        ALTER TABLE accounts RENAME COLUMN next_entry_seq TO next_sequence;
        ALTER TABLE entries RENAME COLUMN seq TO sequence;
        ALTER TABLE entries RENAME COLUMN grant_seq TO grant_id;
        """,
    ),
    (
        5,
        # Credits per GPU class and the grant lifecycle (SPEC sections 5 and 7): a live
        # grant's classes, an account's debt queue by class, and voids looked up by grant.
        """
        CREATE INDEX entries_by_void ON entries (account_id, grant_id) WHERE kind = 'void';
        ALTER TABLE live_grants ADD COLUMN resources jsonb;
        ALTER TABLE accounts ADD COLUMN debts jsonb;
        """,
    ),
    (
        6,
        # Late events (SPEC section 6): as SQLite's migration 5. Every account so far had a
        # window of 0, so its watermark is its clock and every entry is final.
        """
        ALTER TABLE accounts ADD COLUMN watermark bigint NOT NULL DEFAULT 0;
        UPDATE accounts SET watermark = clock;
        ALTER TABLE accounts ADD COLUMN lateness_window bigint;
        ALTER TABLE accounts ADD COLUMN folded_since_checkpoint bigint NOT NULL DEFAULT 0;
        UPDATE accounts SET folded_since_checkpoint = next_sequence - 1;
        ALTER TABLE live_grants ADD COLUMN granted_at bigint NOT NULL DEFAULT 0;
        UPDATE live_grants l SET granted_at = e.timestamp FROM entries e
            WHERE e.account_id = l.account_id AND e.kind = 'grant' AND e.grant_id = l.grant_id;
        ALTER TABLE entries ADD COLUMN rank bigint NOT NULL DEFAULT 0;
        ALTER TABLE entries ADD COLUMN revision bigint NOT NULL DEFAULT 0;
        UPDATE entries SET rank = CASE kind
            WHEN 'expiration' THEN -9007199254740992 + (details->>'grant_id')::bigint
            ELSE sequence END;
        CREATE INDEX entries_by_position ON entries (account_id, timestamp, rank)
            INCLUDE (available, debt);
        CREATE TABLE checkpoints (
            account_id text NOT NULL,
            timestamp bigint NOT NULL,
            rank bigint NOT NULL,
            state jsonb NOT NULL,
            PRIMARY KEY (account_id, timestamp, rank)
        );
        """,
    ),
    (
        7,
        # Usage streams (POST /v1/events): as SQLite's migration 6.
        """
        CREATE TABLE event_ids (
            account_id text NOT NULL,
            event_id text NOT NULL,
            fingerprint text NOT NULL,
            sequence bigint NOT NULL,
            grant_id bigint,
            created_at_s double precision NOT NULL,
            PRIMARY KEY (account_id, event_id)
        );
        CREATE INDEX event_ids_by_age ON event_ids (created_at_s);
        """,
    ),
)
# The last entry at or before a time (reads are safe: an as-of read is answered from here).
_TOTALS_AT = (
    "SELECT available, debt FROM entries WHERE account_id = $1 AND timestamp <= $2 "
    "ORDER BY timestamp DESC, rank DESC LIMIT 1"
)


def _state(row: asyncpg.Record) -> AccountState:
    return AccountState(
        row["account_id"],
        row["clock"],
        row["debt"],
        row["available"],
        row["next_grant_id"],
        row["next_sequence"],
        row["version"],
        rows.debts_of(row["debts"]),
        row["watermark"],
        row["lateness_window"],
        row["folded_since_checkpoint"],
    )


def _entry(row: asyncpg.Record) -> Entry:
    return rows.entry_of(
        row["sequence"],
        row["kind"],
        row["timestamp"],
        row["available"],
        row["debt"],
        row["details"],
        row["revision"],
    )


def _idempotency(row: asyncpg.Record) -> IdempotencyRecord:
    return IdempotencyRecord(
        row["scope"],
        row["key"],
        row["fingerprint"],
        row["status_code"],
        bytes(row["body"]),
        row["created_at_s"],
    )


_ACCOUNT_COLUMNS = (
    "account_id, clock, debt, available, next_grant_id, next_sequence, version, debts, "
    "watermark, lateness_window, folded_since_checkpoint"
)
_ENTRY_COLUMNS = "sequence, kind, timestamp, available, debt, details, revision"
# Entries after a position, in effective order: a range of the ``entries_by_position`` index.
_ENTRIES_AFTER = (
    f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE account_id = $1 AND (timestamp, rank) > ($2, $3) "
    "ORDER BY timestamp, rank LIMIT $4"
)
# The end of the ledger, newest first: the index on (account, timestamp, rank) read backwards.
LATEST_ENTRIES = (
    f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE account_id = $1 "
    "ORDER BY timestamp DESC, rank DESC LIMIT $2"
)
_WRITES_AFTER = (
    f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE account_id = $1 AND (timestamp, rank) > ($2, $3) "
    "AND timestamp <= $4 AND kind <> 'expiration' ORDER BY timestamp, rank LIMIT $5"
)
_CHECKPOINT_AT = (
    "SELECT timestamp, rank, state::text AS state FROM checkpoints "
    "WHERE account_id = $1 AND timestamp <= $2 ORDER BY timestamp DESC, rank DESC LIMIT 1"
)
_BEFORE_EVERY_POSITION: Final[Position] = (-1, 0)
_MAX_REPLAYED_WRITES: Final = 1_000_000  # a bound, as on SQLite
# A grant's entry, and the entry that voided it (each kind has its own index on grant_id).
_GRANT_ENTRY = (
    f"SELECT {_ENTRY_COLUMNS} FROM entries "
    "WHERE account_id = $1 AND grant_id = $2 AND kind = 'grant'"
)
_VOID_ENTRY = (
    f"SELECT {_ENTRY_COLUMNS} FROM entries "
    "WHERE account_id = $1 AND grant_id = $2 AND kind = 'void'"
)
# Accounts in byte order of their id, after a cursor and within a prefix's range: the
# expressions are the index's (migration 3), so this is an index range scan with a LIMIT.
ACCOUNTS_RANGE = (
    f"SELECT {_ACCOUNT_COLUMNS} FROM accounts "
    'WHERE account_id COLLATE "C" > $1 AND account_id COLLATE "C" >= $2 '
    'AND account_id COLLATE "C" < $3 AND version > 0 '
    'ORDER BY account_id COLLATE "C" LIMIT $4'
)
_SELECT_IDEMPOTENCY = (
    f"SELECT {columns(IDEMPOTENCY_COLUMNS)} FROM idempotency WHERE scope = $1 AND key = $2"
)
# Over any entry of its sequence: a late write restates entries after it (SPEC section 6).
_UPSERT_ENTRY = (
    f"INSERT INTO entries ({columns(ENTRY_COLUMNS)}) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10) "
    "ON CONFLICT (account_id, sequence) DO UPDATE SET kind = excluded.kind, "
    "timestamp = excluded.timestamp, available = excluded.available, debt = excluded.debt, "
    # A merge: what a restatement changes (the effect), over what it keeps (a grant's label).
    "grant_id = excluded.grant_id, details = entries.details || excluded.details, "
    "rank = excluded.rank, "
    "revision = excluded.revision"
)
_DELETE_ENTRY = "DELETE FROM entries WHERE account_id = $1 AND sequence = $2"
# A batch's new entries, live grants and account rows go in one statement per table, each
# column an array (``unnest``): for the 1,000 rows of a batch of 1,000 operations this took
# about 6 to 12 ms less per batch than ``executemany`` (``bench/pg_write.py``: medians of 28
# against 34 ms, and 46 against 58 ms on a busier machine; README, PostgreSQL batches).
_INSERT_ENTRIES = (
    f"INSERT INTO entries ({columns(ENTRY_COLUMNS)}) "
    "SELECT a, s, k, t, av, d, g, x::jsonb, r, v FROM unnest($1::text[], $2::bigint[], "
    "$3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], $8::text[], "
    "$9::bigint[], $10::bigint[]) AS u(a, s, k, t, av, d, g, x, r, v)"
)
_UPSERT_CHECKPOINT = (
    f"INSERT INTO checkpoints ({columns(CHECKPOINT_COLUMNS)}) VALUES ($1, $2, $3, $4::jsonb) "
    "ON CONFLICT (account_id, timestamp, rank) DO UPDATE SET state = excluded.state"
)
# Distinct keys (``rows.encode`` keeps one row per grant), as one statement needs.
_UPSERT_LIVE_GRANTS = (
    f"INSERT INTO live_grants ({columns(LIVE_GRANT_COLUMNS)}) "
    "SELECT a, g, e, r, x::jsonb, t FROM unnest($1::text[], $2::bigint[], $3::bigint[], "
    "$4::bigint[], $5::text[], $6::bigint[]) AS u(a, g, e, r, x, t) "
    "ON CONFLICT (account_id, grant_id) DO UPDATE SET remaining = excluded.remaining"
)
_DELETE_LIVE_GRANT = "DELETE FROM live_grants WHERE account_id = $1 AND grant_id = $2"
_INSERT_IDEMPOTENCY = (
    f"INSERT INTO idempotency ({columns(IDEMPOTENCY_COLUMNS)}) VALUES ($1, $2, $3, $4, $5, $6)"
)
# ON CONFLICT: an expired id the sweep has not deleted yet may be taken again.
_INSERT_EVENT_ID = (
    f"INSERT INTO event_ids ({columns(EVENT_ID_COLUMNS)}) VALUES ($1, $2, $3, $4, $5, $6) "
    "ON CONFLICT (account_id, event_id) DO UPDATE SET fingerprint = excluded.fingerprint, "
    "sequence = excluded.sequence, grant_id = excluded.grant_id, "
    "created_at_s = excluded.created_at_s"
)
_SELECT_EVENT_IDS = (
    f"SELECT {columns(EVENT_ID_COLUMNS)} FROM event_ids "
    "WHERE (account_id, event_id) IN (SELECT * FROM unnest($1::text[], $2::text[]))"
)
# The rows are locked by this transaction already: the join's order takes no lock.
_UPDATE_ACCOUNTS = (
    "UPDATE accounts SET clock = u.c, debt = u.d, available = u.av, next_grant_id = u.g, "
    "next_sequence = u.s, version = u.v, debts = u.x::jsonb, watermark = u.w, "
    "lateness_window = u.l, folded_since_checkpoint = u.f FROM unnest($1::text[], "
    "$2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[], "
    "$8::text[], $9::bigint[], $10::bigint[], $11::bigint[]) "
    "AS u(a, c, d, av, g, s, v, x, w, l, f) WHERE accounts.account_id = u.a"
)


class PgTransaction:
    """One transaction on one connection; every method runs inside it."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    async def lock_or_create_accounts(
        self, account_ids: Sequence[str]
    ) -> tuple[dict[str, AccountState], dict[str, AccountState]]:
        """Lock the rows of ``account_ids``, inserting placeholders for those that do not
        exist, in one pass in sorted order (Python's code point order, the order every unit
        of work takes its locks in, in every process): two transactions over overlapping
        accounts cannot deadlock, whichever accounts exist or are being created meanwhile.
        Returns (existing rows, new placeholders); a placeholder is one until
        ``settle_accounts`` counts or removes it.

        An existing row is locked by ``ON CONFLICT DO UPDATE ... WHERE false``: it updates
        nothing but locks the row (as ``FOR UPDATE``: the SET names the key), waiting for a
        transaction that holds it or is inserting it; a row whose inserter rolls back or
        deletes it is inserted here instead. Locking existing rows first and inserting the
        missing ones after (two passes) could deadlock with a transaction doing the same
        while a third created one of the accounts."""
        ordered = sorted(account_ids)
        created_rows = await self._conn.fetch(
            "INSERT INTO accounts SELECT unnest($1::text[]), 0, 0, 0, 1, 1, 0, NULL "
            "ON CONFLICT (account_id) DO UPDATE SET account_id = EXCLUDED.account_id "
            f"WHERE false RETURNING {_ACCOUNT_COLUMNS}",
            ordered,
        )
        created = {row["account_id"]: _state(row) for row in created_rows}
        existing: dict[str, AccountState] = {}
        if len(created) < len(ordered):
            # Locked above by this transaction: this statement sees their committed values.
            rows_found = await self._conn.fetch(
                f"SELECT {_ACCOUNT_COLUMNS} FROM accounts WHERE account_id = ANY($1::text[])",
                [a for a in ordered if a not in created],
            )
            existing = {row["account_id"]: _state(row) for row in rows_found}
        return existing, created

    async def account_count(self) -> int:
        """The number of accounts, locked until commit (account creation is serialised)."""
        count: int = await self._conn.fetchval("SELECT n FROM account_count FOR UPDATE")
        return count

    async def count_accounts(self, prefix: str) -> int:
        """Accounts whose id starts with ``prefix``, this transaction's new rows included.
        Account ids use ASCII below 0x7f only, so in byte order they lie in [prefix,
        prefix + 0x7f): an index range, not a scan of every account."""
        count: int = await self._conn.fetchval(
            'SELECT count(*) FROM accounts WHERE account_id COLLATE "C" >= $1 '
            'AND account_id COLLATE "C" < $2',
            prefix,
            prefix + "\x7f",
        )
        return count

    async def settle_accounts(self, created: int, unused: Sequence[str]) -> None:
        """Count the accounts this transaction really created; delete its unused
        placeholders (accounts whose every operation failed leave no trace)."""
        if unused:
            await self._conn.execute(
                "DELETE FROM accounts WHERE account_id = ANY($1::text[]) AND version = 0",
                list(unused),
            )
        if created:
            await self._conn.execute("UPDATE account_count SET n = n + $1", created)

    async def read_totals_at(self, account_id: str, timestamp: int) -> tuple[int, int]:
        row = await self._conn.fetchrow(_TOTALS_AT, account_id, timestamp)
        return (0, 0) if row is None else (row["available"], row["debt"])

    async def read_replay(
        self, account_id: str, timestamp: int, limit: int
    ) -> tuple[Checkpoint | None, list[WriteEntry]]:
        """``PostgresStore.read_replay`` on this transaction's own connection: a unit of work
        that asked the pool for a second one while holding this one could wait for ever
        once every connection was held so (found by an adversarial test: a batch's class
        balance read before the clock hung with a pool of one, or 60 such batches with 20)."""
        return await _read_replay(self._conn, account_id, timestamp, limit)

    async def read_grant_record(
        self, account_id: str, grant_id: int
    ) -> tuple[GrantEntry | None, VoidEntry | None]:
        return await _grant_record(self._conn, account_id, grant_id)

    async def load_live_grants(self, account_ids: Sequence[str]) -> dict[str, list[LiveGrant]]:
        found = await self._conn.fetch(
            "SELECT account_id, grant_id, expiry, remaining, resources, granted_at "
            "FROM live_grants WHERE account_id = ANY($1::text[])",
            list(account_ids),
        )
        out: dict[str, list[LiveGrant]] = {a: [] for a in account_ids}
        for row in found:
            out[row["account_id"]].append(
                LiveGrant(
                    row["grant_id"],
                    row["expiry"],
                    row["remaining"],
                    rows.classes_of(row["resources"]),
                    row["granted_at"],
                )
            )
        return out

    async def read_event_time(self, state: AccountState) -> EventTime:
        return await _event_time(self._conn, state)

    async def lock_key(self, scope: str, key: str) -> IdempotencyRecord | None:
        """Serialise requests with this key across processes, then read its record."""
        await self._conn.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"{scope}\n{key}"
        )
        row = await self._conn.fetchrow(_SELECT_IDEMPOTENCY, scope, key)
        return None if row is None else _idempotency(row)

    async def read_event_ids(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], EventRecord]:
        return await _read_event_ids(self._conn, keys)

    async def write(
        self, changes: Sequence[Change], available: dict[str, int], versions: dict[str, int]
    ) -> dict[str, int]:
        """Write ``changes`` (rows from ``app.storage.rows``, as on SQLite); each account's row
        gets its newest values, its ``available`` credits and version + 1. Returns the new
        versions."""
        group = rows.encode(changes)  # asserts the changes' invariants first
        conn = self._conn
        if group.live_grant_deletes:
            await conn.executemany(_DELETE_LIVE_GRANT, group.live_grant_deletes)
        if group.live_grant_upserts:
            await conn.execute(_UPSERT_LIVE_GRANTS, *_columns(group.live_grant_upserts))
        if group.entry_deletes:
            await conn.executemany(_DELETE_ENTRY, group.entry_deletes)
        if group.entries:
            await conn.execute(_INSERT_ENTRIES, *_columns(group.entries))
        if group.restated_entries:
            await conn.executemany(_UPSERT_ENTRY, group.restated_entries)
        if group.checkpoints:
            await conn.executemany(_UPSERT_CHECKPOINT, group.checkpoints)
        if group.idempotency:
            await conn.executemany(_INSERT_IDEMPOTENCY, group.idempotency)
        if group.event_ids:
            await conn.executemany(_INSERT_EVENT_ID, group.event_ids)
        new_versions = {account_id: versions[account_id] + 1 for account_id in group.accounts}
        if group.accounts:
            await conn.execute(
                _UPDATE_ACCOUNTS,
                *_columns(
                    [
                        (
                            a.account_id,
                            a.clock,
                            a.debt,
                            available[a.account_id],
                            a.next_grant_id,
                            a.next_sequence,
                            new_versions[a.account_id],
                            rows.debts_text(a.debts),
                            a.watermark,
                            a.lateness_window,
                            a.folded_since_checkpoint,
                        )
                        for a in group.accounts.values()
                    ]
                ),
            )
        return new_versions


def _columns(values: Sequence[tuple[Any, ...]]) -> list[list[Any]]:
    """Rows as columns, one array parameter each (for ``unnest``); ``values`` is not empty."""
    return [list(column) for column in zip(*values, strict=True)]


class PostgresStore:
    def __init__(self, url: str, min_connections: int, max_connections: int) -> None:
        assert 1 <= min_connections <= max_connections
        self._url = url
        self._min = min_connections
        self._max = max_connections
        self._pool: asyncpg.Pool[Any] | None = None
        # Told of each COMMIT and how long it took (a transaction is one unit of work).
        self.observer: Observer = NULL_OBSERVER

    @property
    def pool(self) -> asyncpg.Pool[Any]:
        assert self._pool is not None, "store is not open"
        return self._pool

    async def open(self, idempotency_min_created_at_s: float | None = None) -> LoadedState:
        """Migrate and open the pool. Nothing is loaded (the service reads each account
        under its row lock); with ``idempotency_min_created_at_s``, older idempotency
        records are dropped, as the embedded backends do at open."""
        self._pool = await asyncpg.create_pool(
            self._url, min_size=self._min, max_size=self._max, command_timeout=60
        )
        async with self._connection() as conn:
            await migrate(conn)
        if idempotency_min_created_at_s is not None:
            await self.prune_idempotency(idempotency_min_created_at_s)
            await self.prune_event_ids(idempotency_min_created_at_s)
        return LoadedState()

    async def check(self) -> str | None:
        """Nothing to watch here: the database keeps its own files, and readiness asks it
        directly (``PostgresPort.ready``)."""
        return None

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[PgTransaction]:
        """One transaction, committed when the block ends without an exception.

        What a failure means depends on when it happens:

        - before COMMIT is sent (acquiring a connection, BEGIN, the block itself, or a
          connection already broken when COMMIT is attempted): nothing is committed, and the
          error propagates as it is (a database error: the caller answers 503);
        - while COMMIT is in flight with no definite answer: ``CommitOutcomeUnknown``;
        - after COMMIT answered: the transaction is committed, and nothing raises any more.
          Giving the connection back to the pool (which resets it) can still fail when the
          server is going away; that is logged, the connection is dropped, and the caller
          answers its success.

        When the block raises, its exception is the one that propagates: a rollback that
        fails too (the connection is gone, and the server discards the transaction with it)
        is logged.
        """
        async with self._connection() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                yield PgTransaction(conn)
            except BaseException:
                # On a closed connection there is nothing to roll back: the server discards
                # the transaction when the session ends.
                if not conn.is_closed():
                    try:
                        await tx.rollback()
                    except Exception as exc:  # the block's own error is the answer
                        _log_dropped("rollback failed", exc)
                raise
            started_s = time.perf_counter()
            await _commit(tx)
            self.observer.committed(time.perf_counter() - started_s, 1)

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Connection]:
        """A pooled connection. Giving it back never raises: by then the caller's work is done
        (a COMMIT may have succeeded), and asyncpg terminates a connection it cannot reset, so
        the pool opens a fresh one next time."""
        conn = await self.pool.acquire()
        try:
            yield conn
        finally:
            try:
                await self.pool.release(conn)
            except Exception as exc:
                _log_dropped("releasing a connection failed", exc)

    async def ping(self) -> None:
        async with self._connection() as conn:
            await conn.fetchval("SELECT 1")

    async def total_debt(self) -> int:
        """The debt of every account (a scan of ``accounts``: metrics read it once a scrape,
        not per request)."""
        async with self._connection() as conn:
            total = await conn.fetchval("SELECT coalesce(sum(debt), 0) FROM accounts")
        return int(total)

    @contextlib.asynccontextmanager
    async def _any_connection(self) -> AsyncIterator[Connection]:
        """A pooled connection when open; otherwise one of its own (``gpu-credits migrate``
        uses the store without opening it)."""
        if self._pool is not None:
            async with self._connection() as conn:
                yield conn
            return
        conn = await asyncpg.connect(self._url)
        try:
            yield conn
        finally:
            await conn.close()

    async def migrate(self) -> list[int]:
        async with self._any_connection() as conn:
            return await migrate(conn)

    async def migration_status(self) -> MigrationStatus:
        async with self._any_connection() as conn:
            return await migration_status(conn)

    async def read_account(self, account_id: str) -> AccountState | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(
                f"SELECT {_ACCOUNT_COLUMNS} FROM accounts WHERE account_id = $1", account_id
            )
        return None if row is None else _state(row)

    async def read_account_states(self, prefix: str, after: str, limit: int) -> list[AccountState]:
        """One range of the ``accounts_by_prefix`` index (byte order: ``COLLATE "C"``,
        whatever the database's collation), at most ``limit`` rows. Placeholder rows (version
        0, inserted for an account a transaction may create) never commit: the transaction
        deletes the unused ones before COMMIT (``PgTransaction.settle_accounts``), and the
        query does not rely on it (``version > 0``)."""
        async with self._connection() as conn:
            found = await conn.fetch(ACCOUNTS_RANGE, after, prefix, prefix + ACCOUNT_ID_END, limit)
        return [_state(row) for row in found]

    async def read_accounts(self, prefix: str, after: str, limit: int) -> list[AccountRow]:
        return [
            AccountRow(
                s.account_id,
                s.clock,
                s.debt,
                s.next_grant_id,
                s.next_sequence,
                s.debts,
                s.watermark,
                s.lateness_window,
                s.folded_since_checkpoint,
            )
            for s in await self.read_account_states(prefix, after, limit)
        ]

    async def read_balance_at(
        self, account_id: str, timestamp: int
    ) -> tuple[AccountState, tuple[int, int]] | None:
        """The account and its (available, debt) at ``timestamp``, changing nothing: the
        projection from its live grants at or after its clock, the stored history before
        it. None for an unknown account. One snapshot: a late write restates entries before
        the clock, so the figures must be of the moment the row (its watermark) is of."""
        async with (
            self._connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            row = await conn.fetchrow(
                f"SELECT {_ACCOUNT_COLUMNS}, (SELECT coalesce(sum(remaining), 0) "
                "FROM live_grants g WHERE g.account_id = a.account_id AND g.expiry <= $2) "
                "AS expiring "
                "FROM accounts a WHERE a.account_id = $1",
                account_id,
                timestamp,
            )
            if row is None:
                return None
            state = _state(row)
            if timestamp >= state.clock:
                return state, (state.available - int(row["expiring"]), state.debt)
            totals = await conn.fetchrow(_TOTALS_AT, account_id, timestamp)
        return state, (0, 0) if totals is None else (totals["available"], totals["debt"])

    async def read_live_grants(
        self, account_id: str
    ) -> tuple[AccountState | None, list[LiveGrant]]:
        """The account and its live grants in consumption order, from one snapshot."""
        async with (
            self._connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            row = await conn.fetchrow(
                f"SELECT {_ACCOUNT_COLUMNS} FROM accounts WHERE account_id = $1", account_id
            )
            if row is None:
                return None, []
            found = await conn.fetch(
                "SELECT grant_id, expiry, remaining, resources, granted_at FROM live_grants "
                "WHERE account_id = $1 ORDER BY expiry, grant_id",
                account_id,
            )
        live = [
            LiveGrant(
                r["grant_id"],
                r["expiry"],
                r["remaining"],
                rows.classes_of(r["resources"]),
                r["granted_at"],
            )
            for r in found
        ]
        return _state(row), live

    async def read_entries(
        self, account_id: str, after: Position | None, limit: int
    ) -> list[Entry]:
        start = after if after is not None else _BEFORE_EVERY_POSITION
        async with self._connection() as conn:
            found = await conn.fetch(_ENTRIES_AFTER, account_id, *start, limit)
        return [_entry(r) for r in found]

    async def read_latest_entries(self, account_id: str, limit: int) -> list[Entry]:
        async with self._connection() as conn:
            found = await conn.fetch(LATEST_ENTRIES, account_id, limit)
        return [_entry(r) for r in reversed(found)]

    async def read_entry_position(self, account_id: str, sequence: int) -> Position | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(
                "SELECT timestamp, rank FROM entries WHERE account_id = $1 AND sequence = $2",
                account_id,
                sequence,
            )
        return None if row is None else (row["timestamp"], row["rank"])

    async def read_writes(
        self, account_id: str, after: Position | None, until_timestamp: int, limit: int
    ) -> list[WriteEntry]:
        async with self._connection() as conn:
            return await _read_writes(conn, account_id, after, until_timestamp, limit)

    async def read_replay(
        self, account_id: str, timestamp: int, limit: int
    ) -> tuple[Checkpoint | None, list[WriteEntry]]:
        async with self._connection() as conn, conn.transaction(isolation="repeatable_read"):
            return await _read_replay(conn, account_id, timestamp, limit)

    async def read_replay_of_account(
        self, account_id: str, timestamp: int, limit: int
    ) -> tuple[AccountState | None, Checkpoint | None, list[WriteEntry]]:
        """``read_replay`` and the account's row (None: unknown) from one snapshot, so an
        as-of read answers with the watermark of the moment its figures are of."""
        async with (
            self._connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            row = await conn.fetchrow(
                f"SELECT {_ACCOUNT_COLUMNS} FROM accounts WHERE account_id = $1", account_id
            )
            if row is None:
                return None, None, []
            checkpoint, writes = await _read_replay(conn, account_id, timestamp, limit)
            return _state(row), checkpoint, writes

    async def read_checkpoint(self, account_id: str, timestamp: int) -> Checkpoint | None:
        async with self._connection() as conn:
            return await _read_checkpoint(conn, account_id, timestamp)

    async def read_grant_entries(
        self, account_id: str, grant_ids: Sequence[int]
    ) -> dict[int, GrantEntry]:
        assert len(grant_ids) <= MAX_GRANT_IDS_PER_READ
        if not grant_ids:
            return {}
        async with self._connection() as conn:
            rows = await conn.fetch(
                f"SELECT {_ENTRY_COLUMNS} FROM entries "
                "WHERE account_id = $1 AND kind = 'grant' AND grant_id = ANY($2::bigint[])",
                account_id,
                list(grant_ids),
            )
        found = [_entry(r) for r in rows]
        return {e.grant_id: e for e in found if isinstance(e, GrantEntry)}

    async def read_void_entry(self, account_id: str, grant_id: int) -> VoidEntry | None:
        async with self._connection() as conn:
            return (await _grant_record(conn, account_id, grant_id))[1]

    async def read_grant_now(
        self, account_id: str, grant_id: int
    ) -> tuple[Entry | None, int] | None:
        """A grant's entry and what is left of it at the clock (0 once used up, expired or
        voided), from one snapshot: a late write restates both together (the entry's settled
        debt and what it kept). None for an unknown account."""
        async with (
            self._connection() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            row = await conn.fetchrow(
                "SELECT (SELECT remaining FROM live_grants g WHERE g.account_id = a.account_id "
                "AND g.grant_id = $2) AS remaining FROM accounts a WHERE a.account_id = $1",
                account_id,
                grant_id,
            )
            if row is None:
                return None
            found = await conn.fetchrow(
                f"SELECT {_ENTRY_COLUMNS} FROM entries "
                "WHERE account_id = $1 AND grant_id = $2 AND kind = 'grant'",
                account_id,
                grant_id,
            )
        return (None if found is None else _entry(found)), row["remaining"] or 0

    async def read_grant_entry(self, account_id: str, grant_id: int) -> Entry | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(
                f"SELECT {_ENTRY_COLUMNS} FROM entries "
                "WHERE account_id = $1 AND grant_id = $2 AND kind = 'grant'",
                account_id,
                grant_id,
            )
        return None if row is None else _entry(row)

    async def read_totals_at(self, account_id: str, timestamp: int) -> tuple[int, int]:
        async with self._connection() as conn:
            row = await conn.fetchrow(_TOTALS_AT, account_id, timestamp)
        return (0, 0) if row is None else (row["available"], row["debt"])

    async def read_account_state(self, account_id: str) -> LoadedAccount | None:
        state, live_grants = await self.read_live_grants(account_id)
        if state is None:
            return None
        in_grant_order = tuple(sorted(live_grants, key=lambda b: b.grant_id))
        tracker_state = TrackerState(
            state.clock, state.debt, state.next_grant_id, in_grant_order, state.debts
        )
        loaded = LoadedAccount(
            tracker_state,
            state.next_sequence,
            state.watermark,
            state.lateness_window,
            state.folded_since_checkpoint,
        )
        if state.watermark < state.clock:
            async with self._connection() as conn:
                event_time = await _event_time(conn, state)
            loaded.checkpoint = event_time.checkpoint
            loaded.writes_since_checkpoint = event_time.writes_since_checkpoint
            loaded.provisional_entries = event_time.provisional_entries
        return loaded

    async def read_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        async with self._connection() as conn:
            row = await conn.fetchrow(_SELECT_IDEMPOTENCY, scope, key)
        return None if row is None else _idempotency(row)

    async def read_idempotency_body(self, scope: str, key: str) -> bytes | None:
        record = await self.read_idempotency(scope, key)
        return None if record is None else record.body

    async def prune_idempotency(self, min_created_at_s: float) -> int:
        async with self._connection() as conn:
            status = await conn.execute(
                "DELETE FROM idempotency WHERE created_at_s < $1", min_created_at_s
            )
        return int(status.split()[-1])

    async def read_event_ids(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], EventRecord]:
        async with self._connection() as conn:
            return await _read_event_ids(conn, keys)

    async def prune_event_ids(self, min_created_at_s: float) -> int:
        async with self._connection() as conn:
            status = await conn.execute(
                "DELETE FROM event_ids WHERE created_at_s < $1", min_created_at_s
            )
        return int(status.split()[-1])


async def _read_event_ids(
    conn: Connection, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], EventRecord]:
    assert len(keys) <= MAX_EVENT_IDS_PER_READ
    if not keys:
        return {}
    found = await conn.fetch(_SELECT_EVENT_IDS, [k[0] for k in keys], [k[1] for k in keys])
    records = [EventRecord(*row.values()) for row in found]
    return {(r.account_id, r.event_id): r for r in records}


async def _read_writes(
    conn: Connection, account_id: str, after: Position | None, until_timestamp: int, limit: int
) -> list[WriteEntry]:
    start = after if after is not None else _BEFORE_EVERY_POSITION
    found = await conn.fetch(_WRITES_AFTER, account_id, *start, until_timestamp, limit)
    writes: list[WriteEntry] = []
    for entry in await _entries_of(found):
        assert not isinstance(entry, ExpirationEntry)
        writes.append(entry)
    return writes


# Rows decoded into entries on the event loop up to this many (about 5 us a row); more (an
# account's writes to replay: up to 10,000, 50 ms) in a worker thread, the loop free for
# other requests meanwhile. Decoding makes new objects from the rows and touches nothing else.
_ENTRIES_DECODED_ON_LOOP: Final = 1_000


async def _entries_of(found: list[asyncpg.Record]) -> list[Entry]:
    if len(found) <= _ENTRIES_DECODED_ON_LOOP:
        return [_entry(r) for r in found]
    return await asyncio.to_thread(lambda: [_entry(r) for r in found])


async def _read_replay(
    conn: Connection, account_id: str, timestamp: int, limit: int
) -> tuple[Checkpoint | None, list[WriteEntry]]:
    """The account's nearest checkpoint at or before ``timestamp`` and up to ``limit`` writes
    after it to ``timestamp``, for a class's as-of replay."""
    checkpoint = await _read_checkpoint(conn, account_id, timestamp)
    after = None if checkpoint is None else checkpoint.position
    return checkpoint, await _read_writes(conn, account_id, after, timestamp, limit)


async def _read_checkpoint(conn: Connection, account_id: str, timestamp: int) -> Checkpoint | None:
    row = await conn.fetchrow(_CHECKPOINT_AT, account_id, timestamp)
    return None if row is None else rows.checkpoint_of(row["timestamp"], row["rank"], row["state"])


async def _event_time(conn: Connection, state: AccountState) -> EventTime:
    """What replaying an account's provisional writes needs (see ``LoadedAccount``)."""
    if state.watermark >= state.clock:
        return EventTime()
    account_id = state.account_id
    checkpoint = await _read_checkpoint(conn, account_id, state.watermark)
    after = None if checkpoint is None else checkpoint.position
    writes = await _read_writes(conn, account_id, after, state.clock, _MAX_REPLAYED_WRITES)
    start = final_clock(checkpoint, writes, state.watermark)
    found = await conn.fetch(_ENTRIES_AFTER, account_id, start, 2**63 - 1, _MAX_REPLAYED_WRITES)
    return EventTime(checkpoint, tuple(writes), tuple(await _entries_of(found)))


async def _commit(tx: asyncpg.transaction.Transaction) -> None:
    """Send COMMIT; raise ``CommitOutcomeUnknown`` unless the failure proves it did not
    commit (see ``_commit_refused``)."""
    try:
        await tx.commit()
    except Exception as exc:
        if _commit_refused(exc):
            raise
        if not isinstance(exc, DRIVER_ERRORS):
            log.error("unexpected error during COMMIT", exc_info=exc)
        raise CommitOutcomeUnknown(f"connection lost during COMMIT: {exc!r}") from exc


def _commit_refused(exc: Exception) -> bool:
    """Whether a failed COMMIT certainly did not commit.

    - An ERROR from the server (a serialization failure, say): it rolled back. A FATAL or
      PANIC does not say so: a server shutting down can end the session after the commit
      record is written but before the answer is sent.
    - An ``InterfaceError`` other than ``ConnectionDoesNotExistError``: asyncpg refused to
      send on a connection already closed or busy. ``ConnectionDoesNotExistError`` is the
      one raised when the connection is lost while waiting for the answer.
    - asyncpg's "cannot switch to state": the protocol was already broken (a FATAL arrived
      while the connection was idle), so the query was never written. Recognised by its
      wording (constraints.txt pins asyncpg); should the wording change, this failure is
      reported as an unknown outcome, which is never wrong, only less precise.
    """
    if isinstance(exc, asyncpg.PostgresError):
        return (exc.severity_en or exc.severity) == "ERROR"
    if isinstance(exc, asyncpg.InterfaceError):
        return not isinstance(exc, asyncpg.ConnectionDoesNotExistError)
    if isinstance(exc, asyncpg.InternalClientError):
        return str(exc).startswith("cannot switch to state")
    return False


def _log_dropped(what: str, exc: Exception) -> None:
    """A failure that changes no answer: a warning when the database went away, the whole
    traceback when it is anything else (a bug must not pass silently)."""
    if isinstance(exc, DRIVER_ERRORS):
        log.warning("%s; the connection is dropped: %r", what, exc)
    else:
        log.error("%s; the connection is dropped", what, exc_info=exc)


_CREATE_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
)


async def migrate(conn: Connection) -> list[int]:
    """Apply the migrations this database lacks, in order, in one transaction; return the
    versions applied."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_ID)
        await conn.execute(_CREATE_MIGRATIONS_TABLE)
        done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
        todo = migrations.plan(done, MIGRATIONS)
        for version, sql in todo:
            await conn.execute(sql)
            await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", version)
    return [version for version, _ in todo]


async def migration_status(conn: Connection) -> MigrationStatus:
    """Where the database stands; creates nothing and takes no lock."""
    applied: list[int] = []
    if await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL"):
        applied = [r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")]
    return migrations.status(applied, MIGRATIONS)


async def _grant_record(
    conn: Connection, account_id: str, grant_id: int
) -> tuple[GrantEntry | None, VoidEntry | None]:
    """A grant's entry and the entry that voided it (None for what does not exist)."""
    grant_row = await conn.fetchrow(_GRANT_ENTRY, account_id, grant_id)
    void_row = await conn.fetchrow(_VOID_ENTRY, account_id, grant_id)
    grant = None if grant_row is None else _entry(grant_row)
    void = None if void_row is None else _entry(void_row)
    assert grant is None or isinstance(grant, GrantEntry)
    assert void is None or isinstance(void, VoidEntry)
    return grant, void


def _row_of(state: AccountState) -> AccountRow:
    return AccountRow(
        state.account_id,
        state.clock,
        state.debt,
        state.next_grant_id,
        state.next_sequence,
        state.debts,
        state.watermark,
        state.lateness_window,
        state.folded_since_checkpoint,
    )


class PostgresSnapshot:
    """A ``SnapshotReader`` over PostgreSQL: one connection of its own in one REPEATABLE
    READ, READ ONLY transaction, so every read sees the database as of its first statement
    while services go on writing. It refuses a schema this release does not write."""

    def __init__(self, url: str, where: str) -> None:
        self._url = url
        self.where = where
        self._conn: asyncpg.Connection[Any] | None = None
        self._tx: asyncpg.transaction.Transaction | None = None

    async def __aenter__(self) -> PostgresSnapshot:
        try:
            conn = await asyncpg.connect(self._url, timeout=10)
        except Exception as exc:  # refused, unreachable, a bad URL or password: all one line
            raise SnapshotError(f"cannot connect to {self.where}: {exc}") from None
        try:
            migrations.require_current(await migration_status(conn), self.where)
            self._tx = conn.transaction(isolation="repeatable_read", readonly=True)
            await self._tx.start()
            await conn.fetchval("SELECT count(*) FROM accounts")  # the snapshot starts here
        except DRIVER_ERRORS as exc:
            await conn.close()
            raise SnapshotError(f"cannot read {self.where}: {exc}") from None
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._conn is not None:
            await self._conn.close()  # ends the read-only transaction
            self._conn = None

    @property
    def _connection(self) -> asyncpg.Connection[Any]:
        assert self._conn is not None, "snapshot is not open"
        return self._conn

    async def read_accounts(self, prefix: str, after: str, limit: int) -> list[AccountRow]:
        found = await self._connection.fetch(
            ACCOUNTS_RANGE, after, prefix, prefix + ACCOUNT_ID_END, limit
        )
        return [_row_of(_state(row)) for row in found]

    async def read_account_state(self, account_id: str) -> LoadedAccount | None:
        conn = self._connection
        row = await conn.fetchrow(
            f"SELECT {_ACCOUNT_COLUMNS} FROM accounts WHERE account_id = $1", account_id
        )
        if row is None:
            return None
        state = _state(row)
        live_grants = tuple(
            LiveGrant(
                r["grant_id"],
                r["expiry"],
                r["remaining"],
                rows.classes_of(r["resources"]),
                r["granted_at"],
            )
            for r in await conn.fetch(
                "SELECT grant_id, expiry, remaining, resources, granted_at FROM live_grants "
                "WHERE account_id = $1 ORDER BY grant_id",
                account_id,
            )
        )
        tracker_state = TrackerState(
            state.clock, state.debt, state.next_grant_id, live_grants, state.debts
        )
        event_time = await _event_time(conn, state)
        return LoadedAccount(
            tracker_state,
            state.next_sequence,
            state.watermark,
            state.lateness_window,
            state.folded_since_checkpoint,
            event_time.checkpoint,
            event_time.writes_since_checkpoint,
            event_time.provisional_entries,
        )

    async def read_entries(
        self, account_id: str, after: Position | None, limit: int
    ) -> list[Entry]:
        start = after if after is not None else _BEFORE_EVERY_POSITION
        found = await self._connection.fetch(_ENTRIES_AFTER, account_id, *start, limit)
        return [_entry(r) for r in found]

    async def read_checkpoint(self, account_id: str, timestamp: int) -> Checkpoint | None:
        return await _read_checkpoint(self._connection, account_id, timestamp)

    async def integrity_problems(self) -> list[str]:
        conn = self._connection
        problems: list[str] = []
        counted = await conn.fetchval("SELECT n FROM account_count")
        existing = await conn.fetchval("SELECT count(*) FROM accounts WHERE version > 0")
        if counted != existing:
            problems.append(f"account_count says {counted} accounts, accounts holds {existing}")
        placeholders = await conn.fetchval("SELECT count(*) FROM accounts WHERE version = 0")
        if placeholders:
            problems.append(f"{placeholders} placeholder account rows (version 0) were committed")
        wrong = await conn.fetch(
            "SELECT account_id, available, (SELECT coalesce(sum(remaining), 0) FROM live_grants g "
            "WHERE g.account_id = a.account_id) AS live FROM accounts a "
            "WHERE available <> (SELECT coalesce(sum(remaining), 0) FROM live_grants g "
            "WHERE g.account_id = a.account_id) ORDER BY account_id LIMIT 5"
        )
        for row in wrong:
            problems.append(
                f"account {row['account_id']!r}: accounts.available is {row['available']} but "
                f"its live grants hold {row['live']}"
            )
        for table in ("live_grants", "entries", "checkpoints"):
            orphans = await conn.fetch(
                f"SELECT DISTINCT account_id FROM {table} t WHERE NOT EXISTS "
                "(SELECT 1 FROM accounts a WHERE a.account_id = t.account_id) LIMIT 5"
            )
            if orphans:
                names = ", ".join(repr(r["account_id"]) for r in orphans)
                problems.append(f"{table} rows of accounts that have no account row: {names}")
        return problems
