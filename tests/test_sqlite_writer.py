"""The SQLite writer (``app.storage.sqlite``): how a group of submissions reaches the file.

- A group goes as one statement (``_write_groups``: each table's rows as one JSON array, a
  TEMP trigger runs the tables' statements): what it stores must be exactly what binding
  each row would store, value and type, for any rows a group can hold (text with any
  character, NULLs, negative and 2^53-sized integers, fractional seconds, bytes), including
  upserts over earlier rows and deletes; a statement holds a bounded number of rows; a NUL
  is refused, never cut; a group that fails (a constraint, the disk full) leaves nothing of
  it written; the trigger's OR REPLACE still replaces; without BEGIN IMMEDIATE the statement
  still waits for another writer and not for readers.
- A group's submissions are concatenated into one statement (``_merged``) only where that
  ends as writing them one after the other does; an account going back between them is
  refused. A group cut into statements makes each one's JSON only as it runs.
- The writer thread starts on a submission while the loop is still busy, and ``close``
  writes every accepted submission, even behind a cancelled future."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import sqlite3
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain import Debt, LiveGrant
from app.storage import rows, sqlite
from app.storage.base import AccountRow, Change, StorageError
from app.storage.sqlite import SqliteStore

_BIG = 2**53 - 1
_ints = st.integers(-_BIG, _BIG)
_IDS = ("a", "b-1", "team:x")
_ids = st.sampled_from(_IDS)
# Every string but lone surrogates (which no UTF-8 text holds, and neither path can bind) and
# NUL, which no row holds (see ``_json_array``; tested below).
_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)
_json_object = st.builds(
    lambda k, v: rows._COMPACT.encode({k: v}) if k else "{}", _text, _text | _ints
)
_entry = st.tuples(
    _ids,
    st.integers(1, 6),
    st.sampled_from(["grant", "consumption", "expiration", "void"]),
    _ints,
    _ints,
    _ints,
    st.none() | _ints,
    _json_object,
    _ints,
    st.integers(0, 5),
)
_live = st.tuples(_ids, st.integers(1, 6), _ints, _ints, st.none() | _text, _ints)
_event = st.tuples(
    _ids,
    _text.filter(bool),
    _text,
    _ints,
    st.none() | _ints,
    st.floats(0, 4e9, allow_nan=False) | st.just(1_800_000_000.123456789),
)
_checkpoint = st.tuples(_ids, _ints, _ints, _json_object)
_key = st.tuples(
    st.sampled_from(["a", "/batch", "/batch/k1"]),
    st.sampled_from(["k-1", "k-2"]),
    _text,
    st.integers(100, 599),
    # Bodies: any bytes (bound as bytes), and UTF-8 text (as the service's answers are: it
    # goes as JSON text, made bytes again by the statement).
    st.binary(max_size=16) | st.text(max_size=16).map(str.encode),
    st.floats(0, 4e9, allow_nan=False),
)
_account = st.builds(
    AccountRow,
    _ids,
    _ints,
    _ints,
    _ints,
    _ints,
    st.just(()) | st.just((Debt("h100", 5), Debt(None, 3))),
    _ints,
    st.none() | _ints,
    _ints,
)


_Row = TypeVar("_Row", bound=tuple[Any, ...])


def _unique(values: list[_Row], width: int) -> list[_Row]:
    """The last row of each key (a group's rows are unique per key, see ``rows.encode``)."""
    return list({v[:width]: v for v in values}.values())


def _one_rows(draw: st.DrawFn) -> rows.Rows:
    group = rows.Rows()
    for account in draw(st.lists(_account, max_size=3)):
        group.accounts[account.account_id] = account
    group.entries = _unique(draw(st.lists(_entry, max_size=6)), 2)
    group.restated_entries = _unique(draw(st.lists(_entry, max_size=4)), 2)
    group.live_grant_upserts = _unique(draw(st.lists(_live, max_size=6)), 2)
    group.live_grant_deletes = _unique(
        draw(st.lists(st.tuples(_ids, st.integers(1, 6)), max_size=4)), 2
    )
    group.event_ids = _unique(draw(st.lists(_event, max_size=4)), 2)
    group.checkpoints = _unique(draw(st.lists(_checkpoint, max_size=3)), 3)
    group.idempotency = _unique(draw(st.lists(_key, max_size=3)), 2)
    return group


@st.composite
def _groups(draw: st.DrawFn) -> list[rows.Rows]:
    return [_one_rows(draw) for _ in range(2)]


@st.composite
def _submissions(draw: st.DrawFn) -> list[rows.Rows]:
    """Rows of 2 to 4 submissions to one group, as the service makes them: an entry is new
    once (a later submission may restate or delete it), and may be deleted."""
    made: list[rows.Rows] = []
    written: set[tuple[str, int]] = set()
    newest: dict[str, AccountRow] = {}
    for _ in range(draw(st.integers(2, 4))):
        group = _one_rows(draw)
        group.entries = [e for e in group.entries if (e[0], e[1]) not in written]
        group.entry_deletes = _unique(
            draw(st.lists(st.tuples(_ids, st.integers(1, 6)), max_size=3)), 2
        )
        written.update((e[0], e[1]) for e in (*group.entries, *group.restated_entries))
        for account_id, a in group.accounts.items():  # an account's row never goes back
            before = newest.get(account_id)
            if before is not None:
                a = dataclasses.replace(
                    a,
                    clock=max(a.clock, before.clock),
                    watermark=max(a.watermark, before.watermark),
                    next_grant_id=max(a.next_grant_id, before.next_grant_id),
                    next_sequence=max(a.next_sequence, before.next_sequence),
                )
                group.accounts[account_id] = a
            newest[account_id] = a
        made.append(group)
    return made


# Each connection's account numbers, kept across its groups as the store keeps them. Keyed
# by the connection itself (it cannot be weakly referenced): the pairs each hypothesis
# example opens drop theirs when they close; the few other tests' stay until the end.
_NUMBERS: dict[sqlite3.Connection, sqlite.AccountNumbers] = {}


def _numbers(conn: sqlite3.Connection) -> sqlite.AccountNumbers:
    """The connection's numbers, the test ids' given first in one order: the paths compared
    below make rows in different orders (a group's numbers are the order its ids come in)."""
    numbers = _NUMBERS.get(conn)
    if numbers is None:
        numbers = _NUMBERS[conn] = sqlite.AccountNumbers.read(conn)
        for account_id in _IDS:
            numbers.of(account_id)
    return numbers


def _write_groups(conn: sqlite3.Connection, groups: Sequence[rows.Rows], *, utf8: bool) -> None:
    sqlite._write_groups(conn, groups, utf8=utf8, numbers=_numbers(conn))


def _bound_row_by_row(conn: sqlite3.Connection, group: rows.Rows) -> None:
    """The same group written as before: one executemany of a VALUES statement per table
    (with the accounts numbered in the same order as the one statement numbers them)."""
    entries, restated_entries, entry_deletes, live_upserts, live_deletes, accounts = (
        sqlite.numbered_rows(group, _numbers(conn))
    )
    new_entries = {(e[0], e[1]) for e in entries}
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(sqlite._INSERT_IDEMPOTENCY, group.idempotency)
    conn.executemany(sqlite._INSERT_CHECKPOINT, group.checkpoints)
    conn.executemany(sqlite._INSERT_EVENT_ID, group.event_ids)
    # An entry new in this group cannot exist yet; a test group may reuse a key of an
    # earlier one, which the insert would refuse in both paths alike: drop it first.
    conn.executemany(sqlite._DELETE_ENTRY, sorted(new_entries))
    conn.executemany(sqlite._INSERT_ENTRY, entries)
    conn.executemany(sqlite._UPSERT_ENTRY, restated_entries)
    conn.executemany(sqlite._DELETE_ENTRY, entry_deletes)
    conn.executemany(sqlite._UPSERT_LIVE_GRANT, live_upserts)
    conn.executemany(sqlite._DELETE_LIVE_GRANT, live_deletes)
    conn.executemany(sqlite._UPSERT_ACCOUNT, accounts)
    conn.execute("COMMIT")


def _as_one_statement(conn: sqlite3.Connection, group: rows.Rows) -> None:
    # As _bound_row_by_row does (here in a transaction of its own: the end is the same).
    numbers = _numbers(conn)
    conn.executemany(
        sqlite._DELETE_ENTRY, sorted({(numbers.of(e[0]), e[1]) for e in group.entries})
    )
    _write_groups(conn, [group], utf8=True)


def _writer_connection(path: Path) -> sqlite3.Connection:
    conn = sqlite._connect(path)
    sqlite._migrate(conn)
    sqlite._install_group_writer(conn)
    return conn


@contextlib.contextmanager
def _reference_and_written(tmp_path: Path) -> Iterator[tuple[sqlite3.Connection, ...]]:
    """Two fresh databases: one for rows bound one by one (the reference), one for the
    writer's statements. A directory per hypothesis example: tmp_path is the test's."""
    directory = Path(tempfile.mkdtemp(dir=tmp_path))
    connections = tuple(_writer_connection(directory / f"{n}.sqlite3") for n in ("ref", "new"))
    try:
        yield connections
    finally:
        for conn in connections:
            conn.close()
            _NUMBERS.pop(conn, None)


def _tables(conn: sqlite3.Connection) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the tables a group writes, each value with its SQLite type."""
    found: dict[str, list[tuple[object, ...]]] = {}
    for table in ("entries", "live_grants", "accounts", "event_ids", "checkpoints", "idempotency"):
        names = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
        typed = ", ".join(f"{n}, typeof({n})" for n in names)
        found[table] = conn.execute(f"SELECT {typed} FROM {table} ORDER BY 1, 3, 5").fetchall()
    return found


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(groups=_groups(), rows_per_statement=st.sampled_from([1, 2, 50_000]))
def test_one_statement_per_group_stores_what_binding_each_row_stores(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    groups: list[rows.Rows],
    rows_per_statement: int,
) -> None:
    # A table's rows over several statements (1 or 2 rows each) as well as in one.
    monkeypatch.setattr(sqlite, "JSON_ROWS_PER_STATEMENT", rows_per_statement)
    with _reference_and_written(tmp_path) as (reference, written):
        for group in groups:
            _bound_row_by_row(reference, group)
            _as_one_statement(written, group)
            assert not written.in_transaction
        assert _tables(written) == _tables(reference)


def _group() -> rows.Rows:
    group = rows.Rows(
        entries=[("a", 1, "grant", 0, 5, 0, 1, '{"grant_id":1}', 1, 0)],
        live_grant_upserts=[("a", 1, 9, 5, None, 0)],
        live_grant_deletes=[("a", 2)],
        event_ids=[("a", "e-1", "f", 1, 1, 0.5)],
        idempotency=[("/batch", "k-1", "f", 200, '{"é":"\\""}'.encode(), 0.5)],
    )
    group.accounts["a"] = AccountRow("a", 0, 0, 2, 2)
    return group


def test_a_group_is_one_statement_and_its_own_transaction(tmp_path: Path) -> None:
    """No BEGIN, no COMMIT, no statement per table: one call writes and commits it all,
    an idempotency record's body too (UTF-8, as the service's answers are)."""
    # Every table a group's rows fill has a step in the trigger.
    filled = {f.name for f in dataclasses.fields(rows.Rows)}
    assert [column for column, _ in sqlite._GROUP_STEPS] == [
        "idempotency",
        "event_ids",
        "entries",
        "restated_entries",
        "entry_deletes",
        "checkpoints",
        "live_grant_upserts",
        "live_grant_deletes",
        "accounts",
    ]
    assert set(column for column, _ in sqlite._GROUP_STEPS) == filled
    conn = sqlite3.connect(tmp_path / "one.sqlite3", isolation_level=None, factory=_Counted)
    try:
        sqlite._migrate(conn)
        sqlite._install_group_writer(conn)
        _numbers(conn)  # read before the statements counted
        conn.calls.clear()
        _write_groups(conn, [_group()], utf8=True)
        assert conn.calls == [sqlite._WRITE_GROUP]
        assert not conn.in_transaction
        assert _count(conn, "entries") == _count(conn, "event_ids") == 1
        assert _count(conn, "live_grants") == _count(conn, "accounts") == 1
        body = conn.execute("SELECT body, typeof(body) FROM idempotency").fetchall()
        assert body == [('{"é":"\\""}'.encode(), "blob")]
        # A body that is not UTF-8 is bound as bytes, in a transaction of its own.
        group = _group()
        group.entries, group.event_ids = [], []
        group.idempotency = [("/batch", "k-2", "f", 200, b"\xff\x00", 0.5)]
        conn.calls.clear()
        _write_groups(conn, [group], utf8=True)
        assert conn.calls == [
            "BEGIN IMMEDIATE",
            sqlite._INSERT_IDEMPOTENCY,
            sqlite._WRITE_GROUP,
            "COMMIT",
        ]
        assert conn.execute("SELECT body FROM idempotency WHERE key = 'k-2'").fetchall() == [
            (b"\xff\x00",)
        ]
    finally:
        conn.close()


class _Counted(sqlite3.Connection):
    """A connection that records the statements it is asked to run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.calls.append(sql)
        return super().execute(sql, *args)

    def executemany(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.calls.append(sql)
        return super().executemany(sql, *args)


def _count(conn: sqlite3.Connection, table: str) -> int:
    (count,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert isinstance(count, int)
    return count


@pytest.mark.parametrize("utf8", [True, False])
def test_large_bodies_and_a_database_not_in_utf8_bind_the_bodies_as_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, utf8: bool
) -> None:
    """Escaping large bodies into JSON costs more than binding them; and ``CAST(... AS
    BLOB)`` gives the text in the database's encoding, so only UTF-8 text goes as text."""
    monkeypatch.setattr(sqlite, "KEY_TEXT_MAX_BYTES", 8)
    conn = sqlite3.connect(tmp_path / "keys.sqlite3", isolation_level=None, factory=_Counted)
    try:
        sqlite._migrate(conn)
        sqlite._install_group_writer(conn)
        for key, body in (("small", b"{}"), ("large", b'{"a":"123456789"}')):
            group = _account_group(0)
            group.idempotency = [("/batch", key, "f", 200, body, 0.5)]
            conn.calls.clear()
            _write_groups(conn, [group], utf8=utf8)
            as_text = utf8 and key == "small"
            assert (sqlite._INSERT_IDEMPOTENCY in conn.calls) is not as_text
            stored = conn.execute("SELECT body FROM idempotency WHERE key = ?", (key,))
            assert stored.fetchall() == [(body,)]
    finally:
        conn.close()


def test_a_group_that_fails_leaves_nothing_of_it_written(tmp_path: Path) -> None:
    """A new entry already there fails the entries' step, after the event ids' step ran:
    neither is left, nor a transaction open; the next group goes in."""
    conn = _writer_connection(tmp_path / "fail.sqlite3")
    try:
        _write_groups(conn, [_group()], utf8=True)
        again = _group()
        again.idempotency = [("/batch", "k-2", "f", 200, b"{}", 0.5)]
        again.event_ids = [("a", "e-2", "f", 2, None, 0.5)]
        again.accounts["a"] = AccountRow("a", 1, 0, 3, 3)
        with pytest.raises(sqlite3.IntegrityError):
            _write_groups(conn, [again], utf8=True)
        assert not conn.in_transaction
        assert conn.execute("SELECT event_id FROM event_ids").fetchall() == [("e-1",)]
        assert conn.execute("SELECT key FROM idempotency").fetchall() == [("k-1",)]
        assert conn.execute("SELECT clock FROM accounts").fetchall() == [(0,)]
        with_key = _group()
        with_key.entries = [("a", 2, "grant", 0, 5, 0, 2, '{"grant_id":2}', 2, 0)]
        with_key.idempotency = [("/batch", "k", "f", 200, b"\xff", 0.5)]  # bound as bytes
        with_key.entries.append(with_key.entries[0])  # the same key twice: fails
        with pytest.raises(sqlite3.IntegrityError):
            _write_groups(conn, [with_key], utf8=True)  # the path with a transaction
        assert not conn.in_transaction
        assert _count(conn, "idempotency") == 1
        assert _count(conn, "entries") == 1
        with_key.entries.pop()
        _write_groups(conn, [with_key], utf8=True)
        assert _count(conn, "idempotency") == 2
        assert _count(conn, "entries") == 2
    finally:
        conn.close()


def test_a_table_of_many_rows_is_cut_into_statements_of_bounded_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Table by table, in the trigger's order (every upsert before every delete still)."""
    monkeypatch.setattr(sqlite, "JSON_ROWS_PER_STATEMENT", 3)
    group = rows.Rows(
        live_grant_upserts=[("a", i, 9, 5, None, 0) for i in range(1, 5)],
        live_grant_deletes=[("a", i) for i in range(1, 8)],
    )
    group.accounts["a"] = AccountRow("a", 0, 0, 8, 1)
    columns = [column for column, _ in sqlite._GROUP_STEPS]
    cut = [
        [(columns[i], len(json.loads(text))) for i, text in enumerate(p) if text != "[]"]
        # Made one by one, as the writer takes them.
        for p in sqlite._group_parameters(sqlite._tables_of(group, [], sqlite.AccountNumbers({})))
    ]
    assert cut == [
        [("live_grant_upserts", 3)],
        [("live_grant_upserts", 1)],
        [("live_grant_deletes", 3)],
        [("live_grant_deletes", 3)],
        [("live_grant_deletes", 1)],
        [("accounts", 1)],
    ]


def test_a_group_cut_into_statements_makes_each_ones_json_as_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its memory is its rows and one slice's JSON (an account whose 10^6 live grants all
    expire at once is one submission of 10^6 deletes), not a copy of every slice."""
    monkeypatch.setattr(sqlite, "JSON_ROWS_PER_STATEMENT", 2)
    log: list[str] = []
    encode = sqlite._json_array

    def logged(values: Sequence[tuple[Any, ...]]) -> str:
        log.append("json")
        return encode(values)

    monkeypatch.setattr(sqlite, "_json_array", logged)
    conn = sqlite3.connect(tmp_path / "cut.sqlite3", isolation_level=None, factory=_Counted)
    try:
        sqlite._migrate(conn)
        sqlite._install_group_writer(conn)
        _numbers(conn)  # read before the statements logged
        group = rows.Rows(live_grant_upserts=[("a", i, 9, 5, None, 0) for i in range(1, 6)])
        group.accounts["a"] = AccountRow("a", 0, 0, 8, 1)
        conn.calls = log  # statements and encodings in one log, in the order they happen
        _write_groups(conn, [group], utf8=True)
        assert log == [
            "BEGIN IMMEDIATE",
            *["json", sqlite._WRITE_GROUP] * 4,  # live grants 2 + 2 + 1, then the account
            "COMMIT",
        ]
        assert _count(conn, "live_grants") == 5
    finally:
        conn.close()


def test_a_nul_character_in_a_row_is_refused_not_cut() -> None:
    """SQLite's JSON functions would end the string at it: the group fails instead (and the
    store with it, as for any failed commit). An escaped NUL inside a JSON column is fine."""
    escaped = rows._COMPACT.encode({"name": "a\x00b"})
    assert "\\u0000" in escaped
    fine = rows.Rows(entries=[("a", 1, "grant", 0, 5, 0, 1, escaped, 1, 0)])
    fine.accounts["a"] = AccountRow("a", 0, 0, 2, 2)
    assert "\\u0000" in sqlite._json_array(fine.entries)
    bad = rows.Rows(event_ids=[("a", "id\x00x", "f", 1, None, 0.0)])
    bad.accounts["a"] = AccountRow("a", 0, 0, 2, 2)
    with pytest.raises(ValueError, match="NUL"):
        list(sqlite._group_parameters(sqlite._tables_of(bad, [], sqlite.AccountNumbers({}))))


async def test_the_writer_starts_on_a_submission_while_the_loop_is_still_busy(
    tmp_path: Path,
) -> None:
    """The first submission to an idle writer is handed to it at once, not when a flusher
    task's turn comes: otherwise, under load, the writer would wait for every request ready
    on the loop, and the loop for the writer (they took turns). Here the loop stays blocked
    after submitting; the row must reach the file meanwhile."""
    path = tmp_path / "ledger.sqlite3"
    store = SqliteStore(path)
    await store.open(0.0)
    try:
        row = AccountRow("a", clock=0, debt=0, next_grant_id=2, next_sequence=1)
        committed = store.submit([Change(row, upserted_live_grants=[LiveGrant(1, 10, 1)])])
        _block_until_committed(path)  # the loop is blocked: no await in between
        await committed
    finally:
        await store.close()


def _block_until_committed(path: Path) -> None:
    """Wait, without giving the event loop a turn, until another connection sees the row."""
    reader = sqlite3.connect(path)
    try:
        deadline_s = time.monotonic() + 30
        while reader.execute("SELECT count(*) FROM accounts").fetchone() != (1,):
            assert time.monotonic() < deadline_s, "the writer did not start on its own"
            time.sleep(0.005)  # polling a condition, with a deadline
    finally:
        reader.close()


async def test_close_writes_every_accepted_submission_even_behind_a_cancelled_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """close() waits for the writer's own queue, not for a submission's future: a cancelled
    future is done before its group commits, and the groups behind it would have found the
    connection closed (one group per commit and per drain job, to have many)."""
    monkeypatch.setattr(sqlite, "MAX_CHANGES_PER_COMMIT", 1)
    monkeypatch.setattr(sqlite, "DRAIN_GROUPS_PER_JOB", 1)
    path = tmp_path / "ledger.sqlite3"
    store = SqliteStore(path)
    await store.open(0.0)
    futures = []
    for i in range(10):
        row = AccountRow(f"a{i}", clock=0, debt=0, next_grant_id=2, next_sequence=1)
        futures.append(store.submit([Change(row, upserted_live_grants=[LiveGrant(1, 10, 1)])]))
    futures[-1].cancel()
    await store.close()
    assert all(f.done() for f in futures)
    assert [f.exception() for f in futures[:-1]] == [None] * 9
    reader = sqlite3.connect(path)
    try:
        assert reader.execute("SELECT count(*) FROM accounts").fetchone() == (10,)
    finally:
        reader.close()


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(submissions=_submissions(), rows_per_statement=st.sampled_from([1, 2, 50_000]))
def test_a_group_writes_what_its_submissions_write_one_after_the_other(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    submissions: list[rows.Rows],
    rows_per_statement: int,
) -> None:
    """``_merged`` concatenates the submissions' rows into one statement, unless a key one
    deletes is written again by a later one: the database ends the same as when each
    submission's rows are bound row by row in turn (both cases are generated: keys are few),
    also when a table's rows are cut into several statements."""
    monkeypatch.setattr(sqlite, "JSON_ROWS_PER_STATEMENT", rows_per_statement)
    loop = asyncio.new_event_loop()
    try:
        queued = [sqlite._Submission(r, 1, loop.create_future()) for r in submissions]
        with _reference_and_written(tmp_path) as (reference, written):
            for part in submissions:
                _bound_row_by_row(reference, part)
            _write_groups(written, sqlite._merged(queued), utf8=True)
            assert _tables(written) == _tables(reference)
    finally:
        loop.close()


def test_a_live_grant_deleted_then_brought_back_keeps_the_group_in_submission_order() -> None:
    loop = asyncio.new_event_loop()
    try:
        used_up = rows.Rows(live_grant_deletes=[("a", 1)])
        back = rows.Rows(live_grant_upserts=[("a", 1, 9, 2, None, 0)])
        plain = rows.Rows(live_grant_upserts=[("a", 2, 9, 2, None, 0)])
        make = [sqlite._Submission(r, 1, loop.create_future()) for r in (used_up, back, plain)]
        assert sqlite._merged(make) == [used_up, back, plain]
        merged = sqlite._merged([make[0], make[2]])
        assert len(merged) == 1
        assert merged[0].live_grant_deletes == [("a", 1)]
        assert merged[0].live_grant_upserts == [("a", 2, 9, 2, None, 0)]
    finally:
        loop.close()


def test_a_group_whose_account_goes_back_between_submissions_is_refused() -> None:
    """Each submission is checked alone when it is made; across a group's submissions the
    writer checks that an account's clock, watermark and next ids never go back."""
    loop = asyncio.new_event_loop()
    try:
        rows_at = []
        for clock in (10, 3):
            r = rows.Rows()
            r.accounts["a"] = AccountRow("a", clock, 0, 2, 2, watermark=clock)
            rows_at.append(sqlite._Submission(r, 1, loop.create_future()))
        with pytest.raises(AssertionError, match="clock went back"):
            sqlite._merged(rows_at)
        assert len(sqlite._merged(rows_at[::-1])) == 1
    finally:
        loop.close()


def _account_group(clock: int) -> rows.Rows:
    group = rows.Rows()
    group.accounts["a"] = AccountRow("a", clock, 0, 2, 2)
    return group


@pytest.mark.parametrize(
    "body",
    [b"{}", b"\xff"],  # text: one statement; not UTF-8: bound as bytes, in a transaction
    ids=["one-statement", "transaction"],
)
def test_a_disk_full_in_the_middle_of_a_group_leaves_nothing_of_it(
    tmp_path: Path, body: bytes
) -> None:
    """SQLITE_FULL while the trigger's steps run (the file may not grow): nothing of the
    group stays, no transaction is left open, and once there is room the group goes in."""
    conn = _writer_connection(tmp_path / "full.sqlite3")
    try:
        _write_groups(conn, [_account_group(0)], utf8=True)
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        conn.execute(f"PRAGMA max_page_count = {pages + 3}")
        big = _account_group(7)
        big.event_ids = [("a", f"e{i}", "f" * 200, i, None, 0.5) for i in range(3000)]
        big.entries = [
            ("a", i, "grant", 0, 5, 0, 1, '{"grant_id":1}', i, 0) for i in range(1, 3000)
        ]
        big.idempotency = [("a", "k", "f", 200, body, 0.5)]
        with pytest.raises(sqlite3.OperationalError, match="full"):
            _write_groups(conn, [big], utf8=True)
        assert not conn.in_transaction
        assert _count(conn, "event_ids") == _count(conn, "entries") == 0
        assert _count(conn, "idempotency") == 0
        assert conn.execute("SELECT clock FROM accounts").fetchall() == [(0,)]
        conn.execute("PRAGMA max_page_count = 1000000")
        _write_groups(conn, [big], utf8=True)
        assert _count(conn, "entries") == 2999
    finally:
        conn.close()


def test_or_replace_inside_the_trigger_replaces_rows_of_an_earlier_group(tmp_path: Path) -> None:
    """The outer INSERT has no conflict clause, so the trigger's own OR REPLACE applies."""
    conn = _writer_connection(tmp_path / "replace.sqlite3")
    try:
        first = _account_group(0)
        first.event_ids = [("a", "e", "f1", 1, 1, 0.5)]
        first.checkpoints = [("a", 5, 1, '{"x":1}')]
        _write_groups(conn, [first], utf8=True)
        second = _account_group(1)
        second.event_ids = [("a", "e", "f2", 2, None, 1.5)]
        second.checkpoints = [("a", 5, 1, '{"x":2}')]
        _write_groups(conn, [second], utf8=True)
        assert conn.execute("SELECT * FROM event_ids").fetchall() == [
            ("a", "e", "f2", 2, None, 1.5)
        ]
        assert conn.execute("SELECT * FROM checkpoints").fetchall() == [("a", 5, 1, '{"x":2}')]
    finally:
        conn.close()


def test_the_one_statement_waits_for_another_writer_and_not_for_readers(tmp_path: Path) -> None:
    """No BEGIN IMMEDIATE any more: the statement still takes the write lock at its start
    (busy_timeout applies; no SQLITE_BUSY_SNAPSHOT although another connection commits
    while it waits), and a reader holding an older snapshot does not stop it."""
    path = tmp_path / "locks.sqlite3"
    conn = _writer_connection(path)
    reader = sqlite._connect(path)
    other = sqlite._connect(path)
    try:
        _write_groups(conn, [_account_group(0)], utf8=True)
        reader.execute("BEGIN")
        assert reader.execute("SELECT clock FROM accounts").fetchall() == [(0,)]
        _write_groups(conn, [_account_group(1)], utf8=True)
        assert reader.execute("SELECT clock FROM accounts").fetchall() == [(0,)]
        reader.execute("COMMIT")

        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO meta VALUES ('review', 'x')")
        waiting = threading.Event()
        done = threading.Event()

        def write() -> None:
            waiting.set()
            _write_groups(conn, [_account_group(2)], utf8=True)
            done.set()

        thread = threading.Thread(target=write)
        thread.start()
        assert waiting.wait(10)
        assert not done.wait(0.3)  # held by the other writer (a bound, not a sleep for luck)
        other.execute("COMMIT")
        thread.join(10)
        assert done.is_set()
        assert reader.execute("SELECT clock FROM accounts").fetchall() == [(2,)]
    finally:
        for c in (conn, reader, other):
            c.close()


def test_an_account_keeps_its_number_and_a_new_one_takes_the_next(tmp_path: Path) -> None:
    """Numbers are given once: a store opened again reads them back from the account rows
    and gives a new account the next one (the unique index would refuse a number twice);
    a number given in a group that failed is given again to the same account."""
    path = tmp_path / "numbers.sqlite3"
    conn = _writer_connection(path)
    try:
        first = _group()  # account "a" and its first entry
        sqlite._write_groups(conn, [first], utf8=True, numbers=sqlite.AccountNumbers({}))
        again = sqlite.AccountNumbers.read(conn)  # as a reopened store reads them
        failed = rows.Rows(entries=[("b", 1, "grant", 0, 5, 0, 1, "{}", 1, 0)] * 2)
        failed.accounts["b"] = AccountRow("b", 0, 0, 2, 2)
        with pytest.raises(sqlite3.IntegrityError):  # the same entry twice
            sqlite._write_groups(conn, [failed], utf8=True, numbers=again)
        failed.entries.pop()
        sqlite._write_groups(conn, [failed], utf8=True, numbers=again)
        assert conn.execute("SELECT account_id, number FROM accounts ORDER BY 1").fetchall() == [
            ("a", 1),
            ("b", 2),
        ]
        assert conn.execute("SELECT account, sequence FROM entries ORDER BY 1").fetchall() == [
            (1, 1),
            (2, 1),
        ]
        assert sqlite.AccountNumbers.read(conn).of("c") == 3
    finally:
        conn.close()


async def test_an_account_row_without_its_number_is_refused_at_startup(tmp_path: Path) -> None:
    """A row written by hand without ``number`` has no entries the store could find: the
    store refuses to start, naming the account (an error, not an assert -O would drop)."""
    path = tmp_path / "unnumbered.sqlite3"
    conn = _writer_connection(path)
    conn.execute(
        "INSERT INTO accounts (account_id, clock, debt, next_grant_id, next_sequence) "
        "VALUES ('by-hand', 0, 0, 1, 1)"
    )
    conn.close()
    store = SqliteStore(path)
    try:
        with pytest.raises(StorageError, match=r"without their number.*by-hand"):
            await store.open(0.0)
    finally:
        await store.close()
