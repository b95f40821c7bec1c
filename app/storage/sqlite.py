"""SQLite backend: the default. One database file, WAL journal, ``synchronous=FULL``.

Why it is shaped this way:

- Durable before acknowledged: ``submit`` returns a future that completes only after the
  transaction holding the change has committed with ``synchronous=FULL`` (fsync of the WAL).
- Group commit: one writer thread owns the write connection. While it commits, new changes
  queue up; the next transaction takes all of them, so N concurrent requests cost one fsync,
  not N. The event loop never touches the disk: it only hands lists to the writer thread.
  ``submit`` turns the changes into rows on the loop; the writer thread takes the next
  group itself as soon as a commit ends (the event loop would reach it only after every
  request ready to run, and the writer would idle), writes it with one statement when it can
  (``_merged``, ``_write_groups``), and tells the loop, which answers the group's requests.
- All or nothing: every group is one transaction; on any error it is rolled back, every
  waiting future fails with ``StorageError``, and so does every later submit (memory has run
  ahead of disk, so the process must restart and reload).
- Bounded startup: state rows (``accounts``, ``live_grants``) are updated in the same transaction
  as the journal (``entries``), so startup reads state, never replays history.
- Reads of history use a second connection on a reader thread; WAL lets them run while the
  writer commits, and they only see committed data.
- One process per database file, whatever name reaches it: this backend trusts its memory, so
  a second process on the same file would overwrite the first one's rows with stale ones. The
  lock is a BSD ``flock`` on a descriptor of the database file itself, so it belongs to the
  file (its inode), not to a path: symlinks, hard links and bind mounts all meet it. Not a lock
  on ``<file>.lock`` (an alias of the file has another lock name) and not a POSIX ``fcntl``
  lock (SQLite uses those on the same file, and a process drops all of its POSIX locks on a
  file when it closes any descriptor of it). Nor ``PRAGMA locking_mode=EXCLUSIVE``: one
  connection would hold the file and the reader connection could not open it. The kernel
  drops the lock with the process, even on SIGKILL.
- The files behind the open descriptors must stay the files at their paths: after the data
  directory is deleted, renamed or replaced (or the WAL deleted), SQLite would go on
  committing into unlinked files and everything would be lost at restart. ``check`` (called
  about once a second) and every commit, before it starts and before it is acknowledged,
  compare the identity (device, inode) of the open database and WAL files with what their
  paths name now; on a mismatch the store fails like a failed commit and refuses writes.
- Versioned migrations (``MIGRATIONS``, recorded in ``schema_migrations``), applied by
  ``open`` under the one-process lock, so a file made by an earlier release opens and keeps
  its data. Tables and columns are PostgreSQL's (``app.storage.rows``).
- Every submission is checked (``rows.check_changes``) before anything of it is written; a
  submission that fails its checks fails the store like a failed commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic_core import to_json

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
from app.storage.migrations import Migration
from app.storage.rows import (
    ACCOUNT_COLUMNS,
    CHECKPOINT_COLUMNS,
    ENTRY_COLUMNS,
    EVENT_ID_COLUMNS,
    IDEMPOTENCY_COLUMNS,
    LIVE_GRANT_COLUMNS,
    columns,
)

log = logging.getLogger("app.storage.sqlite")

# The read connection's page cache (see ``_open``): a bound on its memory, in KiB.
READ_CACHE_KIB: Final = 64 * 1024
# The writer's page cache, in KiB. A group of writes over many accounts dirties a leaf page
# of each table and index per account (the keys start with the account id): with SQLite's
# default 2 MiB the writer reads most of them back from the OS on the next group.
WRITE_CACHE_KIB: Final = 64 * 1024
# WAL pages between automatic checkpoints (SQLite's default: 1,000). A batch over 1,000
# accounts writes about 2,300 pages (a group of several batches, mostly the same leaf pages),
# so the default copies every group's pages back into the database file at once; with room
# for many groups, a page rewritten by each is copied once, and the commit that crosses the
# mark (it copies, then syncs the database file) comes less often. Over HTTP (8 connections,
# 1,000-op batches, interleaved): 16,384 pages 44,970 ops/s, 65,536 48,300; 32,768 49,060
# against 65,536's 51,100 in another pair. It bounds the WAL file (4 KiB pages: 256 MiB)
# before a checkpoint lets it be reused, and what the first open after a crash reads back
# (here a 190 MiB WAL: 0.3 s).
WAL_AUTOCHECKPOINT_PAGES: Final = 65_536
# A cap on one transaction's size keeps a commit's latency and memory bounded under load.
MAX_CHANGES_PER_COMMIT: Final = 20_000
# Rows of one table in one statement (see ``_group_parameters``): about 8 MiB of JSON at most.
JSON_ROWS_PER_STATEMENT: Final = 50_000
# Idempotency bodies of a group that may go into its statement as JSON text (see
# ``_keys_as_text``): above, they are bound as bytes.
KEY_TEXT_MAX_BYTES: Final = 1024 * 1024
# Groups the writer commits in one job before queueing itself again behind its other jobs.
DRAIN_GROUPS_PER_JOB: Final = 8
# ALTER TABLE ... RENAME COLUMN (migration 2) needs 3.25; json_extract in migration 5 needs
# the JSON functions, built in by default since 3.38.
MIN_SQLITE_VERSION: Final = (3, 38, 0)

# (version, SQL). Append only: a released migration is never edited (see app.storage.migrations).
MIGRATIONS: Final[tuple[Migration, ...]] = (
    (
        1,
        # The schema of the release before versioned migrations, as it was (``meta`` held
        # its version). IF NOT EXISTS lets it complete a database that release began.
        """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS accounts (
    account_id TEXT PRIMARY KEY,
    clock INTEGER NOT NULL,
    debt INTEGER NOT NULL,
    next_grant_seq INTEGER NOT NULL,
    next_entry_seq INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
    account_id TEXT NOT NULL,
    grant_seq INTEGER NOT NULL,
    expiry INTEGER NOT NULL,
    remaining INTEGER NOT NULL,
    PRIMARY KEY (account_id, grant_seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS entries (
    account_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    timestamp INTEGER NOT NULL,
    available INTEGER NOT NULL,
    debt INTEGER NOT NULL,
    grant_seq INTEGER,
    details TEXT NOT NULL,
    PRIMARY KEY (account_id, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_by_grant ON entries (account_id, grant_seq)
    WHERE kind = 'grant';
CREATE TABLE IF NOT EXISTS idempotency (
    account_id TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status_code INTEGER NOT NULL,
    body BLOB NOT NULL,
    created_at_s REAL NOT NULL,
    PRIMARY KEY (account_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idempotency_by_age ON idempotency (created_at_s);
""",
    ),
    (
        2,
        # One naming with PostgreSQL: a record belongs to a scope (an account id, or a
        # batch scope such as "/batch/<key id>"), not always to an account.
        """
ALTER TABLE idempotency RENAME COLUMN account_id TO scope;
""",
    ),
    (
        3,
        # One name per concept from the core to the JSON: the rest of a grant is a live
        # grant, a grant is named by its grant_id, an entry's position is its sequence.
        # SQLite rewrites the index on entries with the renamed column.
        """
ALTER TABLE batches RENAME TO live_grants;
ALTER TABLE live_grants RENAME COLUMN grant_seq TO grant_id;
ALTER TABLE accounts RENAME COLUMN next_grant_seq TO next_grant_id;
ALTER TABLE accounts RENAME COLUMN next_entry_seq TO next_sequence;
ALTER TABLE entries RENAME COLUMN seq TO sequence;
ALTER TABLE entries RENAME COLUMN grant_seq TO grant_id;
""",
    ),
    (
        4,
        # Credits per GPU class and the grant lifecycle (SPEC sections 5 and 7): a live
        # grant's classes, an account's debt queue by class, and voids looked up by grant.
        """
CREATE INDEX entries_by_void ON entries (account_id, grant_id) WHERE kind = 'void';
ALTER TABLE live_grants ADD COLUMN resources TEXT;
ALTER TABLE accounts ADD COLUMN debts TEXT;
""",
    ),
    (
        5,
        # Late events (SPEC section 6). Every account so far had a window of 0, so its
        # watermark is its clock and every entry is final. Live grants learn their grant's
        # timestamp (ties are drawn in effective order); entries their rank (effective order
        # is (timestamp, rank)) and revision; checkpoints of final states appear. The index
        # covers an as-of total (available, debt): one descent, not two (10^6 entries: 7 us
        # instead of 46 for a cold read). An account's history so far has no checkpoint: its
        # next write stores one (it counts every write so far as folded since the last).
        """
ALTER TABLE accounts ADD COLUMN watermark INTEGER NOT NULL DEFAULT 0;
UPDATE accounts SET watermark = clock;
ALTER TABLE accounts ADD COLUMN lateness_window INTEGER;
ALTER TABLE accounts ADD COLUMN folded_since_checkpoint INTEGER NOT NULL DEFAULT 0;
UPDATE accounts SET folded_since_checkpoint = next_sequence - 1;
ALTER TABLE live_grants ADD COLUMN granted_at INTEGER NOT NULL DEFAULT 0;
UPDATE live_grants SET granted_at = coalesce((
    SELECT e.timestamp FROM entries e
    WHERE e.account_id = live_grants.account_id AND e.kind = 'grant'
        AND e.grant_id = live_grants.grant_id), 0);
ALTER TABLE entries ADD COLUMN rank INTEGER NOT NULL DEFAULT 0;
ALTER TABLE entries ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
UPDATE entries SET rank = CASE kind
    WHEN 'expiration' THEN -9007199254740992 + json_extract(details, '$.grant_id')
    ELSE sequence END;
CREATE INDEX entries_by_position ON entries (account_id, timestamp, rank, available, debt);
CREATE TABLE checkpoints (
    account_id TEXT NOT NULL,
    timestamp INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    state TEXT NOT NULL,
    PRIMARY KEY (account_id, timestamp, rank)
) WITHOUT ROWID;
""",
    ),
    (
        6,
        # Usage streams (POST /v1/events): the client ids of the lines applied, per account,
        # with the entry each made; kept and swept as Idempotency-Keys are.
        """
CREATE TABLE event_ids (
    account_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    grant_id INTEGER,
    created_at_s REAL NOT NULL,
    PRIMARY KEY (account_id, event_id)
) WITHOUT ROWID;
CREATE INDEX event_ids_by_age ON event_ids (created_at_s);
""",
    ),
    (
        7,
        # Entries and live grants keyed by an account's number, not its id: each entry
        # repeats its account in the table and in three indexes, a live grant in its table,
        # and a short integer key costs SQLite less to compare and store than text (the
        # group writer on a grown file: a quarter less CPU per write with 36-character ids,
        # the same with ids like "acct-123"; files smaller either way: README, narrower
        # keys). An account's number is given once, when its row is made, and never
        # changes. The triggers refuse rows whose account has no row (a damaged file)
        # rather than dropping them, with the query that lists them: `check` does not read
        # a file of an older schema.
        """
ALTER TABLE accounts ADD COLUMN number INTEGER;
UPDATE accounts SET number = numbered.n
    FROM (SELECT account_id AS id, row_number() OVER (ORDER BY account_id) AS n FROM accounts)
        AS numbered
    WHERE accounts.account_id = numbered.id;
CREATE UNIQUE INDEX accounts_by_number ON accounts (number);
CREATE TABLE entries_by_number (
    account INTEGER NOT NULL,
    sequence INTEGER NOT NULL,
    kind TEXT NOT NULL,
    timestamp INTEGER NOT NULL,
    available INTEGER NOT NULL,
    debt INTEGER NOT NULL,
    grant_id INTEGER,
    details TEXT NOT NULL,
    rank INTEGER NOT NULL,
    revision INTEGER NOT NULL,
    PRIMARY KEY (account, sequence)
) WITHOUT ROWID;
CREATE TEMP TRIGGER entries_need_an_account BEFORE INSERT ON entries_by_number
    WHEN NEW.account IS NULL
BEGIN
    SELECT RAISE(ABORT, 'entries of an account that has no account row (a damaged \
file, left as it was; gpu-credits check reads only a migrated file); they are: \
SELECT DISTINCT account_id FROM entries \
WHERE account_id NOT IN (SELECT account_id FROM accounts)');
END;
INSERT INTO entries_by_number
    SELECT (SELECT a.number FROM accounts a WHERE a.account_id = e.account_id), e.sequence,
        e.kind, e.timestamp, e.available, e.debt, e.grant_id, e.details, e.rank, e.revision
    FROM entries e ORDER BY 1, 2;
DROP TRIGGER entries_need_an_account;
DROP TABLE entries;
ALTER TABLE entries_by_number RENAME TO entries;
CREATE TABLE live_grants_by_number (
    account INTEGER NOT NULL,
    grant_id INTEGER NOT NULL,
    expiry INTEGER NOT NULL,
    remaining INTEGER NOT NULL,
    resources TEXT,
    granted_at INTEGER NOT NULL,
    PRIMARY KEY (account, grant_id)
) WITHOUT ROWID;
CREATE TEMP TRIGGER live_grants_need_an_account BEFORE INSERT ON live_grants_by_number
    WHEN NEW.account IS NULL
BEGIN
    SELECT RAISE(ABORT, 'live grants of an account that has no account row (a damaged \
file, left as it was; gpu-credits check reads only a migrated file); they are: \
SELECT DISTINCT account_id FROM live_grants \
WHERE account_id NOT IN (SELECT account_id FROM accounts)');
END;
INSERT INTO live_grants_by_number
    SELECT (SELECT a.number FROM accounts a WHERE a.account_id = g.account_id), g.grant_id,
        g.expiry, g.remaining, g.resources, g.granted_at
    FROM live_grants g ORDER BY 1, 2;
DROP TRIGGER live_grants_need_an_account;
DROP TABLE live_grants;
ALTER TABLE live_grants_by_number RENAME TO live_grants;
CREATE INDEX entries_by_grant ON entries (account, grant_id) WHERE kind = 'grant';
CREATE INDEX entries_by_void ON entries (account, grant_id) WHERE kind = 'void';
CREATE INDEX entries_by_position ON entries (account, timestamp, rank, available, debt);
""",
    ),
)
_CREATE_MIGRATIONS_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
)
"""

# Entries and live grants name their account by its number (migration 7), given when its
# row is made and never changed (the upsert below does not touch it); ``AccountNumbers``
# hands them out.
_ACCOUNT_NUMBER_COLUMNS: Final = (*ACCOUNT_COLUMNS, "number")
assert ENTRY_COLUMNS[0] == "account_id"
_ENTRY_ROW_COLUMNS: Final = ("account", *ENTRY_COLUMNS[1:])
assert LIVE_GRANT_COLUMNS[0] == "account_id"
_LIVE_GRANT_ROW_COLUMNS: Final = ("account", *LIVE_GRANT_COLUMNS[1:])
# An account's number from its id, in a statement over entries: SQLite evaluates it once
# (it does not depend on the row) and then descends the entries' indexes by the number.
_NUMBER_OF = "(SELECT number FROM accounts WHERE account_id = ?)"

_UPSERT_ACCOUNT = f"""
INSERT INTO accounts ({columns(_ACCOUNT_NUMBER_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (account_id) DO UPDATE SET
    clock = excluded.clock, debt = excluded.debt,
    next_grant_id = excluded.next_grant_id, next_sequence = excluded.next_sequence,
    debts = excluded.debts, watermark = excluded.watermark,
    lateness_window = excluded.lateness_window,
    folded_since_checkpoint = excluded.folded_since_checkpoint
"""
_UPSERT_LIVE_GRANT = f"""
INSERT INTO live_grants ({columns(_LIVE_GRANT_ROW_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (account, grant_id) DO UPDATE SET remaining = excluded.remaining
"""
_DELETE_LIVE_GRANT = "DELETE FROM live_grants WHERE account = ? AND grant_id = ?"
# Over any entry of its sequence: a late write restates entries after it (SPEC section 6).
_UPSERT_ENTRY = f"""
INSERT INTO entries ({columns(_ENTRY_ROW_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (account, sequence) DO UPDATE SET
    kind = excluded.kind, timestamp = excluded.timestamp, available = excluded.available,
    debt = excluded.debt, grant_id = excluded.grant_id,
    -- A merge: what a restatement changes (the effect), over what it keeps (a grant's label).
    details = json_patch(entries.details, excluded.details),
    rank = excluded.rank, revision = excluded.revision
"""
_DELETE_ENTRY = "DELETE FROM entries WHERE account = ? AND sequence = ?"
_INSERT_ENTRY = (
    f"INSERT INTO entries ({columns(_ENTRY_ROW_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_CHECKPOINT = (
    f"INSERT OR REPLACE INTO checkpoints ({columns(CHECKPOINT_COLUMNS)}) VALUES (?, ?, ?, ?)"
)
# OR REPLACE: the ledger forgets an expired key before the hourly sweep deletes its row, and
# a new request may reuse the key meanwhile.
_INSERT_IDEMPOTENCY = (
    f"INSERT OR REPLACE INTO idempotency ({columns(IDEMPOTENCY_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)"
)
# OR REPLACE: as for keys, an expired id may be forgotten before the sweep deletes its row.
_INSERT_EVENT_ID = (
    f"INSERT OR REPLACE INTO event_ids ({columns(EVENT_ID_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?)"
)


# -- a group's rows in one statement ----------------------------------------------------
# The writer thread hands a group to SQLite as ONE statement: each table's rows as one JSON
# array, all of them parameters of one INSERT into a TEMP view whose INSTEAD OF trigger runs
# every table's statement over its array (``_install_group_writer``). Outside a transaction
# that statement is its own transaction: one call commits the group (synchronous=FULL: the
# WAL is synced before it returns) and rolls all of it back if any part fails.
# Why: Python's sqlite3 lets the GIL go only inside SQLite's calls, and every call that ends
# takes it back. Beside an event loop running Python, each take back waits up to the
# interpreter's switch interval (5 ms). executemany takes it back for every row (300,000
# rows: 1.3 s alone, more than ten minutes beside a busy thread); a statement per table, with
# BEGIN and COMMIT, still took it back about ten times a group (measured: the writer waited
# about a third of its time). The arrays are made in the writer thread just before the
# statement runs (``_group_parameters``); idempotency bodies (bytes) go as their text.


def _json_rows(count: int, blobs: tuple[int, ...] = ()) -> str:
    """A SELECT of ``count`` columns from the rows of a JSON array of arrays (parameter 1);
    the columns in ``blobs`` are text made bytes again (see ``_keys_as_text``)."""
    values = [f"CAST(value->>{i} AS BLOB)" if i in blobs else f"value->>{i}" for i in range(count)]
    return "SELECT " + ", ".join(values) + " FROM json_each(?)"


def _from_json_rows(sql: str, count: int, blobs: tuple[int, ...] = ()) -> str:
    """``sql``, a statement over one row of ``count`` parameters, over the rows of a JSON array
    instead. Its VALUES list must be there, once (a changed statement fails at import)."""
    values = "VALUES (" + ", ".join("?" * count) + ")"
    if sql.count(values) != 1:
        raise ValueError(f"no single {values} in {sql!r}")
    # "WHERE true": SQLite's rule for an upsert whose rows come from a SELECT (the parser
    # would otherwise read ON CONFLICT as a join's ON).
    upsert = " WHERE true" if "ON CONFLICT" in sql else ""
    # In key order (every table's key starts with its first two columns): the rows of one
    # account then go into its b-tree pages one after the other, not once per pass over the
    # accounts (6,000 entries of 1,000 accounts on a grown file: 9.6 us a row against 12.4,
    # the sort included). Then in array order ("key" is json_each's index): when a group
    # upserts one key twice, the later row still wins.
    return sql.replace(values, _json_rows(count, blobs) + upsert + " ORDER BY 1, 2, key")


_INSERT_ENTRIES = _from_json_rows(_INSERT_ENTRY, len(_ENTRY_ROW_COLUMNS))
_UPSERT_ENTRIES = _from_json_rows(_UPSERT_ENTRY, len(_ENTRY_ROW_COLUMNS))
_UPSERT_LIVE_GRANTS = _from_json_rows(_UPSERT_LIVE_GRANT, len(_LIVE_GRANT_ROW_COLUMNS))
_UPSERT_ACCOUNTS = _from_json_rows(_UPSERT_ACCOUNT, len(_ACCOUNT_NUMBER_COLUMNS))
_INSERT_EVENT_IDS = _from_json_rows(_INSERT_EVENT_ID, len(EVENT_ID_COLUMNS))
# The CASTs let the IN use both columns of the primary key (without them SQLite searched by
# account only and scanned the account's live grants: 138 ms against 5 for 1,000 deletes).
_DELETE_LIVE_GRANTS = (
    "DELETE FROM live_grants WHERE (account, grant_id) IN "
    "(SELECT CAST(value->>0 AS INTEGER), CAST(value->>1 AS INTEGER) FROM json_each(?))"
)
_DELETE_ENTRIES = (
    "DELETE FROM entries WHERE (account, sequence) IN "
    "(SELECT CAST(value->>0 AS INTEGER), CAST(value->>1 AS INTEGER) FROM json_each(?))"
)
_INSERT_CHECKPOINTS = _from_json_rows(_INSERT_CHECKPOINT, len(CHECKPOINT_COLUMNS))
_INSERT_IDEMPOTENCIES = _from_json_rows(
    _INSERT_IDEMPOTENCY, len(IDEMPOTENCY_COLUMNS), blobs=(IDEMPOTENCY_COLUMNS.index("body"),)
)

# The trigger's steps, in the order they run: (the view's column, the statement over its
# array). Inserts, then upserts, then deletes: ``_merged`` relies on it.
_GROUP_STEPS: Final = (
    ("idempotency", _INSERT_IDEMPOTENCIES),
    ("event_ids", _INSERT_EVENT_IDS),
    ("entries", _INSERT_ENTRIES),
    ("restated_entries", _UPSERT_ENTRIES),
    ("entry_deletes", _DELETE_ENTRIES),
    ("checkpoints", _INSERT_CHECKPOINTS),
    ("live_grant_upserts", _UPSERT_LIVE_GRANTS),
    ("live_grant_deletes", _DELETE_LIVE_GRANTS),
    ("accounts", _UPSERT_ACCOUNTS),
)


# An idempotency record with its body as text (see ``_keys_as_text``).
KeyText = tuple[str, str, str, int, str, float]
# A group's rows, table by table in ``_GROUP_STEPS`` order.
Tables = tuple[Sequence[tuple[Any, ...]], ...]


class AccountNumbers:
    """Each account's number (``accounts.number``, migration 7), by id: what its entries'
    rows name it by. Only the writer thread uses it (and ``_open``, before it starts).

    A new account gets the next number when its first rows are made; its row, written in
    the same transaction as its first entries (an account's row changes with every write),
    records it. If that transaction fails the number stays given to the id here, unused
    in the file: the account's next write uses it again."""

    def __init__(self, numbers: dict[str, int]) -> None:
        self._numbers = numbers
        self._next = max(numbers.values(), default=0) + 1

    @classmethod
    def read(cls, conn: sqlite3.Connection) -> AccountNumbers:
        found = conn.execute("SELECT account_id, number FROM accounts").fetchall()
        unnumbered = [account_id for account_id, n in found if not isinstance(n, int)]
        if unnumbered:  # a row written by hand: its entries could not be found
            raise StorageError(
                f"accounts rows without their number (column number): {unnumbered[:5]}; "
                "see gpu-credits check"
            )
        return cls(dict(found))

    def of(self, account_id: str) -> int:
        number = self._numbers.get(account_id)
        if number is None:
            number = self._numbers[account_id] = self._next
            self._next += 1
        return number


def numbered_rows(group: rows.Rows, numbers: AccountNumbers) -> Tables:
    """``group``'s entries, restated entries, entry deletes, live grant upserts and deletes
    and account rows as this store writes them: entries and live grants name their account
    by number, an account row ends with its own."""
    of = numbers.of
    return (
        [(of(e[0]), *e[1:]) for e in group.entries],
        [(of(e[0]), *e[1:]) for e in group.restated_entries],
        [(of(account_id), sequence) for account_id, sequence in group.entry_deletes],
        [(of(g[0]), *g[1:]) for g in group.live_grant_upserts],
        [(of(account_id), grant_id) for account_id, grant_id in group.live_grant_deletes],
        [(*values, of(values[0])) for values in group.account_values()],
    )


def _tables_of(group: rows.Rows, keys: Sequence[KeyText], numbers: AccountNumbers) -> Tables:
    """``group``'s rows in ``_GROUP_STEPS`` order, with ``keys`` for its idempotency records
    (see ``_keys_as_text``; empty when they are bound as bytes instead)."""
    entries, restated, entry_deletes, live_upserts, live_deletes, accounts = numbered_rows(
        group, numbers
    )
    return (
        keys,
        group.event_ids,
        entries,
        restated,
        entry_deletes,
        group.checkpoints,
        live_upserts,
        live_deletes,
        accounts,
    )


def _over_column(sql: str, column: str) -> str:
    """``sql``, a statement over the rows of the JSON array in parameter 1, over the array in
    the trigger's NEW row's ``column`` instead (a changed statement fails at import)."""
    if sql.count("json_each(?)") != 1 or sql.count("?") != 1:
        raise ValueError(f"no single json_each(?) in {sql!r}")
    return sql.replace("json_each(?)", f"json_each(NEW.{column})")


_GROUP_COLUMNS = ", ".join(column for column, _ in _GROUP_STEPS)
_GROUP_VIEW = (
    f"CREATE TEMP VIEW group_rows ({_GROUP_COLUMNS}) AS "
    f"SELECT {', '.join('NULL' for _ in _GROUP_STEPS)} WHERE false"
)
_GROUP_TRIGGER = (
    "CREATE TEMP TRIGGER write_group_rows INSTEAD OF INSERT ON group_rows BEGIN\n"
    + "".join(f"{_over_column(sql, column)};\n" for column, sql in _GROUP_STEPS)
    + "END"
)
_WRITE_GROUP = (
    f"INSERT INTO group_rows ({_GROUP_COLUMNS}) VALUES ({', '.join('?' for _ in _GROUP_STEPS)})"
)
_NO_ROWS: Final = "[]"

# The hourly sweep deletes expired keys and event ids on the writer thread, one slice of a
# table at a time in key order, each slice its own transaction, so the group commits queued
# meanwhile go between slices. 10^6 expired keys deleted in one statement held the writer
# 3.9 to 4.7 s, every write waiting for it; by slices of 5,000 rows in key order, 35 ms each
# on average (0.23 to 0.27 s for one that checkpoints the WAL), 6 to 7 s in all. In key
# order, not by age: rows made one after the other belong to many accounts, so a slice by
# age writes a page for nearly every row (16 s in all, as many pages as rows).
PRUNE_ROWS_PER_SLICE: Final = 5_000
# (the last key of the next slice, the expired rows up to it, the expired rows after a key)
PruneStatements = tuple[str, str, str]


def _prune_statements(table: str, first: str, second: str) -> PruneStatements:
    key = f"({first}, {second})"
    return (
        f"SELECT {first}, {second} FROM {table} WHERE {key} > (?, ?) "
        f"ORDER BY {first}, {second} LIMIT 1 OFFSET ?",
        f"DELETE FROM {table} WHERE {key} > (?1, ?2) AND {key} <= (?3, ?4) AND created_at_s < ?5",
        f"DELETE FROM {table} WHERE {key} > (?1, ?2) AND created_at_s < ?3",
    )


_PRUNE_IDEMPOTENCY: Final = _prune_statements("idempotency", "scope", "key")
_PRUNE_EVENT_IDS: Final = _prune_statements("event_ids", "account_id", "event_id")
# Below every key the service writes (scopes, accounts, keys and ids are never empty).
_BEFORE_EVERY_KEY: Final = ("", "")


def _install_group_writer(conn: sqlite3.Connection) -> bool:
    """The TEMP view and trigger ``_WRITE_GROUP`` goes through: the connection's own, never
    in the file (so no migration), made each time the writer connects. Returns whether the
    database's text is UTF-8 (a file this service made is; ``_write_groups``'s ``utf8``)."""
    conn.execute(_GROUP_VIEW)
    conn.execute(_GROUP_TRIGGER)
    (encoding,) = conn.execute("PRAGMA encoding").fetchone()
    return bool(encoding == "UTF-8")


def _keys_as_text(records: Sequence[tuple[Any, ...]], utf8: bool) -> list[KeyText] | None:
    """Idempotency records with their bodies as text, for JSON (which holds no bytes); the
    statement makes them bytes again (``CAST(... AS BLOB)``: the text in the database's
    encoding, so only where that is UTF-8, ``utf8``: then the body's own bytes). None, and
    the records are bound as bytes instead, when the database is not UTF-8 (a file made
    elsewhere), when a body is not UTF-8 or holds a NUL (none the service makes: its answers
    are JSON it encodes), or when the bodies are large: escaping them into JSON costs more
    than the statements binding saves (a 2.9 MiB body: 21.5 ms against 7 to 8 alone; keyed
    1,000-op batches, 8 clients, in process: the same throughput, 12% more CPU), and the
    group's JSON stays far below SQLite's length limit."""
    if not utf8 or sum(len(r[4]) for r in records) > KEY_TEXT_MAX_BYTES:
        return None
    try:
        keys = [(s, k, f, code, body.decode(), at) for s, k, f, code, body, at in records]
    except UnicodeDecodeError:
        return None
    return None if any("\x00" in key[4] for key in keys) else keys


def _in_one_statement(tables: Tables) -> bool:
    """No table has more than JSON_ROWS_PER_STATEMENT rows (as a group of up to
    MAX_CHANGES_PER_COMMIT changes has): one ``_WRITE_GROUP`` takes them all, and stays far
    below SQLite's length limit."""
    return all(len(t) <= JSON_ROWS_PER_STATEMENT for t in tables)


def _group_parameters(tables: Tables) -> Iterator[tuple[str, ...]]:
    """A group's rows (``_tables_of``) as the parameters of ``_WRITE_GROUP`` statements,
    each made just before it is taken: one statement when ``_in_one_statement``, else one
    per table and slice of its rows, table by table in the trigger's order (every insert
    still runs before every upsert, and upserts before deletes), so a group's memory is its
    rows and one slice's JSON, not a copy of them all."""
    if _in_one_statement(tables):
        yield tuple(_json_array(t) if t else _NO_ROWS for t in tables)
        return
    for index, table in enumerate(tables):
        for start in range(0, len(table), JSON_ROWS_PER_STATEMENT):
            part = _json_array(table[start : start + JSON_ROWS_PER_STATEMENT])
            yield tuple(part if i == index else _NO_ROWS for i in range(len(tables)))


def _write_groups(
    conn: sqlite3.Connection,
    groups: Sequence[rows.Rows],
    *,
    utf8: bool,
    numbers: AccountNumbers,
) -> None:
    """Write and commit ``groups`` (one after the other) in one transaction. The common
    case, one group that fits one statement, is that one statement, outside a transaction:
    its own. Whatever fails, nothing of them is written. ``utf8``: the database's encoding is
    UTF-8 (see ``_keys_as_text``); ``numbers``: the accounts' numbers in this file."""
    assert not conn.in_transaction, "the writer commits what it begins"
    # Each group's rows by table, once (the accounts' values are made here).
    made: list[tuple[rows.Rows, bool, Tables]] = []
    for group in groups:
        keys = _keys_as_text(group.idempotency, utf8)
        made.append((group, keys is not None, _tables_of(group, keys or (), numbers)))
    if len(made) == 1:
        _, keys_in_json, tables = made[0]
        if keys_in_json and _in_one_statement(tables):
            [one] = _group_parameters(tables)
            conn.execute(_WRITE_GROUP, one)
            return
    try:
        conn.execute("BEGIN IMMEDIATE")
        for group, keys_in_json, tables in made:
            if not keys_in_json:  # bound as bytes (see _keys_as_text)
                conn.executemany(_INSERT_IDEMPOTENCY, group.idempotency)
            for parameters in _group_parameters(tables):
                conn.execute(_WRITE_GROUP, parameters)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _json_array(values: Sequence[tuple[Any, ...]]) -> str:
    """Rows as one JSON array of arrays. SQLite's JSON functions end a string at an escaped
    NUL, so no value may hold one (none does: ids are validated printable ASCII, the JSON
    columns escape what they hold, and ``_keys_as_text`` keeps a body with one out);
    checked, since it would be cut silently."""
    # pydantic-core's encoder (compact, UTF-8): 0.28 us a row against 0.71 for the standard
    # library's. Strings are ASCII but idempotency bodies (UTF-8 text, escaped here); a lone
    # surrogate would fail, as binding it did.
    text = to_json(values).decode()
    if "\\u0000" in text and any(
        "\x00" in v for row in values for v in row if isinstance(v, str)
    ):  # the first test also matches a JSON column's escaped NUL, which is fine
        raise ValueError("a row holds a NUL character")
    return text


@dataclass(frozen=True, slots=True)
class _Submission:
    """What ``submit`` queued: the changes as rows (made and checked on the loop), how many
    changes they were (for the bound and the group size), and the future to settle."""

    rows: rows.Rows
    changes: int
    fut: asyncio.Future[None]


def _merged(submissions: Sequence[_Submission]) -> list[rows.Rows]:
    """The rows of a group, as few as can be written with one statement: one
    ``Rows`` when the submissions' rows can be concatenated, else each submission's own, to
    be written one after the other.

    Concatenating runs every table's statement over all the submissions' rows in their
    order: inserts, then upserts (the later row of a key wins, as in order), then deletes.
    That is what writing them one after the other does, unless a key deleted by one
    submission is written again by a later one (a late write can bring a live grant back);
    then the delete would run last. Such a group is written submission by submission."""
    if len(submissions) == 1:
        return [submissions[0].rows]
    _check_order(submissions)
    deleted_live: set[tuple[str, int]] = set()
    deleted_entries: set[tuple[str, int]] = set()
    for s in submissions:
        r = s.rows
        if deleted_live and any((v[0], v[1]) in deleted_live for v in r.live_grant_upserts):
            return [s.rows for s in submissions]
        if deleted_entries and any(
            (v[0], v[1]) in deleted_entries for v in (*r.entries, *r.restated_entries)
        ):
            return [s.rows for s in submissions]
        deleted_live.update(r.live_grant_deletes)
        deleted_entries.update(r.entry_deletes)
    merged = rows.Rows()
    for s in submissions:
        r = s.rows
        merged.accounts.update(r.accounts)
        merged.entries.extend(r.entries)
        merged.restated_entries.extend(r.restated_entries)
        merged.entry_deletes.extend(r.entry_deletes)
        merged.live_grant_upserts.extend(r.live_grant_upserts)
        merged.live_grant_deletes.extend(r.live_grant_deletes)
        merged.idempotency.extend(r.idempotency)
        merged.event_ids.extend(r.event_ids)
        merged.checkpoints.extend(r.checkpoints)
    return [merged]


def _check_order(submissions: Sequence[_Submission]) -> None:
    """Across the submissions of a group, per account, in order: the clock, the watermark,
    the next grant id and the next sequence never go back (each submission was checked
    alone when it was made: ``rows.check_changes``)."""
    newest: dict[str, AccountRow] = {}
    for submission in submissions:
        for account_id, a in submission.rows.accounts.items():
            before = newest.get(account_id)
            if before is not None:
                assert a.clock >= before.clock, f"{account_id}: the clock went back"
                assert a.watermark >= before.watermark, f"{account_id}: the watermark went back"
                assert a.next_grant_id >= before.next_grant_id, (
                    f"{account_id}: next grant id went back"
                )
                assert a.next_sequence >= before.next_sequence, (
                    f"{account_id}: next sequence went back"
                )
            newest[account_id] = a


def _nothing() -> None:
    """A writer job that only waits its turn (see ``SqliteStore.close``)."""


def _settle(submissions: list[_Submission], failure: StorageError | None) -> None:
    """On the loop: each submission's future done (a client gone may have cancelled it)."""
    for submission in submissions:
        fut = submission.fut
        if fut.done():
            continue
        if failure is None:
            fut.set_result(None)
        else:
            fut.set_exception(failure)


_ENTRY_FIELDS = "sequence, kind, timestamp, available, debt, details, revision"
_ACCOUNT_FIELDS = columns(ACCOUNT_COLUMNS)
# Accounts in byte order of their id, after a cursor and within a prefix's range: a range of
# the primary key (``accounts`` is WITHOUT ROWID, clustered on ``account_id``, whose BINARY
# collation is byte order), read in order, so no sort and at most LIMIT rows.
ACCOUNTS_RANGE = (
    f"SELECT {columns(ACCOUNT_COLUMNS)} FROM accounts "
    "WHERE account_id > ? AND account_id >= ? AND account_id < ? "
    "ORDER BY account_id LIMIT ?"
)


def _connect(path: Path) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN/COMMIT ourselves, so a group is exactly one
    # transaction. check_same_thread=False: each connection is used by one executor thread,
    # but it is created on another.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("PRAGMA busy_timeout = 5000")
    return conn


def _entry_from_row(row: tuple[Any, ...]) -> Entry:
    return rows.entry_of(*row)


# Entries after a position, in effective order: a range of the ``entries_by_position`` index.
_ENTRIES_AFTER = (
    f"SELECT {_ENTRY_FIELDS} FROM entries WHERE account = {_NUMBER_OF} "
    "AND (timestamp, rank) > (?, ?) ORDER BY timestamp, rank LIMIT ?"
)
# One grant's entry, or its void's, by grant id: the partial indexes, named. Without
# statistics SQLite's planner prefers the primary key's (account) prefix, a scan of the
# account's whole history (40 ms at 2*10^5 entries, against 0.05 ms through the index).
GRANT_ENTRY = (
    f"SELECT {_ENTRY_FIELDS} FROM entries INDEXED BY entries_by_grant "
    f"WHERE account = {_NUMBER_OF} AND grant_id = ? AND kind = 'grant'"
)
VOID_ENTRY = (
    f"SELECT {_ENTRY_FIELDS} FROM entries INDEXED BY entries_by_void "
    f"WHERE account = {_NUMBER_OF} AND grant_id = ? AND kind = 'void'"
)
GRANT_ENTRIES = (  # {marks}: one ? per grant id
    f"SELECT {_ENTRY_FIELDS} FROM entries INDEXED BY entries_by_grant "
    f"WHERE account = {_NUMBER_OF} AND kind = 'grant' AND grant_id IN ({{marks}})"
)
# The end of the ledger, newest first: the index on (account, timestamp, rank) read backwards.
LATEST_ENTRIES = (
    f"SELECT {_ENTRY_FIELDS} FROM entries WHERE account = {_NUMBER_OF} "
    "ORDER BY timestamp DESC, rank DESC LIMIT ?"
)
_WRITES_AFTER = (
    f"SELECT {_ENTRY_FIELDS} FROM entries WHERE account = {_NUMBER_OF} "
    "AND (timestamp, rank) > (?, ?) AND timestamp <= ? AND kind != 'expiration' "
    "ORDER BY timestamp, rank LIMIT ?"
)
_BEFORE_EVERY_POSITION: Final[Position] = (-1, 0)
# Writes one account can need replayed on load: its provisional writes and the final ones
# since its latest checkpoint, with room to spare (a bound, not an expected size).
_MAX_REPLAYED_WRITES: Final = 1_000_000


def _read_writes(
    conn: sqlite3.Connection | None,
    account_id: str,
    after: Position | None,
    until_timestamp: int,
    limit: int,
) -> list[WriteEntry]:
    assert conn is not None, "store is not open"
    start = after if after is not None else _BEFORE_EVERY_POSITION
    found = conn.execute(_WRITES_AFTER, (account_id, *start, until_timestamp, limit)).fetchall()
    writes: list[WriteEntry] = []
    for row in found:
        entry = _entry_from_row(row)
        assert not isinstance(entry, ExpirationEntry)
        writes.append(entry)
    return writes


def _read_checkpoint(
    conn: sqlite3.Connection | None, account_id: str, timestamp: int
) -> Checkpoint | None:
    assert conn is not None, "store is not open"
    row = conn.execute(
        "SELECT timestamp, rank, state FROM checkpoints WHERE account_id = ? AND timestamp <= ? "
        "ORDER BY timestamp DESC, rank DESC LIMIT 1",
        (account_id, timestamp),
    ).fetchone()
    return None if row is None else rows.checkpoint_of(*row)


def _loaded_account(
    conn: sqlite3.Connection, row: AccountRow, live_grants: tuple[LiveGrant, ...]
) -> LoadedAccount:
    """An account as the service rebuilds it. With provisional writes (watermark < clock),
    also what replaying them needs: the latest checkpoint at or before the watermark, every
    write after it and every entry after the watermark. Their number is bounded (at most
    10,000 provisional writes per account, and a checkpoint every few hundred final ones)."""
    state = TrackerState(row.clock, row.debt, row.next_grant_id, live_grants, row.debts)
    loaded = LoadedAccount(
        state, row.next_sequence, row.watermark, row.lateness_window, row.folded_since_checkpoint
    )
    if row.watermark < row.clock:
        checkpoint = _read_checkpoint(conn, row.account_id, row.watermark)
        after = None if checkpoint is None else checkpoint.position
        loaded.checkpoint = checkpoint
        loaded.writes_since_checkpoint = tuple(
            _read_writes(conn, row.account_id, after, row.clock, _MAX_REPLAYED_WRITES)
        )
        start = final_clock(checkpoint, loaded.writes_since_checkpoint, row.watermark)
        loaded.provisional_entries = tuple(
            _entry_from_row(r)
            for r in conn.execute(
                _ENTRIES_AFTER, (row.account_id, start, 2**63 - 1, _MAX_REPLAYED_WRITES)
            )
        )
    return loaded


@contextlib.contextmanager
def _one_snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """Run the block's statements in one read transaction (one snapshot), or in the one the
    connection is already in (``SqliteSnapshot`` holds one for its whole life)."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def _read_entries(
    conn: sqlite3.Connection | None, account_id: str, after: Position | None, limit: int
) -> list[Entry]:
    assert conn is not None, "store is not open"
    start = after if after is not None else _BEFORE_EVERY_POSITION
    found = conn.execute(_ENTRIES_AFTER, (account_id, *start, limit)).fetchall()
    return [_entry_from_row(r) for r in found]


def _read_accounts(
    conn: sqlite3.Connection | None, prefix: str, after: str, limit: int
) -> list[AccountRow]:
    assert conn is not None, "store is not open"
    found = conn.execute(ACCOUNTS_RANGE, (after, prefix, prefix + ACCOUNT_ID_END, limit)).fetchall()
    return [rows.account_row(*values) for values in found]


def _read_account_state(conn: sqlite3.Connection | None, account_id: str) -> LoadedAccount | None:
    assert conn is not None, "store is not open"
    with _one_snapshot(conn):  # one snapshot for every statement
        values = conn.execute(
            f"SELECT {_ACCOUNT_FIELDS} FROM accounts WHERE account_id = ?", (account_id,)
        ).fetchone()
        if values is None:
            return None
        live_grants = tuple(
            LiveGrant(grant_id, expiry, remaining, rows.classes_of(resources), granted_at)
            for grant_id, expiry, remaining, resources, granted_at in conn.execute(
                "SELECT grant_id, expiry, remaining, resources, granted_at FROM live_grants "
                f"WHERE account = {_NUMBER_OF} ORDER BY grant_id",
                (account_id,),
            )
        )
        return _loaded_account(conn, rows.account_row(*values), live_grants)


def _statements(sql: str) -> list[str]:
    """The statements of a script, so that a migration runs inside our transaction
    (``executescript`` would commit first)."""
    out: list[str] = []
    pending = ""
    for piece in sql.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip() != ";":
                out.append(pending.strip())
            pending = ""
    assert not pending.strip(" \n;"), f"incomplete statement: {pending!r}"
    return out


def _applied_versions(conn: sqlite3.Connection) -> tuple[set[int], bool]:
    """The migrations this database has run, and whether ``schema_migrations`` records
    them. A file of the release before versioned migrations has no ``schema_migrations``
    but ``meta.schema_version`` '1': it ran migration 1 (or began to: migration 1, which
    that release's schema is, completes it)."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "schema_migrations" in tables:
        applied = {int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations")}
        if applied:
            return applied, True
    if "meta" in tables:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if row is not None:
            if row[0] != "1":
                raise StorageError(f"unknown schema version {row[0]!r} in meta")
            return {1}, False
    return set(), False


def _migrate(conn: sqlite3.Connection) -> list[int]:
    """Apply the missing migrations in one transaction; return the versions applied. The
    caller holds the one-process lock, so nobody writes meanwhile."""
    if sqlite3.sqlite_version_info < MIN_SQLITE_VERSION:
        needed = ".".join(map(str, MIN_SQLITE_VERSION))
        raise StorageError(f"SQLite {sqlite3.sqlite_version} is older than {needed}")
    conn.execute("BEGIN IMMEDIATE")
    try:
        applied, recorded = _applied_versions(conn)
        todo = migrations.plan(applied, MIGRATIONS)
        if not todo and recorded:
            conn.execute("COMMIT")  # current: write nothing
            return []
        conn.execute(_CREATE_MIGRATIONS_TABLE)
        for version in sorted(applied):  # adopted from meta: record them too
            conn.execute("INSERT OR IGNORE INTO schema_migrations (version) VALUES (?)", (version,))
        for version, sql in todo:
            for statement in _statements(sql):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations (version) VALUES (?)", (version,))
        newest = MIGRATIONS[-1][0]
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(newest),))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return [version for version, _ in todo]


class SqliteStore:
    persists_idempotency_bodies = True

    def __init__(self, path: Path) -> None:
        self._path = path
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-writer")
        self._reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-reader")
        self._write_conn: sqlite3.Connection | None = None
        self._utf8 = True  # the write connection's database is UTF-8 (set by _open)
        self._numbers = AccountNumbers({})  # read by _open
        self._read_conn: sqlite3.Connection | None = None
        # Submissions waiting for the writer, oldest first, and their changes (bounded by the
        # service: queued_changes). The loop appends, the writer thread takes: both under
        # _queue_lock, which also guards _draining (a drain job is queued or running in the
        # writer thread; it runs until the queue is empty).
        self._queue: list[_Submission] = []
        self._queued_changes = 0
        self._draining = False
        self._queue_lock = threading.Lock()
        self._failure: StorageError | None = None
        # Guards _failure's first assignment (log once) and the watched descriptors, which
        # the writer thread and check()'s thread read while close() may release them.
        self._state_lock = threading.Lock()
        # (what, path, descriptor) of each file whose identity must stay the one at its path:
        # the database file (its descriptor also holds the flock) and the WAL.
        self._watched: list[tuple[str, str, int]] = []
        # Told of each commit: how long it took and how many submissions it grouped.
        self.observer: Observer = NULL_OBSERVER

    # -- lifecycle -----------------------------------------------------------------------

    async def open(self, idempotency_min_created_at_s: float) -> LoadedState:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._writer, self._open, idempotency_min_created_at_s)

    def _open(self, idempotency_min_created_at_s: float) -> LoadedState:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        self._watched.append(("database file", str(self._path), self._lock_database_file()))
        conn = self._write_conn = _connect(self._path)
        conn.execute(f"PRAGMA cache_size = -{WRITE_CACHE_KIB}")
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
        applied = _migrate(conn)
        if applied:
            log.info("%s: applied schema migrations %s", self._path, applied)
        self._utf8 = _install_group_writer(conn)
        self._numbers = AccountNumbers.read(conn)
        conn.execute(
            "DELETE FROM idempotency WHERE created_at_s < ?", (idempotency_min_created_at_s,)
        )
        conn.execute(
            "DELETE FROM event_ids WHERE created_at_s < ?", (idempotency_min_created_at_s,)
        )
        self._read_conn = _connect(self._path)
        # Reads (as-of balances, ledger pages) descend the entries' indexes at random
        # places: with SQLite's default 2 MiB cache a long history reads most pages from the
        # OS instead (measured: a read on 10^6 entries cost 2.4x one on 10^3; 1.5x with this).
        self._read_conn.execute(f"PRAGMA cache_size = -{READ_CACHE_KIB}")
        self._watch_wal_file(conn)
        # The path could have been swapped between our open and SQLite's.
        problem = self._identity_problem()
        if problem is not None:
            raise StorageError(problem)

        state = LoadedState()
        live_grants: dict[int, list[LiveGrant]] = {}  # by account number
        # Accounts share their class lists: one tuple per distinct list, not one per grant.
        shared: dict[str, tuple[str, ...]] = {}
        for number, grant_id, expiry, remaining, resources, granted_at in conn.execute(
            "SELECT account, grant_id, expiry, remaining, resources, granted_at FROM live_grants"
        ):
            classes = None
            if resources is not None:
                classes = shared.get(resources)
                if classes is None:
                    classes = shared[resources] = tuple(json.loads(resources))
            live_grants.setdefault(number, []).append(
                LiveGrant(grant_id, expiry, remaining, classes, granted_at)
            )
        for *values, number in conn.execute(
            f"SELECT {_ACCOUNT_FIELDS}, number FROM accounts"
        ).fetchall():
            row = rows.account_row(*values)
            account_live = tuple(live_grants.pop(number, ()))
            state.accounts[row.account_id] = _loaded_account(conn, row, account_live)
        if live_grants:
            raise StorageError(
                f"live grants without an account row: account numbers {sorted(live_grants)[:5]}"
            )
        # Bodies stay on disk (read back on a replay): startup time and memory then grow
        # with the number of keys, not with the size of their answers.
        for row in conn.execute(
            "SELECT scope, key, fingerprint, status_code, created_at_s FROM idempotency"
        ):
            scope, key, fp, status_code, created_at_s = row
            state.idempotency.append(
                IdempotencyRecord(scope, key, fp, status_code, None, created_at_s)
            )
        for values in conn.execute(f"SELECT {columns(EVENT_ID_COLUMNS)} FROM event_ids"):
            state.event_ids.append(EventRecord(*values))
        return state

    def _lock_database_file(self) -> int:
        """Take the one-process-per-file lock (see the module docstring): an exclusive flock
        on a descriptor of the database file itself, created here if it does not exist (an
        empty file is an empty SQLite database). Returns the descriptor: closing it (after
        every connection to the file) releases the lock."""
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = os.fstat(fd)
            # Closing this descriptor would drop SQLite's POSIX locks on the file if this
            # process had connections to it; it has none (the lock is held elsewhere).
            os.close(fd)
            raise StorageError(
                f"the database file {os.path.realpath(self._path)} (device {held.st_dev}, "
                f"inode {held.st_ino}; configured as {self._path}) is in use by another "
                "gpu-credits process; the sqlite backend serves one process (use "
                "storage=postgres for several)"
            ) from None
        links = os.fstat(fd).st_nlink
        if links > 1:
            log.warning(
                "%s has %d hard links: SQLite finds its WAL by the name it was opened with, "
                "so open this database only by this one name",
                self._path,
                links,
            )
        return fd

    def _watch_wal_file(self, conn: sqlite3.Connection) -> None:
        """Watch the WAL as well: commits land there first, and a deleted WAL loses them at
        restart. SQLite names it after the path it resolved (symlinks followed), which
        ``PRAGMA database_list`` reports; it exists once a statement has run, and SQLite
        deletes it only when the last connection closes."""
        main_file = next(row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main")
        wal_path = f"{main_file}-wal"
        # Read-only and never locked: SQLite's WAL locks are on the -shm file.
        self._watched.append(("WAL file", wal_path, os.open(wal_path, os.O_RDONLY)))

    def _identity_problem(self) -> str | None:
        """Why a watched file is no longer the file at its path, or None. Cheap: one fstat
        and one stat per file. Called from any thread."""
        with self._state_lock:
            for what, path, fd in self._watched:
                try:
                    held = os.fstat(fd)
                except OSError as exc:
                    return f"the open {what} {path} cannot be checked: {exc}"
                if held.st_nlink == 0:
                    return f"the {what} {path} was deleted while open"
                try:
                    now = os.stat(path)
                except FileNotFoundError:
                    return (
                        f"the {what} {path} is gone (deleted, or its directory removed or renamed)"
                    )
                except OSError as exc:
                    return f"the {what} {path} cannot be checked: {exc}"
                if (now.st_dev, now.st_ino) != (held.st_dev, held.st_ino):
                    return f"the {what} at {path} is no longer the file this process has open"
        return None

    def _fail(self, reason: str, exc: BaseException | None = None) -> StorageError:
        """Enter the failed state (once; the first reason stays) and return its error. Every
        later submit fails with it: memory may have run ahead of disk, so only a restart,
        which reloads from disk, can serve again."""
        with self._state_lock:
            if self._failure is None:
                self._failure = StorageError(reason)
                if exc is None:
                    log.error("%s; refusing writes until restart", reason)
                else:
                    log.critical("%s; refusing writes until restart", reason, exc_info=exc)
            return self._failure

    async def check(self) -> str | None:
        if self._failure is None:
            # A thread of its own (not the writer's): the answer must not wait for commits.
            problem = await asyncio.to_thread(self._identity_problem)
            if problem is not None:
                self._fail(problem)
        return None if self._failure is None else str(self._failure)

    async def close(self) -> None:
        loop = asyncio.get_running_loop()
        # Every accepted submission is written first: wait until no drain job is queued or
        # running (each wait lets the writer finish the jobs ahead of it; a drain requeues
        # itself while work remains). Not on a submission's future: a cancelled one is done
        # before its group commits.
        while True:
            with self._queue_lock:
                if not self._draining and not self._queue:
                    break
            await loop.run_in_executor(self._writer, _nothing)
        await loop.run_in_executor(self._writer, self._close_write)
        await loop.run_in_executor(self._reader, self._close_read)
        self._writer.shutdown()
        self._reader.shutdown()
        # Only once no connection is left: closing a descriptor of the database file drops
        # this process's POSIX locks on it, SQLite's included.
        with self._state_lock:
            for _, _, fd in self._watched:
                os.close(fd)  # the database file's releases the flock
            self._watched = []

    def _close_write(self) -> None:
        if self._write_conn is not None:
            self._write_conn.close()
            self._write_conn = None

    def _close_read(self) -> None:
        if self._read_conn is not None:
            self._read_conn.close()
            self._read_conn = None

    async def ping(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._reader, self._ping)

    def _ping(self) -> None:
        conn = self._read_conn
        assert conn is not None, "store is not open"
        conn.execute("SELECT 1").fetchone()

    # -- schema ----------------------------------------------------------------------------

    async def migrate(self) -> list[int]:
        if self._write_conn is not None:
            return []  # open() applied them, and holds the file
        return await asyncio.to_thread(self._migrate_unopened)

    def _migrate_unopened(self) -> list[int]:
        """Under the one-process lock, as ``open`` would: a running service holds it, so
        this refuses to migrate under one (which has applied them already)."""
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = self._lock_database_file()
        try:
            conn = _connect(self._path)
            try:
                return _migrate(conn)
            finally:
                conn.close()
        finally:
            os.close(fd)  # after the connection: see close()

    async def migration_status(self) -> MigrationStatus:
        return await asyncio.to_thread(self._migration_status)

    def _migration_status(self) -> MigrationStatus:
        """Read-only, without the lock: it answers while a service runs on the file. A file
        that does not exist yet is an empty database (the service creates it)."""
        if not self._path.exists():
            return migrations.status((), MIGRATIONS)
        uri = f"{self._path.resolve().as_uri()}?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        try:
            return migrations.status(_applied_versions(conn)[0], MIGRATIONS)
        finally:
            conn.close()

    # -- writes --------------------------------------------------------------------------

    @property
    def queued_changes(self) -> int:
        return self._queued_changes

    def submit(self, changes: Sequence[Change]) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        if self._failure is not None:
            fut.set_exception(self._failure)
            return fut
        try:
            # The rows are made here, on the loop, while the writer commits earlier groups:
            # in the writer thread this Python would wait for the GIL behind the loop and
            # hold up the group. Checked first (``rows.check_changes``).
            encoded = rows.encode(changes)
        except Exception as exc:  # a change fails its checks: as a failed commit
            fut.set_exception(self._fail(f"commit failed: {exc}", exc))
            return fut
        with self._queue_lock:
            self._queue.append(_Submission(encoded, len(changes), fut))
            self._queued_changes += len(changes)
            start = not self._draining
            self._draining = True
        if start:
            # The writer is idle: it starts on this submission now.
            try:
                self._writer.submit(self._drain, loop)
            except RuntimeError as exc:  # the writer has shut down: the store is closed
                failure = self._fail(f"store is closed: {exc}")
                with self._queue_lock:
                    failed, self._queue, self._queued_changes = self._queue, [], 0
                    self._draining = False
                _settle(failed, failure)
        return fut

    def _drain(self, loop: asyncio.AbstractEventLoop) -> None:
        """In the writer thread: commit groups until the queue is empty, each as soon as the
        one before it has committed, and hand each outcome to the loop. After a few groups
        it queues itself again, so the writer's other jobs (pruning keys) get their turn.
        Nothing may escape (the executor would swallow it and leave the queue stuck):
        whatever fails poisons the store and fails every waiting submission."""
        group: list[_Submission] = []
        try:
            for _ in range(DRAIN_GROUPS_PER_JOB):
                with self._queue_lock:
                    if not self._queue:
                        self._draining = False
                        return
                    group = self._take_group()
                started_s = time.perf_counter()
                if self._failure is not None:  # a submission that raced the failure
                    raise self._failure
                self._write(_merged(group))
                latency_s = time.perf_counter() - started_s
                # A closed loop (the process ending without close()): nobody waits for the
                # answer, and the group is committed; go on with what was accepted.
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._committed, group, latency_s)
                group = []
            self._writer.submit(self._drain, loop)  # still draining: _draining stays set
        except Exception as exc:  # any failure poisons the store: see module docstring
            failure = self._fail(f"commit failed: {exc}", exc)
            with self._queue_lock:
                failed = group + self._queue
                self._queue = []
                self._queued_changes = 0
                self._draining = False
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, failed, failure)

    def _committed(self, group: list[_Submission], latency_s: float) -> None:
        """On the loop: a group is durable."""
        _settle(group, None)
        self.observer.committed(latency_s, len(group))

    def _take_group(self) -> list[_Submission]:
        """The oldest queued submissions, up to MAX_CHANGES_PER_COMMIT changes (at least one
        submission, however large, so a big batch is never split across transactions).
        Called with _queue_lock held."""
        count = 0
        cut = 0
        for submission in self._queue:
            if cut and count + submission.changes > MAX_CHANGES_PER_COMMIT:
                break
            count += submission.changes
            cut += 1
        group = self._queue[:cut]
        del self._queue[:cut]
        self._queued_changes -= count
        return group

    def _write(self, groups: Sequence[rows.Rows]) -> None:
        """One transaction for the whole group, as ``_merged`` cut it (see ``_write_groups``;
        ``app.storage.rows`` says why the live grants may be written in any order)."""
        conn = self._write_conn
        assert conn is not None, "store is not open"
        # Before: do not write into a file that is gone. After: do not acknowledge a commit
        # that may have gone into one (the path changed while it ran).
        self._raise_if_moved()
        _write_groups(conn, groups, utf8=self._utf8, numbers=self._numbers)
        self._raise_if_moved()

    def _raise_if_moved(self) -> None:
        problem = self._identity_problem()
        if problem is not None:
            raise self._fail(problem)

    # -- reads ---------------------------------------------------------------------------

    async def read_entries(
        self, account_id: str, after: Position | None, limit: int
    ) -> list[Entry]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._reader, self._read_entries, account_id, after, limit
        )

    def _read_entries(self, account_id: str, after: Position | None, limit: int) -> list[Entry]:
        return _read_entries(self._read_conn, account_id, after, limit)

    async def read_latest_entries(self, account_id: str, limit: int) -> list[Entry]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._reader, self._read_latest_entries, account_id, limit
        )

    def _read_latest_entries(self, account_id: str, limit: int) -> list[Entry]:
        conn = self._read_conn
        assert conn is not None, "store is not open"
        found = conn.execute(LATEST_ENTRIES, (account_id, limit)).fetchall()
        return [_entry_from_row(r) for r in reversed(found)]

    async def read_entry_position(self, account_id: str, sequence: int) -> Position | None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._reader, self._read_entry_position, account_id, sequence
        )

    def _read_entry_position(self, account_id: str, sequence: int) -> Position | None:
        conn = self._read_conn
        assert conn is not None, "store is not open"
        row = conn.execute(
            f"SELECT timestamp, rank FROM entries WHERE account = {_NUMBER_OF} AND sequence = ?",
            (account_id, sequence),
        ).fetchone()
        return None if row is None else (row[0], row[1])

    async def read_writes(
        self, account_id: str, after: Position | None, until_timestamp: int, limit: int
    ) -> list[WriteEntry]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._reader, _read_writes, self._read_conn, account_id, after, until_timestamp, limit
        )

    async def read_replay(
        self, account_id: str, timestamp: int, limit: int
    ) -> tuple[Checkpoint | None, list[WriteEntry]]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._reader, self._read_replay, account_id, timestamp, limit
        )

    def _read_replay(
        self, account_id: str, timestamp: int, limit: int
    ) -> tuple[Checkpoint | None, list[WriteEntry]]:
        conn = self._read_conn
        assert conn is not None, "store is not open"
        with _one_snapshot(conn):  # one snapshot for both statements
            checkpoint = _read_checkpoint(conn, account_id, timestamp)
            after = None if checkpoint is None else checkpoint.position
            return checkpoint, _read_writes(conn, account_id, after, timestamp, limit)

    async def read_checkpoint(self, account_id: str, timestamp: int) -> Checkpoint | None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._reader, _read_checkpoint, self._read_conn, account_id, timestamp
        )

    async def read_grant_entries(
        self, account_id: str, grant_ids: Sequence[int]
    ) -> dict[int, GrantEntry]:
        assert len(grant_ids) <= MAX_GRANT_IDS_PER_READ
        if not grant_ids:
            return {}
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._reader, self._read_grant_entries, account_id, list(grant_ids)
        )

    def _read_grant_entries(self, account_id: str, grant_ids: list[int]) -> dict[int, GrantEntry]:
        conn = self._read_conn
        assert conn is not None, "store is not open"
        marks = ", ".join("?" * len(grant_ids))
        rows = conn.execute(GRANT_ENTRIES.format(marks=marks), (account_id, *grant_ids)).fetchall()
        found = [_entry_from_row(r) for r in rows]
        return {e.grant_id: e for e in found if isinstance(e, GrantEntry)}

    async def read_void_entry(self, account_id: str, grant_id: int) -> VoidEntry | None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reader, self._read_void_entry, account_id, grant_id)

    def _read_void_entry(self, account_id: str, grant_id: int) -> VoidEntry | None:
        conn = self._read_conn
        assert conn is not None, "store is not open"
        row = conn.execute(VOID_ENTRY, (account_id, grant_id)).fetchone()
        entry = None if row is None else _entry_from_row(row)
        assert entry is None or isinstance(entry, VoidEntry)
        return entry

    async def read_grant_entry(self, account_id: str, grant_id: int) -> Entry | None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._reader, self._read_grant_entry, account_id, grant_id
        )

    def _read_grant_entry(self, account_id: str, grant_id: int) -> Entry | None:
        conn = self._read_conn
        assert conn is not None, "store is not open"
        row = conn.execute(GRANT_ENTRY, (account_id, grant_id)).fetchone()
        return None if row is None else _entry_from_row(row)

    async def read_totals_at(self, account_id: str, timestamp: int) -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reader, self._read_totals_at, account_id, timestamp)

    def _read_totals_at(self, account_id: str, timestamp: int) -> tuple[int, int]:
        """The last entry in effective order at or before ``timestamp``: one descent of the
        ``entries_by_position`` index."""
        conn = self._read_conn
        assert conn is not None, "store is not open"
        row = conn.execute(
            f"SELECT available, debt FROM entries WHERE account = {_NUMBER_OF} "
            "AND timestamp <= ? ORDER BY timestamp DESC, rank DESC LIMIT 1",
            (account_id, timestamp),
        ).fetchone()
        return (0, 0) if row is None else (row[0], row[1])

    async def read_accounts(self, prefix: str, after: str, limit: int) -> list[AccountRow]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reader, self._read_accounts, prefix, after, limit)

    def _read_accounts(self, prefix: str, after: str, limit: int) -> list[AccountRow]:
        return _read_accounts(self._read_conn, prefix, after, limit)

    async def read_idempotency_body(self, scope: str, key: str) -> bytes | None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reader, self._read_idempotency_body, scope, key)

    def _read_idempotency_body(self, scope: str, key: str) -> bytes | None:
        conn = self._read_conn
        assert conn is not None, "store is not open"
        row = conn.execute(
            "SELECT body FROM idempotency WHERE scope = ? AND key = ?", (scope, key)
        ).fetchone()
        return None if row is None else bytes(row[0])

    async def read_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reader, self._read_idempotency, scope, key)

    def _read_idempotency(self, scope: str, key: str) -> IdempotencyRecord | None:
        conn = self._read_conn
        assert conn is not None, "store is not open"
        row = conn.execute(
            f"SELECT {columns(IDEMPOTENCY_COLUMNS)} FROM idempotency WHERE scope = ? AND key = ?",
            (scope, key),
        ).fetchone()
        if row is None:
            return None
        scope, key, fingerprint, status_code, body, created_at_s = row
        return IdempotencyRecord(scope, key, fingerprint, status_code, bytes(body), created_at_s)

    async def read_account_state(self, account_id: str) -> LoadedAccount | None:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reader, self._read_account_state, account_id)

    def _read_account_state(self, account_id: str) -> LoadedAccount | None:
        return _read_account_state(self._read_conn, account_id)

    async def prune_idempotency(self, min_created_at_s: float) -> int:
        return await self._prune_in_slices(_PRUNE_IDEMPOTENCY, min_created_at_s)

    async def _prune_in_slices(self, statements: PruneStatements, min_created_at_s: float) -> int:
        """Delete a table's rows made before ``min_created_at_s``, PRUNE_ROWS_PER_SLICE rows
        looked at a time in key order, each slice a writer job of its own."""
        loop = asyncio.get_running_loop()
        deleted = 0
        after: tuple[str, str] | None = _BEFORE_EVERY_KEY
        while after is not None:
            count, after = await loop.run_in_executor(
                self._writer, self._delete_slice, statements, after, min_created_at_s
            )
            deleted += count
        return deleted

    def _delete_slice(
        self, statements: PruneStatements, after: tuple[str, str], min_created_at_s: float
    ) -> tuple[int, tuple[str, str] | None]:
        """In one transaction, the expired rows among the next slice after ``after``: how
        many, and the slice's last key (None: the slice reached the end of the table)."""
        conn = self._write_conn
        assert conn is not None, "store is not open"
        assert not conn.in_transaction, "the writer commits what it begins"
        last_of_slice, delete_to, delete_rest = statements
        conn.execute("BEGIN IMMEDIATE")
        try:
            last = conn.execute(last_of_slice, (*after, PRUNE_ROWS_PER_SLICE - 1)).fetchone()
            if last is None:
                count = conn.execute(delete_rest, (*after, min_created_at_s)).rowcount
            else:
                count = conn.execute(delete_to, (*after, *last, min_created_at_s)).rowcount
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return count, None if last is None else (str(last[0]), str(last[1]))

    async def read_event_ids(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], EventRecord]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reader, self._read_event_ids, list(keys))

    def _read_event_ids(self, keys: list[tuple[str, str]]) -> dict[tuple[str, str], EventRecord]:
        assert len(keys) <= MAX_EVENT_IDS_PER_READ
        conn = self._read_conn
        assert conn is not None, "store is not open"
        found: dict[tuple[str, str], EventRecord] = {}
        # One statement per bounded slice of pairs (SQLite's parameter limit is 32,766).
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            pairs = ", ".join("(?, ?)" for _ in part)
            query = (
                f"SELECT {columns(EVENT_ID_COLUMNS)} FROM event_ids "
                f"WHERE (account_id, event_id) IN (VALUES {pairs})"
            )
            for values in conn.execute(query, [v for pair in part for v in pair]):
                record = EventRecord(*values)
                found[(record.account_id, record.event_id)] = record
        return found

    async def prune_event_ids(self, min_created_at_s: float) -> int:
        return await self._prune_in_slices(_PRUNE_EVENT_IDS, min_created_at_s)


class SqliteSnapshot:
    """A ``SnapshotReader`` over a SQLite file: a read-only connection (``mode=ro``) holding
    one read transaction for its whole life. It takes no lock, so it reads a file a service
    is using (WAL lets both go on; the WAL cannot be checkpointed past the snapshot
    meanwhile, so it grows while a long check runs), and it refuses a file whose schema is
    not the one this release writes (``gpu-credits migrate`` first)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self.where = f"sqlite {path}"
        self._conn: sqlite3.Connection | None = None

    async def __aenter__(self) -> SqliteSnapshot:
        if not self._path.is_file():
            raise SnapshotError(f"no SQLite database at {self._path}")
        uri = f"{self._path.resolve().as_uri()}?mode=ro"
        try:
            conn = sqlite3.connect(uri, uri=True, isolation_level=None)
        except sqlite3.Error as exc:
            raise SnapshotError(f"cannot open {self._path}: {exc}") from None
        try:
            conn.execute("PRAGMA busy_timeout = 5000")
            status = migrations.status(_applied_versions(conn)[0], MIGRATIONS)
            migrations.require_current(status, str(self._path))
            conn.execute("BEGIN")
            conn.execute("SELECT count(*) FROM accounts").fetchone()  # the snapshot starts here
        except (sqlite3.Error, StorageError) as exc:  # not a database, an unknown schema
            conn.close()
            raise SnapshotError(f"cannot read {self._path}: {exc}") from None
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._conn is not None:
            self._conn.close()  # ends the read transaction: nothing was written
            self._conn = None

    async def read_accounts(self, prefix: str, after: str, limit: int) -> list[AccountRow]:
        return _read_accounts(self._conn, prefix, after, limit)

    async def read_account_state(self, account_id: str) -> LoadedAccount | None:
        return _read_account_state(self._conn, account_id)

    async def read_entries(
        self, account_id: str, after: Position | None, limit: int
    ) -> list[Entry]:
        return _read_entries(self._conn, account_id, after, limit)

    async def read_checkpoint(self, account_id: str, timestamp: int) -> Checkpoint | None:
        return _read_checkpoint(self._conn, account_id, timestamp)

    async def integrity_problems(self) -> list[str]:
        conn = self._conn
        assert conn is not None, "snapshot is not open"
        problems = [
            f"SQLite integrity_check: {message}"
            for (message,) in conn.execute("PRAGMA integrity_check(20)")
            if message != "ok"
        ]
        # Entries and live grants name their account by number (migration 7): an account
        # row without one (written by hand) has no entries; the service refuses to start.
        unnumbered = conn.execute(
            "SELECT account_id FROM accounts WHERE number IS NULL LIMIT 5"
        ).fetchall()
        if unnumbered:
            names = ", ".join(repr(account_id) for (account_id,) in unnumbered)
            problems.append(f"accounts rows without their number: {names}")
        # An orphan has no id left. NOT EXISTS, not NOT IN: a NULL number in the list
        # would make NOT IN never true, and hide every orphan.
        for table, account, of in (
            ("live_grants", "account", "number"),
            ("entries", "account", "number"),
            ("checkpoints", "account_id", "account_id"),
        ):
            orphans = conn.execute(
                f"SELECT DISTINCT {account} FROM {table} t WHERE NOT EXISTS "
                f"(SELECT 1 FROM accounts a WHERE a.{of} = t.{account}) LIMIT 5"
            ).fetchall()
            if orphans:
                names = ", ".join(
                    repr(name) if account == of else f"number {name}" for (name,) in orphans
                )
                problems.append(f"{table} rows of accounts that have no account row: {names}")
        return problems
