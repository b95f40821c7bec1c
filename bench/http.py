"""HTTP load benchmark: the service against the framework's ceiling, in one run.

Run: ``./scripts/bench-http`` (or ``.venv/bin/python bench/http.py [--seconds S] [--quick]``).
Needs ``wrk`` (Debian package ``wrk``; the script says how to install it if it is missing).

What it measures, each against a real server process started the way the README starts it,
with wrk as the load generator (one thread: on a 2-core machine one core serves, one loads):

1. ceiling: a bare FastAPI endpoint taking a body of the same shape as a grant
   (``bench/bare_app.py``), 64 connections;
2. single grants and consumptions (alternating, over 1,000 accounts), memory and sqlite
   storage, 64 connections;
3. the batch endpoint with 1,000 operations a request at 8 and at 32 connections and 10,000 at
   2, sqlite storage, each against the batch path's ceiling (``bench/ceiling.py``) measured
   in this same run twice: on a fresh file (best of its batches) and on a file grown as the
   server's was during that batch run (``measure_grown``: as many operations written before,
   as many timed as the server wrote, sustained; measured right after that run, so that both
   see the machine as it was: a shared machine's speed drifts over minutes); and, as a
   second baseline, ``bench/ceiling.py``'s ``schema`` variant grown alike (the same least
   work, writing the service's own rows into its own schema: the entries with their as-of
   index, the live grants, the account rows), which the issue's ceiling leaves out;
4. the same batch runs on memory storage: the service's own path with no disk at all, the
   most the SQLite figure can reach while the event loop's Python is what bounds it.

``--observability`` measures instead what metrics and the request log cost: single grants and
consumptions on memory (where the per-request overhead shows most) against servers with
metrics and the request log off, metrics on, the request log on, and both (the default), in
interleaved rounds; with ``--baseline-src DIR`` (a checkout of an earlier commit, e.g. from
``git archive``) also against that version.

It prints requests/s, operations/s, p50, p99 and p99.9 latency, and the ratios the issue
sets targets for. Machines here are shared and noisy: compare the ratios, not the absolutes.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named http.py: drop its folder from the import path, or "import http.client"
# (inside httpx) would find this script instead of the standard library's package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import asyncio
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Final

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.settings import Settings
from bench._procs import Server, free_port, wait_until_up
from bench.ceiling import SchemaCeiling, batch_body, measure_grown
from bench.ceiling import measure as measure_ceiling

# What --observability compares: settings of the same server.
OBSERVABILITY_VARIANTS: dict[str, dict[str, str]] = {
    "off": {"GPU_CREDITS_METRICS": "false", "GPU_CREDITS_ACCESS_LOG": "false"},
    "metrics": {"GPU_CREDITS_METRICS": "true", "GPU_CREDITS_ACCESS_LOG": "false"},
    "log": {"GPU_CREDITS_METRICS": "false", "GPU_CREDITS_ACCESS_LOG": "true"},
    "metrics+log": {"GPU_CREDITS_METRICS": "true", "GPU_CREDITS_ACCESS_LOG": "true"},
}

ACCOUNTS = 1000
FAR_EXPIRY = 10**15

_DONE = """
done = function(summary, latency, requests)
  io.write(string.format("RESULT requests=%d seconds=%.3f p50=%.3f p99=%.3f p999=%.3f "
    .. "errors=%d non2xx=%d\\n",
    summary.requests, summary.duration / 1e6,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency:percentile(99.9) / 1000,
    summary.errors.connect + summary.errors.read + summary.errors.write
      + summary.errors.timeout,
    summary.errors.status))
end
"""

SINGLE_LUA = (
    """
counter = 0
request = function()
  counter = counter + 1
  local account = "acct-" .. (counter % ACCOUNTS)
  if counter % 2 == 0 then
    return wrk.format("POST", "/v1/accounts/" .. account .. "/consumptions",
      {["Content-Type"] = "application/json"}, '{"amount":3,"timestamp":1}')
  end
  return wrk.format("POST", "/v1/accounts/" .. account .. "/grants",
    {["Content-Type"] = "application/json"},
    '{"amount":5,"timestamp":1,"expiry":FAR_EXPIRY}')
end
""".replace("ACCOUNTS", str(ACCOUNTS)).replace("FAR_EXPIRY", str(FAR_EXPIRY))
    + _DONE
)

GRANT_ONLY_LUA = (
    """
counter = 0
request = function()
  counter = counter + 1
  return wrk.format("POST", "/v1/accounts/acct-" .. (counter % ACCOUNTS) .. "/grants",
    {["Content-Type"] = "application/json"},
    '{"amount":5,"timestamp":1,"expiry":FAR_EXPIRY}')
end
""".replace("ACCOUNTS", str(ACCOUNTS)).replace("FAR_EXPIRY", str(FAR_EXPIRY))
    + _DONE
)


# (result name, operations per batch, connections). Batches move while earlier ones commit
# only as far as several are in flight: 8 connections as before, and 32.
BATCH_RUNS: Final = (
    ("batch-1000", 1000, 8),
    ("batch-1000-c32", 1000, 32),
    ("batch-10000", 10_000, 2),
)


DB_FILE_NAME: Final = Settings.model_fields["sqlite_file"].default


def _entries_in(data_dir: Path) -> int:
    """The entries a server's SQLite file holds (read beside it: WAL readers do not block)."""
    conn = sqlite3.connect(f"file:{data_dir / DB_FILE_NAME}?mode=ro", uri=True)
    try:
        (count,) = conn.execute("SELECT count(*) FROM entries").fetchone()
    finally:
        conn.close()
    return int(count)


def batch_lua(operations: int) -> str:
    body = batch_body(operations).decode()
    return (
        "body = [==[" + body + "]==]\n"
        "request = function()\n"
        '  return wrk.format("POST", "/v1/batch", {["Content-Type"] = "application/json"}, body)\n'
        "end\n" + _DONE
    )


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    requests_per_s: float
    ops_per_s: float
    p50_ms: float
    p99_ms: float
    p999_ms: float
    errors: int
    requests: int = 0
    cpu_us: float = 0.0  # the server's CPU time per request (user + system), when measured

    def line(self) -> str:
        return (
            f"{self.name:<44} {self.requests_per_s:>9,.0f} req/s {self.ops_per_s:>10,.0f} ops/s"
            f"  p50 {self.p50_ms:7.2f} ms  p99 {self.p99_ms:7.2f} ms  p99.9 {self.p999_ms:7.2f} ms"
            + (f"  {self.cpu_us:6.1f} us CPU/req" if self.cpu_us else "")
            + (f"  ERRORS {self.errors}" if self.errors else "")
        )


def run_wrk(
    name: str,
    base_url: str,
    lua: str,
    seconds: float,
    connections: int,
    ops_per_request: int,
    server_pid: int | None = None,
) -> Result:
    """wrk against ``base_url``; with ``server_pid``, also the server's CPU time per request."""
    cpu_before_s = _cpu_seconds(server_pid) if server_pid is not None else 0.0
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(lua)
        script = f.name
    try:
        out = subprocess.run(
            [
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{seconds:g}s",
                "--timeout",
                "10s",
                "-s",
                script,
                base_url,
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.unlink(script)
    match = re.search(
        r"RESULT requests=(\d+) seconds=([\d.]+) p50=([\d.]+) p99=([\d.]+) p999=([\d.]+) "
        r"errors=(\d+) non2xx=(\d+)",
        out,
    )
    assert match, out
    requests, secs = int(match[1]), float(match[2])
    cpu_us = 0.0
    if server_pid is not None and requests:
        cpu_us = (_cpu_seconds(server_pid) - cpu_before_s) / requests * 1e6
    return Result(
        name,
        requests / secs,
        requests * ops_per_request / secs,
        float(match[3]),
        float(match[4]),
        float(match[5]),
        int(match[6]) + int(match[7]),
        requests,
        cpu_us,
    )


async def _fixed_rate(
    host: str, port: int, rate_per_s: float, seconds: float, connections: int
) -> list[float]:
    """Open-loop load: requests go out on a fixed schedule (``rate_per_s`` in all, spread
    over ``connections`` keep-alive connections), and each latency is measured from the
    time the request was due, so a stall counts against every request it delayed (no
    coordinated omission). Returns latencies in ms."""
    interval_s = connections / rate_per_s
    latencies_ms: list[float] = []
    loop = asyncio.get_running_loop()
    start = loop.time() + 0.2
    requests_each = int(seconds * rate_per_s / connections)

    async def connection(index: int) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            for n in range(requests_each):
                due = start + (n + index / connections) * interval_s
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)  # the schedule, not a wait for luck
                account = f"acct-{(index * requests_each + n) % ACCOUNTS}"
                body = b'{"amount":5,"timestamp":1,"expiry":%d}' % FAR_EXPIRY
                writer.write(
                    b"POST /v1/accounts/%s/grants HTTP/1.1\r\nHost: bench\r\n"
                    b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                    % (account.encode(), len(body), body)
                )
                await writer.drain()
                status = await reader.readline()
                assert status.startswith(b"HTTP/1.1 201"), status
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                latencies_ms.append((loop.time() - due) * 1000)
        finally:
            writer.close()

    await asyncio.gather(*(connection(i) for i in range(connections)))
    return latencies_ms


def fixed_rate_latency(
    base_url: str, rate_per_s: float, seconds: float, connections: int
) -> tuple[float, float, float]:
    """p50, p99 and p99.9 in ms of single grants at a fixed rate below saturation."""
    host, port = base_url.removeprefix("http://").split(":")
    latencies = sorted(asyncio.run(_fixed_rate(host, int(port), rate_per_s, seconds, connections)))

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))]

    return pct(50), pct(99), pct(99.9)


def warm_up(base_url: str) -> None:
    """Create the accounts first, so the measured runs do not include account creation."""
    ops = [
        {
            "op": "grant",
            "account_id": f"acct-{i}",
            "amount": 10**6,
            "timestamp": 1,
            "expiry": FAR_EXPIRY,
        }
        for i in range(ACCOUNTS)
    ]
    r = httpx.post(f"{base_url}/v1/batch", json={"operations": ops}, timeout=60)
    r.raise_for_status()


def start_bare() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    uvicorn = str(Path(sys.executable).parent / "uvicorn")
    proc = subprocess.Popen(
        [
            uvicorn,
            "bench.bare_app:app",
            "--port",
            str(port),
            "--loop",
            "uvloop",
            "--http",
            "httptools",
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(f"{url}/openapi.json", proc, 30)
    except BaseException:
        proc.kill()
        raise
    return proc, url


def observability(seconds: float, connections: int, rounds: int, baseline_src: Path | None) -> None:
    """Requests/s of single grants and consumptions (memory) per variant, interleaved so
    that a machine getting slower or faster affects every variant alike, and the server's
    CPU time per request (user + system, from /proc): what the variant costs, which other
    jobs on a shared machine disturb far less than they disturb throughput."""
    variants: dict[str, tuple[dict[str, str], Path | None]] = {
        name: (env, None) for name, env in OBSERVABILITY_VARIANTS.items()
    }
    if baseline_src is not None:
        variants = {"before": ({}, baseline_src.resolve()), **variants}
    rates: dict[str, list[float]] = {name: [] for name in variants}
    cpu_us: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(rounds):
            for name, (env, src) in variants.items():
                server = Server(Path(tmp) / f"{name}-{round_}", "memory", env, src)
                server.start()
                try:
                    warm_up(server.base_url)
                    assert server.proc is not None
                    cpu_before_s = _cpu_seconds(server.proc.pid)
                    result = run_wrk(name, server.base_url, SINGLE_LUA, seconds, connections, 1)
                    cpu_s = _cpu_seconds(server.proc.pid) - cpu_before_s
                finally:
                    server.stop()
                assert not result.errors, result.line()
                rates[name].append(result.requests_per_s)
                cpu_us[name].append(cpu_s / result.requests * 1e6)
                print(
                    f"round {round_ + 1}: {name:<12} {result.requests_per_s:8,.0f} req/s "
                    f"{cpu_us[name][-1]:7.1f} us CPU/request",
                    flush=True,
                )
    print()
    base = "before" if baseline_src is not None else "off"
    for name in variants:
        # Per round, against the baseline of the same round; then the median of those.
        rate_ratios = [v / b for v, b in zip(rates[name], rates[base], strict=True)]
        cpu_ratios = [v / b for v, b in zip(cpu_us[name], cpu_us[base], strict=True)]
        print(
            f"{name:<12} throughput vs {base}: median {_median(rate_ratios):.3f} "
            f"({min(rate_ratios):.3f} to {max(rate_ratios):.3f}); "
            f"CPU/request {_median(cpu_us[name]):.1f} us, vs {base}: median "
            f"{_median(cpu_ratios):.3f} ({min(cpu_ratios):.3f} to {max(cpu_ratios):.3f})"
        )


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="3 s runs, a smoke test")
    parser.add_argument(
        "--observability",
        action="store_true",
        help="only compare metrics and the request log on and off (see above)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="--observability rounds")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="--observability: also measure the checkout in this directory",
    )
    args = parser.parse_args()
    seconds = 3.0 if args.quick else args.seconds
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install -y wrk")
    if args.observability:
        observability(seconds, args.connections, args.rounds, args.baseline_src)
        return

    results: dict[str, Result] = {}
    fixed: dict[str, tuple[float, float, float, float]] = {}
    grown: dict[str, tuple[int, int]] = {}  # batch run: entries before it, written during it
    grown_ceilings: dict[str, float] = {}  # batch run: its ceiling on a file grown alike
    # The same with the service's own rows and schema (bench/ceiling.py's ``schema``): the
    # least work of a batch that stores what the contract's reads need, grown alike.
    grown_schema: dict[str, float] = {}
    bare, bare_url = start_bare()
    try:
        results["ceiling"] = run_wrk(
            "ceiling: bare FastAPI, grant-shaped body",
            bare_url,
            GRANT_ONLY_LUA,
            seconds,
            args.connections,
            1,
            bare.pid,
        )
    finally:
        bare.terminate()
        bare.wait()

    with tempfile.TemporaryDirectory() as tmp:
        for storage in ("memory", "sqlite"):
            server = Server(Path(tmp) / storage, storage=storage)
            server.start()
            try:
                warm_up(server.base_url)
                results[f"grant-{storage}"] = run_wrk(
                    f"single grants, {storage}",
                    server.base_url,
                    GRANT_ONLY_LUA,
                    seconds,
                    args.connections,
                    1,
                    server.proc.pid if server.proc else None,
                )
                results[f"single-{storage}"] = run_wrk(
                    f"single grants+consumptions, {storage}",
                    server.base_url,
                    SINGLE_LUA,
                    seconds,
                    args.connections,
                    1,
                    server.proc.pid if server.proc else None,
                )
                if storage == "memory":
                    # Latency below saturation: at half the throughput just measured.
                    rate = results[f"single-{storage}"].requests_per_s / 2
                    fixed[storage] = (
                        rate,
                        *fixed_rate_latency(server.base_url, rate, seconds, args.connections),
                    )
                # The batch runs (on memory after the latency runs, which find the accounts
                # as before); on sqlite, how many entries the file held before and gained.
                for name, size, connections in BATCH_RUNS:
                    before = _entries_in(server.data_dir) if storage == "sqlite" else 0
                    result = run_wrk(
                        f"batch of {size:,} ops, {connections} connections, {storage}",
                        server.base_url,
                        batch_lua(size),
                        seconds,
                        connections,
                        size,
                    )
                    if storage == "sqlite":
                        results[name] = result
                        grown[name] = (before, _entries_in(server.data_dir) - before)
                        # Its ceiling at once, while the machine is as it was during the run
                        # (shared machines drift over minutes; the server is idle meanwhile).
                        grown_ceilings[name] = measure_grown(size, *grown[name])
                        grown_schema[name] = measure_grown(size, *grown[name], make=SchemaCeiling)
                    else:
                        results[f"{name}-memory"] = result
            finally:
                server.stop()

    # The batch path's ceiling (bench/ceiling.py), in process, in this same run: on a fresh
    # file (best of its batches) here, and on a file grown as the server's was during each
    # batch run (as many operations before, then as many timed as the server wrote) right
    # after that run, above.
    ceilings = {size: measure_ceiling(size, 10 if args.quick else 30) for size in (1000, 10_000)}
    for r in results.values():
        print(r.line())
    for size, per_s in ceilings.items():
        name = f"batch ceiling, {size:,} ops, fresh file"
        print(f"{name:<44} {'':>15} {per_s:>10,.0f} ops/s")
    for name, size, _ in BATCH_RUNS:
        before, during = grown[name]
        label = f"batch ceiling, {size:,} ops, {before // 1000:,}k+{during // 1000:,}k entries"
        print(f"{label:<44} {'':>15} {grown_ceilings[name]:>10,.0f} ops/s")
        label = "  the same, the service's rows and schema"
        print(f"{label:<44} {'':>15} {grown_schema[name]:>10,.0f} ops/s")
    ceiling = results["ceiling"].requests_per_s
    memory = results["single-memory"].requests_per_s
    sqlite = results["single-sqlite"].requests_per_s
    print()
    print(f"single ops, memory / bare FastAPI ceiling: {memory / ceiling:.2f} (target >= 0.85)")
    print(
        f"single grants only, memory / ceiling:      "
        f"{results['grant-memory'].requests_per_s / ceiling:.2f}"
    )
    # One core serves: at saturation, throughput is about 1 / CPU per request, and on a shared
    # machine the CPU time per request is far steadier than the throughput.
    cpu_ceiling = results["ceiling"].cpu_us
    print(
        f"the same by CPU per request (ceiling's / ours): single ops "
        f"{cpu_ceiling / results['single-memory'].cpu_us:.2f}, grants only "
        f"{cpu_ceiling / results['grant-memory'].cpu_us:.2f} "
        f"({cpu_ceiling:.1f} us against {results['single-memory'].cpu_us:.1f} and "
        f"{results['grant-memory'].cpu_us:.1f} us)"
    )
    print(f"single ops, sqlite / memory:               {sqlite / memory:.2f} (target >= 0.60)")
    best_batch = max(results[name].ops_per_s for name, _, _ in BATCH_RUNS)
    print(f"batch, sqlite, ops/s:                      {best_batch:,.0f} (target >= 100,000)")
    for name, size, connections in BATCH_RUNS:
        ops_per_s = results[name].ops_per_s
        print(
            f"batch of {size:,} at {connections} connections, sqlite / ceiling: "
            f"{ops_per_s / grown_ceilings[name]:.2f} on a file grown alike (target >= 0.6), "
            f"{ops_per_s / ceilings[size]:.2f} on a fresh file, "
            f"{ops_per_s / grown_schema[name]:.2f} of the schema ceiling grown alike"
        )
    for name, size, connections in BATCH_RUNS:
        memory_ops_per_s = results[f"{name}-memory"].ops_per_s
        print(
            f"batch of {size:,} at {connections} connections, sqlite / memory: "
            f"{results[name].ops_per_s / memory_ops_per_s:.2f}; memory / grown-file ceiling: "
            f"{memory_ops_per_s / grown_ceilings[name]:.2f}"
        )
    rate, p50, p99, p999 = fixed["memory"]
    print(
        f"p99 at {args.connections} connections, memory, saturated (closed loop): "
        f"{results['single-memory'].p99_ms:.2f} ms"
    )
    print(
        f"p99 at {args.connections} connections, memory, fixed {rate:,.0f} req/s (open loop): "
        f"{p99:.2f} ms (p50 {p50:.2f}, p99.9 {p999:.2f}) (target <= 25 ms)"
    )


if __name__ == "__main__":
    main()
