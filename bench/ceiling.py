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
machine, not a design to copy. Its figure is the best of ``--rounds`` rounds: the machine is
shared and noisy, and the best round is the one least disturbed.
"""

from __future__ import annotations

import argparse
import heapq
import json
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

    def __init__(self, path: Path) -> None:
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode = WAL")
        self._conn.execute("PRAGMA synchronous = FULL")
        self._conn.execute(
            "CREATE TABLE entries (account_id TEXT NOT NULL, sequence INTEGER NOT NULL, "
            "kind TEXT NOT NULL, timestamp INTEGER NOT NULL, amount INTEGER NOT NULL, "
            "PRIMARY KEY (account_id, sequence)) WITHOUT ROWID"
        )
        self._accounts: dict[str, _Account] = {}

    def close(self) -> None:
        self._conn.close()

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
        self._conn.execute("BEGIN IMMEDIATE")
        self._conn.executemany("INSERT INTO entries VALUES (?, ?, ?, ?, ?)", rows)
        self._conn.execute("COMMIT")
        return json.dumps({"results": answers}, separators=(",", ":")).encode()


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ops", type=int, default=1000, help="operations per batch")
    parser.add_argument("--rounds", type=int, default=30, help="batches; the best counts")
    args = parser.parse_args()
    per_s = measure(args.ops, args.rounds)
    print(f"ceiling, {args.ops:,} ops a batch: {per_s:,.0f} ops/s ({1e6 / per_s:.1f} us/op)")


if __name__ == "__main__":
    main()
