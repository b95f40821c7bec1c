"""Restart benchmark: how long a real ``gpu-credits serve`` takes to come back with 10^6
recorded operations (issue 3, item 3; target: 10 s or less).

Run: ``python bench/restart.py`` (``--ops N``, ``--accounts N``, ``--quick`` for a smoke run).

1. Build: drive the real ``app.service.ledger.Ledger`` on the real
   ``app.storage.sqlite.SqliteStore``
   in this process, so the database is exactly what the service writes. Every tick submits one
   operation per account concurrently (``asyncio.gather``), so the store's group commit packs a
   tick into a few transactions; per account, ticks run in order with rising timestamps.
   Grants outnumber consumptions and expire far ahead, so every account keeps live grants;
   some grants expire on the way (expiration entries) and some consumptions run into debt.
   A fraction of the operations carries an ``Idempotency-Key`` (``--key-fraction``): keys are
   kept 24 hours, so a restart soon after the build has to load all of them.
2. Measure: start the real server process (``bench/_procs.py``, the
   console script, until ``/healthz`` is 200) on that data directory ``--runs`` times, check a
   sample of accounts answers what the build left, and stop it gracefully each time. Also
   time ``SqliteStore.open`` in process: the part of the start that grows with the data.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# Run as ``python bench/<name>.py``, bench/ comes first on sys.path, where a module named like a
# standard one (bench/http.py) shadows it (httpx needs http): move bench/ last (a stable sort),
# and import the project from the repository root.
sys.path.sort(key=lambda p: Path(p or ".").resolve() == Path(__file__).resolve().parent)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from app.main import embedded_ledger
from app.service.idempotency import Idempotency, fingerprint
from app.service.ledger import Replay
from app.service.limits import Limits
from app.service.results import ConsumptionReceipt, GrantReceipt
from app.settings import Settings
from app.storage.sqlite import SqliteStore
from bench._procs import Server

IDEMPOTENCY_TTL_S = 24 * 3600.0
TARGET_STARTUP_S = 10.0


@dataclass(frozen=True, slots=True)
class BuildStats:
    ops: int
    accounts: int
    seconds: float


def account_id(i: int) -> str:
    return f"acct-{i:06d}"


async def build(path: Path, ops: int, accounts: int, key_fraction: float, seed: int) -> BuildStats:
    started = time.perf_counter()
    store = SqliteStore(path)
    ledger = embedded_ledger(store, Limits(idempotency_ttl_s=IDEMPOTENCY_TTL_S))
    await ledger.start()
    rng = random.Random(seed)
    ticks = -(-ops // accounts)  # ceil
    done = 0

    async def one(i: int, tick: int) -> None:
        aid = account_id(i)
        keyed = rng.random() < key_fraction
        key = f"k-{tick}" if keyed else None
        if tick == 0 or rng.random() < 0.55:
            amount = rng.randint(1, 1000)
            expiry = tick + rng.randint(5, 1500)
            idem = None
            if key is not None:
                body = {"amount": amount, "timestamp": tick, "expiry": expiry}
                idem = Idempotency(key, fingerprint("grant", aid, body))
            result: GrantReceipt | ConsumptionReceipt | Replay = await ledger.grant(
                aid, amount, tick, expiry, idem
            )
        else:
            amount = rng.randint(1, 700)
            idem = None
            if key is not None:
                body = {"amount": amount, "timestamp": tick}
                idem = Idempotency(key, fingerprint("consume", aid, body))
            result = await ledger.consume(aid, amount, tick, idem)
        assert not isinstance(result, Replay)

    for tick in range(ticks):
        batch = min(accounts, ops - done)
        await asyncio.gather(*(one(i, tick) for i in range(batch)))
        done += batch
        if tick % 10 == 9 or done == ops:
            elapsed = time.perf_counter() - started
            print(f"  built {done:>9,} ops in {elapsed:6.1f} s ({done / elapsed:,.0f} ops/s)")
    await store.close()
    return BuildStats(done, min(accounts, ops), time.perf_counter() - started)


def db_facts(path: Path) -> dict[str, int]:
    conn = sqlite3.connect(path)
    try:
        facts = {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("accounts", "live_grants", "entries", "idempotency")
        }
        for kind, count in conn.execute("SELECT kind, count(*) FROM entries GROUP BY kind"):
            facts[kind] = count
    finally:
        conn.close()
    size = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    return {**facts, "bytes": size}


async def time_in_process(path: Path) -> tuple[float, float, int]:
    """The data-dependent part of startup, in this process: seconds for ``SqliteStore.open``
    (read the state rows) and for ``Ledger.start`` (that, plus rebuilding every tracker and
    the idempotency index), and the accounts loaded."""
    store = SqliteStore(path)
    started = time.perf_counter()
    loaded = await store.open(time.time() - IDEMPOTENCY_TTL_S)
    open_s = time.perf_counter() - started
    await store.close()
    store = SqliteStore(path)
    ledger = embedded_ledger(store, Limits(idempotency_ttl_s=IDEMPOTENCY_TTL_S))
    started = time.perf_counter()
    await ledger.start()
    start_s = time.perf_counter() - started
    await store.close()
    return open_s, start_s, len(loaded.accounts)


def expected_views(path: Path, sample: list[str]) -> dict[str, tuple[int, int, int]]:
    """(clock, debt, live credits) of the sample accounts, straight from the database."""
    conn = sqlite3.connect(path)
    try:
        out: dict[str, tuple[int, int, int]] = {}
        for aid in sample:
            clock, debt = conn.execute(
                "SELECT clock, debt FROM accounts WHERE account_id = ?", (aid,)
            ).fetchone()
            (available,) = conn.execute(
                "SELECT coalesce(sum(remaining), 0) FROM live_grants "
                "WHERE account = (SELECT number FROM accounts WHERE account_id = ?)",
                (aid,),
            ).fetchone()
            out[aid] = (clock, debt, available)
        return out
    finally:
        conn.close()


def check_loaded(server: Server, expected: dict[str, tuple[int, int, int]]) -> None:
    with httpx.Client(base_url=server.base_url, timeout=30) as client:
        for aid, (clock, debt, available) in expected.items():
            body = client.get(f"/v1/accounts/{aid}/balance").json()
            got = (body["timestamp"], body["debt"], body["available"])
            assert got == (clock, debt, available), f"{aid}: served {got}, stored {expected}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ops", type=int, default=1_000_000, help="operations to record")
    parser.add_argument("--accounts", type=int, default=10_000)
    parser.add_argument("--key-fraction", type=float, default=0.25, help="ops with a key")
    parser.add_argument("--runs", type=int, default=3, help="timed starts")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--data-dir", type=Path, help="keep the database here (reused if built)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20,000 ops")
    args = parser.parse_args()
    if args.quick:
        args.ops, args.accounts = 20_000, 1_000

    tmp = None
    data_dir: Path = args.data_dir or Path(tmp := tempfile.mkdtemp(prefix="gpu-credits-restart-"))
    path = Settings(data_dir=data_dir).sqlite_path
    try:
        if path.exists():
            print(f"reusing {path}")
        else:
            print(f"building {args.ops:,} operations over {args.accounts:,} accounts in {path}")
            stats = asyncio.run(build(path, args.ops, args.accounts, args.key_fraction, args.seed))
            print(f"built in {stats.seconds:.1f} s")
        facts = db_facts(path)
        open_s, ledger_s, loaded = asyncio.run(time_in_process(path))
        assert loaded == facts["accounts"], f"loaded {loaded} of {facts['accounts']} accounts"
        sample = [
            account_id(i) for i in range(0, facts["accounts"], max(1, facts["accounts"] // 20))
        ]
        expected = expected_views(path, sample)

        starts: list[float] = []
        for _ in range(args.runs):
            server = Server(data_dir)
            try:
                starts.append(server.start())
                check_loaded(server, expected)
            finally:
                server.stop()

        print()
        ops = facts.get("grant", 0) + facts.get("consumption", 0)
        print(
            f"operations recorded:  {ops:,} ({facts.get('grant', 0):,} grants, "
            f"{facts.get('consumption', 0):,} consumptions; {facts['entries']:,} ledger "
            f"entries with {facts.get('expiration', 0):,} expirations)"
        )
        print(f"accounts:             {facts['accounts']:,}")
        print(f"live grants:          {facts['live_grants']:,}")
        print(f"idempotency keys:     {facts['idempotency']:,}")
        print(f"database size:        {facts['bytes'] / 2**20:,.1f} MiB (with WAL)")
        print(
            f"in process:           SqliteStore.open {open_s:.2f} s, Ledger.start {ledger_s:.2f} s"
        )
        print("startup to healthy:   " + ", ".join(f"{s:.2f} s" for s in starts))
        median = statistics.median(starts)
        verdict = "meets" if median <= TARGET_STARTUP_S else "MISSES"
        print(
            f"startup median:       {median:.2f} s ({verdict} the {TARGET_STARTUP_S:.0f} s "
            "target; the machine is shared, so single runs vary)"
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
