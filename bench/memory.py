"""Memory per account: 10^5 accounts holding one live grant each, in one ledger process.

Run: ``.venv/bin/python bench/memory.py [--accounts N]``.

Measured two ways, in a fresh process, as the difference before and after the accounts are
created through the ledger service (``Ledger.batch``, the real code path, sqlite storage so
the ledger history lives on disk as it does in production):
- tracemalloc: bytes Python allocated and still holds (exact, Python objects only);
- RSS from /proc/self/statm (what the operating system sees; includes allocator slack).
Target: at most 1 KiB per account.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tempfile
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Run as ``python bench/memory.py``, bench/ comes first on sys.path, where bench/http.py shadows
# the standard http package (the app needs it): move bench/ last (a stable sort).
sys.path.sort(key=lambda p: Path(p or ".").resolve() == Path(__file__).resolve().parent)
sys.path.insert(0, str(ROOT))

from app.main import embedded_ledger
from app.service.commands import GrantOp
from app.service.results import BatchOutcome
from app.storage.sqlite import SqliteStore

PAGE_BYTES = 4096
CHUNK = 10_000


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE_BYTES


async def measure(accounts: int, data_dir: Path, trace: bool) -> None:
    ledger = embedded_ledger(SqliteStore(data_dir / "memory-bench.sqlite3"))
    await ledger.start()
    gc.collect()
    if trace:
        tracemalloc.start()
    traced_before, _ = tracemalloc.get_traced_memory()
    rss_before = rss_bytes()
    for start in range(0, accounts, CHUNK):
        ops = [
            GrantOp(f"team-{i // 1000:03d}:job-{i:06d}", 100, 1, 10**12)
            for i in range(start, min(start + CHUNK, accounts))
        ]
        outcome = await ledger.batch(ops, False, None)
        assert isinstance(outcome, BatchOutcome)
        assert outcome.failed_index is None
        assert not any(isinstance(r, Exception) for r in outcome.results)
        del ops, outcome
    gc.collect()
    traced_after, _ = tracemalloc.get_traced_memory()
    rss_after = rss_bytes()
    tracemalloc.stop()
    if trace:
        traced = (traced_after - traced_before) / accounts
        print(f"tracemalloc: {traced:,.0f} bytes per account (target <= 1024)")
    else:
        rss = (rss_after - rss_before) / accounts
        print(f"accounts with one live grant: {accounts:,}")
        print(f"RSS:         {rss:,.0f} bytes per account (target <= 1024)")
    await ledger.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accounts", type=int, default=100_000)
    args = parser.parse_args()
    # Two runs: RSS without tracemalloc (whose bookkeeping would inflate it), then traced.
    for trace in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(measure(args.accounts, Path(tmp), trace))


if __name__ == "__main__":
    main()
