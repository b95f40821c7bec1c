"""How a PostgreSQL batch's rows are written: one ``unnest`` statement per table (what
``app.storage.postgres`` does) against asyncpg's ``executemany`` (what it did before).

Run: ``.venv/bin/python bench/pg_write.py [--batches N]`` (needs the PostgreSQL 15 server
binaries; it starts its own throwaway server).

The service runs in process on that server and takes ``bench/http.py``'s batches of 1,000
operations (``bench/ceiling.py``'s ``batch_body``); the two ways of writing alternate batch by
batch, so both see the same machine load and the same table sizes, and the time of
``PgTransaction.write`` (new entries, live grants and account rows) is reported for each.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import httpx

from app.main import create_app
from app.settings import Settings
from app.storage import postgres, rows
from app.storage.base import Change
from bench._procs import Postgres
from bench.ceiling import batch_body

_INSERT_ENTRY = (
    f"INSERT INTO entries ({rows.columns(rows.ENTRY_COLUMNS)}) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10)"
)
_UPSERT_LIVE_GRANT = (
    f"INSERT INTO live_grants ({rows.columns(rows.LIVE_GRANT_COLUMNS)}) "
    "VALUES ($1, $2, $3, $4, $5::jsonb, $6) "
    "ON CONFLICT (account_id, grant_id) DO UPDATE SET remaining = excluded.remaining"
)
_UPDATE_ACCOUNT = (
    "UPDATE accounts SET clock = $2, debt = $3, available = $4, next_grant_id = $5, "
    "next_sequence = $6, version = $7, debts = $8::jsonb, watermark = $9, "
    "lateness_window = $10, folded_since_checkpoint = $11 WHERE account_id = $1"
)


async def write_executemany(
    tx: postgres.PgTransaction,
    changes: Sequence[Change],
    available: dict[str, int],
    versions: dict[str, int],
) -> dict[str, int]:
    """The write as it was: ``executemany`` for every table."""
    group = rows.encode(changes)
    conn = tx._conn
    if group.live_grant_deletes:
        await conn.executemany(postgres._DELETE_LIVE_GRANT, group.live_grant_deletes)
    if group.live_grant_upserts:
        await conn.executemany(_UPSERT_LIVE_GRANT, group.live_grant_upserts)
    if group.entry_deletes:
        await conn.executemany(postgres._DELETE_ENTRY, group.entry_deletes)
    if group.entries:
        await conn.executemany(_INSERT_ENTRY, group.entries)
    if group.restated_entries:
        await conn.executemany(postgres._UPSERT_ENTRY, group.restated_entries)
    if group.checkpoints:
        await conn.executemany(postgres._UPSERT_CHECKPOINT, group.checkpoints)
    if group.idempotency:
        await conn.executemany(postgres._INSERT_IDEMPOTENCY, group.idempotency)
    if group.event_ids:
        await conn.executemany(postgres._INSERT_EVENT_ID, group.event_ids)
    new_versions = {a: versions[a] + 1 for a in group.accounts}
    await conn.executemany(
        _UPDATE_ACCOUNT,
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
        ],
    )
    return new_versions


async def run(batches: int) -> None:
    unnest = postgres.PgTransaction.write
    times: dict[str, list[float]] = {"unnest": [], "executemany": []}
    current = ["unnest"]

    async def timed(self: postgres.PgTransaction, *args: Any) -> dict[str, int]:
        write = unnest if current[0] == "unnest" else write_executemany
        started = time.perf_counter()
        versions = await write(self, *args)
        times[current[0]].append(time.perf_counter() - started)
        return versions

    postgres.PgTransaction.write = timed  # type: ignore[method-assign,assignment]
    pg = Postgres()
    pg.start()
    try:
        url = pg.create_database("pg_write")
        with tempfile.TemporaryDirectory() as tmp:
            app = create_app(Settings(storage="postgres", data_dir=Path(tmp), database_url=url))
            transport = httpx.ASGITransport(app)
            async with (
                app.router.lifespan_context(app),
                httpx.AsyncClient(transport=transport, base_url="http://bench") as client,
            ):
                body = batch_body(1000)
                headers = {"Content-Type": "application/json"}
                for i in range(4 + batches):  # the first four create the accounts and warm up
                    current[0] = "executemany" if i % 2 else "unnest"
                    r = await client.post("/v1/batch", content=body, headers=headers)
                    assert r.status_code == 200, r.text
                    if i == 3:
                        for found in times.values():
                            found.clear()
    finally:
        pg.stop()
    for name, found in times.items():
        print(
            f"{name:<12} write of a 1,000-operation batch: median "
            f"{1000 * statistics.median(found):6.2f} ms, mean {1000 * statistics.mean(found):6.2f}"
            f" ms, best {1000 * min(found):6.2f} ms ({len(found)} batches)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=100)
    asyncio.run(run(parser.parse_args().batches))


if __name__ == "__main__":
    main()
