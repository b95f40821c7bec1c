"""The ceiling of the batch path: the least work a durable batch can do, measured in process.

Run: ``./scripts/bench ceiling`` (or ``.venv/bin/python bench/ceiling.py [--ops N]``).
``bench/http.py`` runs it in the same invocation as its batch measurement and reports the
batch figure as a ratio to it (issue 14: at least 0.6).

What the ceiling does per batch, on the same operations as ``bench/http.py``'s batches
(grants and consumptions alternating over 1,000 accounts), and nothing more:

1. decode the JSON body (``json.loads``);
2. apply each operation to a per-account tracker of plain heaps (earliest expiry first,
   debt when credits run short), building its answer as a dict;
3. write one row per operation with one ``executemany`` and one COMMIT, on a SQLite file in
   WAL mode with ``synchronous=FULL`` (an fsync per commit, as the service does);
4. encode the answers (``json.dumps``).

It checks nothing (no validation, no limits, no idempotency, no as-of index, no live grants or
account rows kept on disk): it is the floor any batch path pays in CPython and SQLite on this
machine, not a design to copy. ``measure`` gives the best of ``--rounds`` rounds on a fresh
file: the machine is shared and noisy, and the best round is the one least disturbed; but the
file stays tiny. ``measure_grown`` gives the same work sustained on a file grown as a
server's (each batch touches all 1,000 accounts and the table is keyed by account, so the
pages a commit writes grow with the file): ``bench/http.py`` reports its batches against both.

``--decompose`` (``decompose()``) breaks that floor down by what this product must do per
operation, each step measured on the same operations in the same run:

- ``floor``: the ceiling above, unchanged (plain heaps, one 5-column table);
- ``tracker``: the same, each operation applied by the real domain core
  (``app.domain.tracker.GPUCreditTracker``: ``apply_grant`` / ``apply_consume``), the answers
  built from its results;
- ``schema``: ``tracker``, writing what the service's SQLite store writes per batch, into a
  file created by the service's own migrations (``app.storage.sqlite._migrate``) and opened
  with its connection and writer pragmas: one ``entries`` row per operation with its real
  columns (``details`` as compact JSON), the live grants upserted and deleted, one
  ``accounts`` row per account touched, with the store's own row-by-row statements (one
  ``executemany`` each: the cheapest with no other thread; the service writes JSON arrays
  instead, which cost SQLite more per row but let its writer run beside the event loop);
  one COMMIT.

Each variant writes ``--grown`` batches into a fresh file (after the warm-up batch that
creates the accounts) and reports two figures: the best of its first ``--rounds`` batches,
as the ceiling above counts on a file that is still small, and the median of its last
``--rounds`` batches, on a file grown as the server's grows during ``bench/http.py``.
None of them validates input, checks limits or idempotency, or writes checkpoints.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

# Run as a script, bench/ is first on the import path and holds http.py: drop it (or "import
# http" would find it) and put the repository there instead, for ``app``.
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
if str(HERE.parent) not in sys.path:
    sys.path.insert(0, str(HERE.parent))

from app.domain.tracker import GPUCreditTracker
from app.storage.rows import EntryValues, LiveGrantValues, debts_text
from app.storage.sqlite import (
    _DELETE_LIVE_GRANT,
    _INSERT_ENTRY,
    _UPSERT_ACCOUNT,
    _UPSERT_LIVE_GRANT,
    WAL_AUTOCHECKPOINT_PAGES,
    WRITE_CACHE_KIB,
    AccountNumbers,
    _connect,
    _migrate,
)

ACCOUNTS = 1000
FAR_EXPIRY = 10**15


def batch_operations(count: int) -> list[dict[str, Any]]:
    """The benchmark's batch: grants (even indices) and consumptions (odd), account i % 1000."""
    ops: list[dict[str, Any]] = []
    for i in range(count):
        account = f"acct-{i % ACCOUNTS}"
        if i % 2 == 0:
            ops.append(
                {
                    "op": "grant",
                    "account_id": account,
                    "amount": 5,
                    "timestamp": 1,
                    "expiry": FAR_EXPIRY,
                }
            )
        else:
            ops.append({"op": "consume", "account_id": account, "amount": 3, "timestamp": 1})
    return ops


def batch_body(count: int) -> bytes:
    return json.dumps({"operations": batch_operations(count)}, separators=(",", ":")).encode()


@dataclass(slots=True)
class _Account:
    heap: list[list[int]] = field(default_factory=list)  # [expiry, grant_id, remaining]
    available: int = 0
    debt: int = 0
    next_grant_id: int = 1
    next_sequence: int = 1


class Ceiling:
    """A SQLite file and the accounts' trackers, kept across batches like a server's."""

    def __init__(self, path: Path, service_pragmas: bool = False) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        if service_pragmas:  # the service writer's page cache and checkpoint interval
            self._conn.execute(f"PRAGMA cache_size = -{WRITE_CACHE_KIB}")
            self._conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
        self._conn.execute(
            "CREATE TABLE entries (account_id TEXT NOT NULL, sequence INTEGER NOT NULL, "
            "kind TEXT NOT NULL, timestamp INTEGER NOT NULL, amount INTEGER NOT NULL, "
            "PRIMARY KEY (account_id, sequence)) WITHOUT ROWID"
        )
        self._accounts: dict[str, _Account] = {}

    def close(self) -> None:
        self._conn.close()

    def _commit(self, rows: list[tuple[str, int, str, int, int]], answers: list[Any]) -> bytes:
        """One row per operation in one transaction (fsync), then the answers encoded."""
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?)", rows)
        self._conn.execute("COMMIT")
        return json.dumps({"results": answers}, separators=(",", ":")).encode()

    def batch(self, body: bytes) -> bytes:
        operations = json.loads(body)["operations"]
        rows: list[tuple[str, int, str, int, int]] = []
        answers: list[dict[str, Any]] = []
        accounts = self._accounts
        for op in operations:
            account_id = op["account_id"]
            account = accounts.get(account_id)
            if account is None:
                account = accounts[account_id] = _Account()
            amount = op["amount"]
            if op["op"] == "grant":
                settled = min(account.debt, amount)
                account.debt -= settled
                grant_id = account.next_grant_id
                account.next_grant_id += 1
                if amount > settled:
                    heapq.heappush(account.heap, [op["expiry"], grant_id, amount - settled])
                    account.available += amount - settled
                answer = {"grant_id": grant_id, "settled_debt": settled}
            else:
                left = amount
                allocation = []
                heap = account.heap
                while left and heap:
                    top = heap[0]
                    take = min(left, top[2])
                    allocation.append({"grant_id": top[1], "amount": take})
                    top[2] -= take
                    left -= take
                    if not top[2]:
                        heapq.heappop(heap)
                account.available -= amount - left
                account.debt += left
                answer = {"consumed": amount - left, "allocation": allocation}
            sequence = account.next_sequence
            account.next_sequence += 1
            answer["available"] = account.available
            answer["debt"] = account.debt
            rows.append((account_id, sequence, op["op"], op["timestamp"], amount))
            answers.append({"status": 200, "body": answer})
        return self._commit(rows, answers)


def measure(ops: int = 1000, rounds: int = 30) -> float:
    """Operations per second of the ceiling: the best of ``rounds`` batches of ``ops``."""
    body = batch_body(ops)
    with tempfile.TemporaryDirectory() as tmp:
        ceiling = Ceiling(Path(tmp) / "ceiling.sqlite")
        try:
            # The accounts exist first, as bench/http.py's warm-up creates them.
            ceiling.batch(batch_body(2 * ACCOUNTS))
            best_s = float("inf")
            for _ in range(rounds):
                started = time.perf_counter()
                ceiling.batch(body)
                best_s = min(best_s, time.perf_counter() - started)
        finally:
            ceiling.close()
    return ops / best_s


def measure_grown(
    ops: int, entries_before: int, entries: int, make: Callable[[Path], _Variant] | None = None
) -> float:
    """Operations per second of the ceiling, sustained, on a file grown as a server's: first
    ``entries_before`` operations are written (not timed), then ``entries`` more are timed
    as a whole (every batch, no best-of), with the service writer's pragmas. ``make``: another
    variant of the decomposition below instead (``SchemaCeiling``: the service's own rows
    and schema), grown and timed the same way.

    The best-of ``measure`` keeps its table tiny, while the server it is compared with has
    a file that holds every operation of the run so far; each batch touches every one of
    1,000 accounts, so the pages a commit writes grow with the file (see ``--decompose``).
    ``bench/http.py`` passes what the server's file held before and wrote during its batch
    measurement."""
    body = batch_body(ops)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ceiling.sqlite"
        ceiling = Ceiling(path, service_pragmas=True) if make is None else make(path)
        try:
            ceiling.batch(batch_body(2 * ACCOUNTS))
            for _ in range(entries_before // ops):
                ceiling.batch(body)
            batches = max(1, entries // ops)
            started = time.perf_counter()
            for _ in range(batches):
                ceiling.batch(body)
            elapsed_s = time.perf_counter() - started
        finally:
            ceiling.close()
    return batches * ops / elapsed_s


# -- the decomposition (--decompose) ---------------------------------------------------------


@dataclass(slots=True)
class _Ledger:
    """One account of the ``tracker`` and ``schema`` variants: the real tracker, and the
    sequence of its next ledger entry."""

    tracker: GPUCreditTracker = field(default_factory=GPUCreditTracker)
    next_sequence: int = 1


class TrackerCeiling(Ceiling):
    """``tracker``: the floor's file and rows, each operation applied by ``GPUCreditTracker``."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._ledgers: dict[str, _Ledger] = {}

    def batch(self, body: bytes) -> bytes:
        operations = json.loads(body)["operations"]
        rows: list[tuple[str, int, str, int, int]] = []
        answers: list[dict[str, Any]] = []
        ledgers = self._ledgers
        for op in operations:
            account_id = op["account_id"]
            ledger = ledgers.get(account_id)
            if ledger is None:
                ledger = ledgers[account_id] = _Ledger()
            amount = op["amount"]
            timestamp = op["timestamp"]
            answer: dict[str, Any]
            if op["op"] == "grant":
                g = ledger.tracker.apply_grant(amount, timestamp, op["expiry"])
                answer = {
                    "grant_id": g.grant_id,
                    "settled_debt": g.settled_debt,
                    "available": g.available,
                    "debt": g.debt,
                }
            else:
                c = ledger.tracker.apply_consume(amount, timestamp)
                answer = {
                    "consumed": c.consumed,
                    "allocation": [
                        {"grant_id": a.grant_id, "amount": a.amount} for a in c.allocation
                    ],
                    "available": c.available,
                    "debt": c.debt,
                }
            sequence = ledger.next_sequence
            ledger.next_sequence += 1
            rows.append((account_id, sequence, op["op"], timestamp, amount))
            answers.append({"status": 200, "body": answer})
        return self._commit(rows, answers)


class SchemaCeiling:
    """``schema``: ``tracker``, writing the service's rows into the service's schema.

    The file is made by the service's migrations and opened as its SQLite writer opens it
    (``_connect``: WAL, ``synchronous=FULL``; its page cache and checkpoint interval). Per
    batch, with the store's own statements, one ``executemany`` each: the entries (one per
    operation, every column: ``details`` in the compact JSON the store writes, the rank of a
    grant or consumption being its sequence), the live grants upserted, those deleted, and one
    ``accounts`` row per account touched; one COMMIT. Entries and live grants name their
    account by its number, and an account's row holds it (``AccountNumbers``), as the store
    writes them."""

    def __init__(self, path: Path) -> None:
        self._conn = _connect(path)
        self._conn.execute(f"PRAGMA cache_size = -{WRITE_CACHE_KIB}")
        self._conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
        _migrate(self._conn)
        self._numbers = AccountNumbers.read(self._conn)
        self._ledgers: dict[str, _Ledger] = {}

    def close(self) -> None:
        self._conn.close()

    def batch(self, body: bytes) -> bytes:
        operations = json.loads(body)["operations"]
        entries: list[EntryValues] = []
        # The end state of each live grant the batch touched (None: deleted), as the store's
        # rows.encode keeps it: a live grant, once gone, never comes back.
        live: dict[tuple[str, int], LiveGrantValues | None] = {}
        touched: dict[str, _Ledger] = {}
        answers: list[dict[str, Any]] = []
        ledgers = self._ledgers
        for op in operations:
            account_id = op["account_id"]
            ledger = ledgers.get(account_id)
            if ledger is None:
                ledger = ledgers[account_id] = _Ledger()
            touched[account_id] = ledger
            amount = op["amount"]
            timestamp = op["timestamp"]
            sequence = ledger.next_sequence
            ledger.next_sequence += 1
            answer: dict[str, Any]
            if op["op"] == "grant":
                expiry = op["expiry"]
                g = ledger.tracker.apply_grant(amount, timestamp, expiry)
                # The benchmark's grants never expire (FAR_EXPIRY): no expiration entries to
                # write, which a floor meeting expirations would have to add.
                assert not g.expired
                grant_id = g.grant_id
                if g.retained:
                    live[(account_id, grant_id)] = (
                        account_id,
                        grant_id,
                        expiry,
                        g.retained,
                        None,
                        timestamp,
                    )
                entries.append(
                    (
                        account_id,
                        sequence,
                        "grant",
                        timestamp,
                        g.available,
                        g.debt,
                        grant_id,
                        f'{{"grant_id":{grant_id:d},"amount":{amount:d},"expiry":{expiry:d},'
                        f'"settled_debt":{g.settled_debt:d},"retained":{g.retained:d}}}',
                        sequence,
                        0,
                    )
                )
                answer = {
                    "grant_id": grant_id,
                    "settled_debt": g.settled_debt,
                    "available": g.available,
                    "debt": g.debt,
                }
            else:
                c = ledger.tracker.apply_consume(amount, timestamp)
                assert not c.expired
                for a, remaining in zip(c.allocation, c.remaining, strict=True):
                    key = (account_id, a.grant_id)
                    if not remaining:
                        live[key] = None
                        continue
                    before = live.get(key)
                    # The upsert changes only ``remaining`` of a row already written: the
                    # other values matter only for a grant made in this batch (kept here).
                    live[key] = (
                        (account_id, a.grant_id, a.expiry, remaining, None, 0)
                        if before is None
                        else (*before[:3], remaining, *before[4:])
                    )
                parts = ",".join(
                    f'{{"grant_id":{a.grant_id:d},"expiry":{a.expiry:d},"amount":{a.amount:d}}}'
                    for a in c.allocation
                )
                entries.append(
                    (
                        account_id,
                        sequence,
                        "consumption",
                        timestamp,
                        c.available,
                        c.debt,
                        None,
                        f'{{"amount":{amount:d},"consumed":{c.consumed:d},'
                        f'"debt_added":{c.debt_added:d},"allocation":[{parts}]}}',
                        sequence,
                        0,
                    )
                )
                answer = {
                    "consumed": c.consumed,
                    "allocation": [
                        {"grant_id": a.grant_id, "amount": a.amount} for a in c.allocation
                    ],
                    "available": c.available,
                    "debt": c.debt,
                }
            answers.append({"status": 200, "body": answer})
        upserts = [values for values in live.values() if values is not None]
        deletes = [key for key, values in live.items() if values is None]
        accounts = []
        for account_id, ledger in touched.items():
            tracker = ledger.tracker
            debts = tracker.debts()
            accounts.append(
                (
                    account_id,
                    tracker.clock,
                    tracker.debt,
                    tracker.next_grant_id,
                    ledger.next_sequence,
                    # NULL when there is none or all of it is of no class, as the store writes.
                    None if all(d.resource is None for d in debts) else debts_text(debts),
                    tracker.clock,  # watermark (timestamps never go back here)
                    None,
                    # Writes folded since the last checkpoint: all of them, as none is written.
                    ledger.next_sequence - 1,
                )
            )
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        number_of = self._numbers.of
        conn.executemany(_INSERT_ENTRY, [(number_of(e[0]), *e[1:]) for e in entries])
        if upserts:
            conn.executemany(_UPSERT_LIVE_GRANT, [(number_of(g[0]), *g[1:]) for g in upserts])
        if deletes:
            conn.executemany(_DELETE_LIVE_GRANT, [(number_of(a), g) for a, g in deletes])
        conn.executemany(_UPSERT_ACCOUNT, [(*a, number_of(a[0])) for a in accounts])
        conn.execute("COMMIT")
        return json.dumps({"results": answers}, separators=(",", ":")).encode()


class _Variant(Protocol):
    def batch(self, body: bytes) -> bytes: ...

    def close(self) -> None: ...


VARIANTS: dict[str, Callable[[Path], _Variant]] = {
    "floor": Ceiling,
    "tracker": TrackerCeiling,
    "schema": SchemaCeiling,
}


@dataclass(frozen=True, slots=True)
class Figure:
    """One variant's figures, in microseconds per operation."""

    variant: str
    best_us: float  # best of the first ``rounds`` batches (a small file)
    grown_us: float  # median of the last ``rounds`` of ``grown`` batches (a grown file)
    grown_cpu_us: float  # this process's CPU time, median over the same batches
    file_mib: float  # the database and its WAL after the last batch


def _run(name: str, make: Callable[[Path], _Variant], ops: int, rounds: int, grown: int) -> Figure:
    body = batch_body(ops)
    times: list[float] = []
    cpu: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        variant = make(Path(tmp) / "ceiling.sqlite")
        try:
            variant.batch(batch_body(2 * ACCOUNTS))  # the accounts exist first, as in measure()
            for _ in range(grown):
                started, started_cpu = time.perf_counter(), time.process_time()
                variant.batch(body)
                times.append(time.perf_counter() - started)
                cpu.append(time.process_time() - started_cpu)
        finally:
            variant.close()
        size = sum(f.stat().st_size for f in Path(tmp).iterdir())
    return Figure(
        name,
        min(times[:rounds]) / ops * 1e6,
        statistics.median(times[-rounds:]) / ops * 1e6,
        statistics.median(cpu[-rounds:]) / ops * 1e6,
        size / 2**20,
    )


def decompose(ops: int = 1000, rounds: int = 30, grown: int = 300) -> list[Figure]:
    """Each variant on a fresh file, ``grown`` batches of ``ops`` after the warm-up batch:
    the best of the first ``rounds`` and the median of the last ``rounds``."""
    assert grown >= rounds >= 1
    return [_run(name, make, ops, rounds, grown) for name, make in VARIANTS.items()]


def print_decomposition(figures: list[Figure], ops: int, rounds: int, grown: int) -> None:
    print(
        f"the batch path's floor, step by step, us per operation ({ops:,} ops a batch; best: "
        f"of the first {rounds} batches; grown: median of the last {rounds} of {grown})"
    )
    print(
        f"{'variant':<8} {'best':>6} {'adds':>6} {'grown':>6} {'adds':>6} "
        f"{'grown CPU':>9} {'file MiB':>8}"
    )
    previous: Figure | None = None
    for f in figures:
        adds_best = "" if previous is None else f"{f.best_us - previous.best_us:+.1f}"
        adds_grown = "" if previous is None else f"{f.grown_us - previous.grown_us:+.1f}"
        print(
            f"{f.variant:<8} {f.best_us:>6.1f} {adds_best:>6} {f.grown_us:>6.1f} "
            f"{adds_grown:>6} {f.grown_cpu_us:>9.1f} {f.file_mib:>8.1f}"
        )
        previous = f


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ops", type=int, default=1000, help="operations per batch")
    parser.add_argument("--rounds", type=int, default=30, help="batches; the best counts")
    parser.add_argument(
        "--decompose",
        action="store_true",
        help="also the floor step by step: real tracker, then the service's schema and rows",
    )
    parser.add_argument(
        "--grown", type=int, default=300, help="with --decompose: batches each variant writes"
    )
    args = parser.parse_args()
    per_s = measure(args.ops, args.rounds)
    print(f"ceiling, {args.ops:,} ops a batch: {per_s:,.0f} ops/s ({1e6 / per_s:.1f} us/op)")
    if args.decompose:
        figures = decompose(args.ops, args.rounds, args.grown)
        print_decomposition(figures, args.ops, args.rounds, args.grown)


if __name__ == "__main__":
    main()
