"""Storage benchmark: single-operation throughput with 64 concurrent clients against a real
server process, sqlite vs memory, in the same run (issue 3, item 9; target: sqlite >= 60% of
memory).

Run: ``python bench/storage.py`` (``--requests N``, ``--quick`` for a smoke run).

For each backend, a fresh ``gpu-credits serve`` process
(``bench/_procs.py``) gets a short warm-up, then ``--requests``
grants and consumptions (about 55/45) from ``--clients`` concurrent asyncio clients, each on
its own keep-alive connection. Each client owns its own slice of ``--accounts`` accounts and
gives each account rising timestamps, so no request is refused (any non-2xx answer fails the
run). Reported: ops/s over the wall time, p50/p99 latency, and the server's CPU use (from
/proc), which says who the bottleneck was.

The load generator matters on a 2-core machine, where clients and server share the CPUs:

- ``--client raw`` (default): a minimal HTTP/1.1 client on asyncio streams (requests prebuilt
  as bytes, responses parsed by status line and Content-Length). It costs a fraction of the
  server's CPU per request, so the server is the bottleneck and the ratio measures the server.
- ``--client httpx``: one ``httpx.AsyncClient`` per client. httpx spends more CPU per request
  than the server does, so one client process saturates its core while the server idles:
  the ratio then says little (both backends look alike). ``--client-procs P`` splits the
  clients over P processes, which on 2 cores takes CPU from the server instead.

Read the ratio, not the absolute figures: the machine is shared and noisy, and both backends
run in the same invocation, one after the other (``--repeat`` interleaves more rounds and keeps
each backend's best).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import shutil
import ssl
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

# Run as ``python bench/<name>.py``, bench/ comes first on sys.path, where a module named like a
# standard one (bench/http.py) shadows it (httpx needs http): move bench/ last (a stable sort),
# and import the project from the repository root.
sys.path.sort(key=lambda p: Path(p or ".").resolve() == Path(__file__).resolve().parent)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench._procs import Server

# httpcore asks ``import sniffio`` several times per request; without sniffio installed (anyio
# 4 no longer needs it) every ask is a failed import that searches all of sys.path. A None
# entry makes the import fail at once, and httpcore then assumes asyncio, which is right.
sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]

TARGET_RATIO = 0.6
WARMUP_REQUESTS = 500
ClientKind = Literal["raw", "httpx"]


@dataclass(frozen=True, slots=True)
class Request:
    path: str
    body: dict[str, int]
    status: int


@dataclass(frozen=True, slots=True)
class ClientResult:
    started: float  # time.monotonic(): CLOCK_MONOTONIC is system-wide, comparable across procs
    finished: float
    latencies_s: list[float]
    errors: list[str]


@dataclass(frozen=True, slots=True)
class RunResult:
    storage: str
    requests: int
    seconds: float
    latencies_s: list[float]
    errors: list[str]
    server_cpu_s: float

    @property
    def ops_per_s(self) -> float:
        return self.requests / self.seconds

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def plan(requests: int, clients: int, accounts: int, seed: int, prefix: str) -> list[list[Request]]:
    """Per client, its requests in order. Client c owns accounts c, c + clients, ...; each
    account's timestamps rise by one per request, so every request is accepted."""
    rng = random.Random(seed)
    owned = [list(range(c, accounts, clients)) for c in range(clients)]
    clocks = [0] * accounts
    plans: list[list[Request]] = [[] for _ in range(clients)]
    for i in range(requests):
        c = i % clients
        mine = owned[c]
        a = mine[(i // clients) % len(mine)]
        clocks[a] += 1
        t = clocks[a]
        base = f"/v1/accounts/{prefix}-{a:05d}"
        if t == 1 or rng.random() < 0.55:
            body = {"amount": rng.randint(1, 100), "timestamp": t, "expiry": t + 1000}
            plans[c].append(Request(f"{base}/grants", body, 201))
        else:
            body = {"amount": rng.randint(1, 80), "timestamp": t}
            plans[c].append(Request(f"{base}/consumptions", body, 200))
    return plans


# -- load generators -------------------------------------------------------------------


class RawConnection:
    """One keep-alive HTTP/1.1 connection: a request is one write, a response is read by its
    status line and Content-Length (the server always sends one)."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        assert self.reader is not None
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        header_block = await self.reader.readuntil(b"\r\n\r\n")
        lines = header_block.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        length = None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        assert length is not None, f"no Content-Length in {lines}"
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()


async def drive_raw(base_url: str, plans: list[list[Request]]) -> ClientResult:
    url = urlsplit(base_url)
    assert url.hostname is not None
    assert url.port is not None
    latencies: list[float] = []
    errors: list[str] = []
    connections = [RawConnection(url.hostname, url.port) for _ in plans]
    encoded = [[(r, json.dumps(r.body).encode()) for r in p] for p in plans]

    async def one_client(conn: RawConnection, requests: list[tuple[Request, bytes]]) -> None:
        for req, body in requests:
            t0 = time.perf_counter()
            status, answer = await conn.post(req.path, body)
            latencies.append(time.perf_counter() - t0)
            if status != req.status and len(errors) < 10:
                errors.append(f"{req.path} {req.body}: {status} {answer[:300]!r}")

    try:
        started = time.monotonic()
        await asyncio.gather(*(one_client(c, p) for c, p in zip(connections, encoded, strict=True)))
        finished = time.monotonic()
    finally:
        for c in connections:
            await c.close()
    return ClientResult(started, finished, latencies, errors)


async def drive_httpx(base_url: str, plans: list[list[Request]]) -> ClientResult:
    latencies: list[float] = []
    errors: list[str] = []
    # One client per plan: one pool shared by 64 concurrent requests costs more CPU in httpcore
    # than the requests do. One TLS context for all: httpx loads the CA bundle per client
    # otherwise (for nothing: the server speaks plain HTTP).
    tls = ssl.create_default_context()
    clients = [httpx.AsyncClient(base_url=base_url, timeout=60, verify=tls) for _ in plans]

    async def one_client(client: httpx.AsyncClient, requests: list[Request]) -> None:
        for req in requests:
            t0 = time.perf_counter()
            r = await client.post(req.path, json=req.body)
            latencies.append(time.perf_counter() - t0)
            if r.status_code != req.status and len(errors) < 10:
                errors.append(f"{req.path} {req.body}: {r.status_code} {r.text[:300]}")

    try:
        started = time.monotonic()
        await asyncio.gather(*(one_client(c, p) for c, p in zip(clients, plans, strict=True)))
        finished = time.monotonic()
    finally:
        for c in clients:
            await c.aclose()
    return ClientResult(started, finished, latencies, errors)


def drive(kind: ClientKind, base_url: str, plans: list[list[Request]]) -> ClientResult:
    """Run every plan concurrently in this process; also the entry point of a client process."""
    if kind == "raw":
        return asyncio.run(drive_raw(base_url, plans))
    return asyncio.run(drive_httpx(base_url, plans))


def run_clients(
    kind: ClientKind, base_url: str, plans: list[list[Request]], procs: int
) -> ClientResult:
    if procs <= 1:
        return drive(kind, base_url, plans)
    shares = [plans[i::procs] for i in range(procs)]
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=procs, mp_context=ctx) as pool:
        list(pool.map(abs, range(procs)))  # spawn (and import) before the clock starts
        results = list(pool.map(drive, [kind] * procs, [base_url] * procs, shares))
    return ClientResult(
        started=min(r.started for r in results),
        finished=max(r.finished for r in results),
        latencies_s=[x for r in results for x in r.latencies_s],
        errors=[e for r in results for e in r.errors],
    )


# -- the benchmark ---------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


def run(storage: str, args: argparse.Namespace, data_dir: Path) -> RunResult:
    """One backend, one round, on a fresh data directory."""
    server = Server(Path(tempfile.mkdtemp(prefix=f"{storage}-", dir=data_dir)), storage)
    server.start()
    try:
        assert server.proc is not None
        warmup = plan(WARMUP_REQUESTS, args.clients, args.clients, args.seed + 1, "warmup")
        drive(args.client, server.base_url, warmup)
        plans = plan(args.requests, args.clients, args.accounts, args.seed, "bench")
        cpu_before = cpu_seconds(server.proc.pid)
        result = run_clients(args.client, server.base_url, plans, args.client_procs)
        cpu_used = cpu_seconds(server.proc.pid) - cpu_before
    finally:
        server.stop()
    return RunResult(
        storage=storage,
        requests=args.requests,
        seconds=result.finished - result.started,
        latencies_s=result.latencies_s,
        errors=result.errors,
        server_cpu_s=cpu_used,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description="sqlite vs memory throughput, 64 clients")
    parser.add_argument("--requests", type=int, default=20_000, help="per backend and round")
    parser.add_argument("--clients", type=int, default=64, help="concurrent clients")
    parser.add_argument("--accounts", type=int, default=2_000)
    parser.add_argument("--client", choices=["raw", "httpx"], default="raw")
    parser.add_argument("--client-procs", type=int, default=1, help="client processes")
    parser.add_argument("--repeat", type=int, default=1, help="rounds (best kept)")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--quick", action="store_true", help="smoke run: 2,000 requests")
    args = parser.parse_args()
    if args.quick:
        args.requests = 2_000
    assert args.accounts >= args.clients, "every client needs an account of its own"

    print(
        f"{args.requests:,} requests per backend, {args.clients} concurrent {args.client} "
        f"clients in {args.client_procs} process(es), {args.accounts:,} accounts, "
        f"{os.cpu_count()} CPUs"
    )
    data_dir = Path(tempfile.mkdtemp(prefix="gpu-credits-bench-"))
    best: dict[str, RunResult] = {}
    try:
        for _ in range(args.repeat):
            for storage in ("memory", "sqlite"):  # interleaved: both see the same machine
                result = run(storage, args, data_dir)
                if result.errors:
                    print(f"{storage}: requests failed: {result.errors}", file=sys.stderr)
                    return 1
                print(
                    f"  {storage:<7} {result.ops_per_s:8,.0f} ops/s  "
                    f"p50 {result.percentile_ms(0.50):6.1f} ms  "
                    f"p99 {result.percentile_ms(0.99):6.1f} ms  "
                    f"server CPU {100 * result.server_cpu_s / result.seconds:4.0f}%  "
                    f"({result.seconds:.1f} s)"
                )
                if storage not in best or result.ops_per_s > best[storage].ops_per_s:
                    best[storage] = result
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

    ratio = best["sqlite"].ops_per_s / best["memory"].ops_per_s
    verdict = "meets" if ratio >= TARGET_RATIO else "MISSES"
    print(
        f"sqlite/memory throughput: {ratio:.2f} ({verdict} the {TARGET_RATIO:.1f} target); "
        f"memory {best['memory'].ops_per_s:,.0f} ops/s, sqlite {best['sqlite'].ops_per_s:,.0f} "
        "ops/s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
