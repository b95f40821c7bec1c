"""As-of read benchmark (issue 12, item 3): the cost of a balance read at a time before the
account's clock, on an account with 10^3 ledger entries and on one with 10^6, in the same
run, on a real SQLite file. The ratio (big / small) must be at most 2: the cost does not grow
with the account's history.

Run: ``python bench/asof.py`` (``--quick``: 10^5 entries instead of 10^6).

Both accounts are written through the service's own journal (``app.service.journal``, the
timeline and the storage rows the service writes; no HTTP, which would only make building
10^6 entries slow): grants of three kinds (unrestricted, one GPU class, two classes) with
short lives and consumptions of a class or of none, so the account holds a few hundred live
grants and the checkpoints the timeline stores come every ``max(256, live grants)`` writes.
Then, for each account, ``--reads`` reads at random times in its history, best of
``--repeat`` rounds, read through ``app.service.history.as_of``, the code the service runs:

- totals (no ``resource``): the last entry at or before the time, one index descent;
- one class (``resource``): the nearest checkpoint and the writes after it, replayed.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.service import journal
from app.service.history import as_of
from app.service.journal import AccountState, AsOfRead
from app.service.limits import Limits
from app.storage.base import Change
from app.storage.sqlite import SqliteStore

CLASSES = ["h100", "a100", "l4", "b200"]
GROUP = 5_000  # changes submitted per commit while building


def _write(account: AccountState, rng: random.Random, timestamp: int) -> Change:
    if rng.random() < 0.4:
        kind = rng.randrange(3)
        resources = None if kind == 0 else rng.sample(CLASSES, kind)
        expiry = timestamp + rng.randint(50, 800)
        change, _ = journal.grant(account, rng.randint(50, 200), timestamp, expiry, None,
                                  resources=resources)  # fmt: skip
        return change
    resource = rng.choice([None, *CLASSES])
    change, _ = journal.consume(account, rng.randint(10, 120), timestamp, resource)
    return change


async def build(store: SqliteStore, account_id: str, writes: int, seed: int) -> AccountState:
    rng = random.Random(seed)
    account = journal.new_account(account_id, Limits())
    pending: list[Change] = []
    for timestamp in range(writes):
        pending.append(_write(account, rng, timestamp))
        if len(pending) >= GROUP:
            await store.submit(pending)
            pending = []
    if pending:
        await store.submit(pending)
    return account


async def time_reads(
    store: SqliteStore, account: AccountState, resource: str | None, reads: int, seed: int
) -> float:
    """Seconds per read, over ``reads`` reads at random times in the account's history."""
    rng = random.Random(seed)
    clock = account.timeline.clock
    times = [rng.randrange(clock) for _ in range(reads)]
    start = time.perf_counter()
    for t in times:
        await as_of(store, AsOfRead(account.account_id, t, resource, account.timeline.watermark))
    return (time.perf_counter() - start) / reads


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10^5 entries, fewer reads")
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    small_n, big_n = 1_000, (100_000 if args.quick else 1_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "asof.sqlite3")
        await store.open(0.0)
        try:
            started = time.perf_counter()
            small = await build(store, "small", small_n, 1)
            big = await build(store, "big", big_n, 2)
            entries = {a.account_id: a.next_sequence - 1 for a in (small, big)}
            print(
                f"built {entries['small']:,} and {entries['big']:,} entries "
                f"({small_n:,} and {big_n:,} writes) in {time.perf_counter() - started:.0f} s; "
                f"live grants {small.tracker.live_grant_count} / {big.tracker.live_grant_count}"
            )
            for resource in (None, "h100"):
                best = {"small": float("inf"), "big": float("inf")}
                for round_ in range(args.repeat):  # interleaved: noise hits both alike
                    for account in (small, big):
                        cost = await time_reads(store, account, resource, args.reads, round_)
                        best[account.account_id] = min(best[account.account_id], cost)
                what = "totals" if resource is None else f"class {resource}"
                print(
                    f"as-of read, {what:<11}: {entries['small']:>9,} entries "
                    f"{best['small'] * 1e6:8.0f} us, {entries['big']:>9,} entries "
                    f"{best['big'] * 1e6:8.0f} us, ratio {best['big'] / best['small']:.2f} "
                    "(target <= 2)"
                )
        finally:
            await store.close()


if __name__ == "__main__":
    asyncio.run(main())
