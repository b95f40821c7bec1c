"""Usage streams against the batch endpoint: the same 10,000 operations sent as one
``POST /v1/batch`` and as one ``POST /v1/events`` stream (each line with its id), to one
``gpu-credits serve`` process on SQLite, in the same run.

Each round uses fresh accounts for each endpoint (so neither inherits the other's live
grants), alternating which goes first; the time of a request is from the first byte sent to
the last byte of the answer read, by one client (httpx). The stream is sent whole and then
read (what most HTTP/1.1 clients do), so its figure includes the answer's lines, as the
batch's includes its JSON. Reported: the median over the rounds, and the stream's ops/s as a
ratio to the batch's.

Usage: ``./scripts/bench events [--rounds N] [--operations N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Run as ``python bench/events.py``, bench/ comes first on sys.path, where bench/http.py
# shadows the standard library's http (httpx needs it): move bench/ last, and import the
# project from the repository root.
sys.path.sort(key=lambda p: Path(p or ".").resolve() == Path(__file__).resolve().parent)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx

from bench._procs import Server

ACCOUNTS = 100
FAR_EXPIRY = 2**53 - 1


def operations(prefix: str, count: int) -> list[dict[str, object]]:
    """Grants and consumptions alternating over ``ACCOUNTS`` accounts (bench/http.py's mix)."""
    ops: list[dict[str, object]] = []
    for i in range(count):
        account = f"{prefix}-{i % ACCOUNTS}"
        if i % 2 == 0:
            ops.append(
                {
                    "op": "grant",
                    "account_id": account,
                    "amount": 5,
                    "timestamp": i,
                    "expiry": FAR_EXPIRY,
                }
            )
        else:
            ops.append({"op": "consume", "account_id": account, "amount": 3, "timestamp": i})
    return ops


def timed_batch(client: httpx.Client, ops: list[dict[str, object]]) -> float:
    body = json.dumps({"operations": ops}, separators=(",", ":")).encode()
    started = time.perf_counter()
    r = client.post("/v1/batch", content=body, headers={"content-type": "application/json"})
    r.read()
    elapsed = time.perf_counter() - started
    assert r.status_code == 200, r.text[:300]
    answer = r.json()
    assert answer["failed"] == 0, answer["results"][:3]
    return elapsed


def timed_stream(client: httpx.Client, ops: list[dict[str, object]]) -> float:
    body = b"".join(
        json.dumps({"id": f"e-{i}", **op}, separators=(",", ":")).encode() + b"\n"
        for i, op in enumerate(ops)
    )
    started = time.perf_counter()
    r = client.post("/v1/events", content=body, headers={"content-type": "application/x-ndjson"})
    r.read()
    elapsed = time.perf_counter() - started
    assert r.status_code == 200, r.text[:300]
    results = [json.loads(line) for line in r.text.splitlines()]
    assert len(results) == len(ops)
    assert all(x["status"] in (200, 201) for x in results), results[:3]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--operations", type=int, default=10_000)
    args = parser.parse_args()
    n = args.operations
    with tempfile.TemporaryDirectory(prefix="bench-events-") as tmp:
        server = Server(Path(tmp) / "data", env={"GPU_CREDITS_MAX_BATCH_BODY_BYTES": "67108864"})
        server.start()
        try:
            with httpx.Client(base_url=server.base_url, timeout=120.0) as client:
                timed_batch(client, operations("warm-b", n))  # warm-up: imports, caches
                timed_stream(client, operations("warm-s", n))
                batch_s: list[float] = []
                stream_s: list[float] = []
                for r in range(args.rounds):
                    runs = [
                        (batch_s, timed_batch, f"b{r}"),
                        (stream_s, timed_stream, f"s{r}"),
                    ]
                    if r % 2:
                        runs.reverse()
                    for out, run, prefix in runs:
                        out.append(run(client, operations(prefix, n)))
        finally:
            server.stop()
    batch_ops = n / statistics.median(batch_s)
    stream_ops = n / statistics.median(stream_s)
    print(f"operations per request: {n:,}, rounds: {args.rounds}, sqlite, one process")
    print(f"POST /v1/batch  ops/s (median): {batch_ops:,.0f}")
    print(f"POST /v1/events ops/s (median): {stream_ops:,.0f}")
    print(f"stream / batch: {stream_ops / batch_ops:.2f}")


if __name__ == "__main__":
    main()
