"""PostgreSQL scale-out benchmark: operations/s with one and with two service processes
sharing one PostgreSQL, 64 connections, over many accounts and on one hot account.

Run: ``.venv/bin/python bench/pg.py [--seconds S]`` (needs wrk and the PostgreSQL 15 server
binaries; it starts its own throwaway server, as the tests do).

Batches (issue 14, item 4): ``bench/http.py``'s batch of 1,000 operations (``bench/ceiling.py``'s
``batch_body``: grants and consumptions over the same 1,000 accounts, so every batch locks every
one of them and concurrent batches take turns), with 8 connections, on PostgreSQL with one and
two processes, and on SQLite in the same run: the PostgreSQL figures are also given as a ratio
to it.

With two processes the 64 connections are split between them (two wrk instances at once)
and their operations/s are added. Everything runs on this one 2-core machine: PostgreSQL, the
service processes and wrk share two cores, so the second process buys little here; on a
real deployment each would have its own cores.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import importlib.util

from bench._procs import Postgres, Server

_spec = importlib.util.spec_from_file_location("bench_http", ROOT / "bench" / "http.py")
assert _spec is not None
assert _spec.loader is not None
bench_http = importlib.util.module_from_spec(_spec)
sys.modules["bench_http"] = bench_http  # dataclasses look their module up there
_spec.loader.exec_module(bench_http)

HOT_LUA = (
    """
counter = 0
request = function()
  counter = counter + 1
  if counter % 2 == 0 then
    return wrk.format("POST", "/v1/accounts/hot/consumptions",
      {["Content-Type"] = "application/json"}, '{"amount":3,"timestamp":1}')
  end
  return wrk.format("POST", "/v1/accounts/hot/grants",
    {["Content-Type"] = "application/json"}, '{"amount":5,"timestamp":1,"expiry":FAR}')
end
""".replace("FAR", str(bench_http.FAR_EXPIRY))
    + bench_http._DONE
)


BATCH_OPERATIONS = 1000
BATCH_CONNECTIONS = 8  # as bench/http.py's batches of 1,000


def measure(
    urls: list[str], lua: str, seconds: float, connections: int, ops_per_request: int = 1
) -> tuple[float, float]:
    """Total ops/s over ``urls`` (connections split evenly) and the worst p99 in ms."""
    results: list[object] = [None] * len(urls)

    def run(i: int, url: str) -> None:
        results[i] = bench_http.run_wrk(
            "pg", url, lua, seconds, connections // len(urls), ops_per_request
        )

    threads = [threading.Thread(target=run, args=(i, u)) for i, u in enumerate(urls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(r.ops_per_s for r in results)  # type: ignore[attr-defined]
    p99 = max(r.p99_ms for r in results)  # type: ignore[attr-defined]
    return total, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=64)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install -y wrk")
    pg = Postgres()
    pg.start()
    rows: list[str] = []
    batches: dict[str, float] = {}
    batch_lua = bench_http.batch_lua(BATCH_OPERATIONS)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = Server(Path(tmp) / "sqlite", storage="sqlite")
            sqlite.start()
            try:
                bench_http.warm_up(sqlite.base_url)
                ops, p99 = measure(
                    [sqlite.base_url], batch_lua, args.seconds, BATCH_CONNECTIONS, BATCH_OPERATIONS
                )
                batches["sqlite"] = ops
                rows.append(
                    f"sqlite, 1 process, batches of {BATCH_OPERATIONS:,} {ops:>9,.0f} ops/s  "
                    f"p99 {p99:8.2f} ms"
                )
                print(rows[-1], flush=True)
            finally:
                sqlite.stop()
            for processes in (1, 2):
                url = pg.create_database(f"bench{processes}")
                env = {"GPU_CREDITS_DATABASE_URL": url}
                servers = [
                    Server(Path(tmp) / f"p{processes}-{i}", storage="postgres", env=env)
                    for i in range(processes)
                ]
                for s in servers:
                    s.start()
                try:
                    bench_http.warm_up(servers[0].base_url)
                    urls = [s.base_url for s in servers]
                    for name, lua in (
                        ("many accounts", bench_http.SINGLE_LUA),
                        ("one hot account", HOT_LUA),
                    ):
                        ops, p99 = measure(urls, lua, args.seconds, args.connections)
                        rows.append(
                            f"{processes} process(es), {name:<16} {ops:>9,.0f} ops/s  "
                            f"p99 {p99:8.2f} ms"
                        )
                        print(rows[-1], flush=True)
                    ops, p99 = measure(
                        urls, batch_lua, args.seconds, BATCH_CONNECTIONS, BATCH_OPERATIONS
                    )
                    batches[f"pg-{processes}"] = ops
                    rows.append(
                        f"{processes} process(es), batches of {BATCH_OPERATIONS:,} {ops:>9,.0f} "
                        f"ops/s  p99 {p99:8.2f} ms  ({ops / batches['sqlite']:.2f} of sqlite)"
                    )
                    print(rows[-1], flush=True)
                finally:
                    for s in servers:
                        s.stop()
    finally:
        pg.stop()
    print("\nsummary")
    for row in rows:
        print(f"  {row}")


if __name__ == "__main__":
    main()
