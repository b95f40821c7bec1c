"""What metrics and the request log cost per request, in process: the app (memory storage) is
called through ASGI directly, without a server or a socket, with single grants and
consumptions alternating over 1,000 accounts, and the CPU time per request is measured for
each variant of the settings, in interleaved rounds (the best round of each counts: the
least disturbed by other jobs on the machine), every variant's app alive in the one
process.

Run: ``./scripts/bench observability [--requests N] [--rounds R]``.

This isolates the app's share of a request; ``bench/http.py --observability`` measures the
same variants against real server processes under wrk (throughput and the server's CPU per
request), which is what a deployment sees but is far noisier on a shared machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds http.py: drop it from the import path, or "import http.client" (inside httpx,
# which the app's imports reach) would find that script instead of the standard library's.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import asyncio
import contextlib
import logging
import logging.config
import tempfile
import time
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.logs import log_config
from app.main import create_app
from app.settings import Settings

ACCOUNTS = 1000
FAR_EXPIRY = 10**15
# "none": metrics and the request log off, and no RequestObserver at all (no request id):
# the request path as it was before them, bar the observer's empty calls.
VARIANTS: dict[str, dict[str, bool]] = {
    "none": {"metrics": False, "access_log": False},
    "off": {"metrics": False, "access_log": False},
    "metrics": {"metrics": True, "access_log": False},
    "log": {"metrics": False, "access_log": True},
    "metrics+log": {"metrics": True, "access_log": True},
}


def _requests(count: int) -> list[tuple[dict[str, Any], bytes]]:
    made = []
    for i in range(count):
        account = f"acct-{i % ACCOUNTS}"
        if i % 2:
            path, body = f"/v1/accounts/{account}/consumptions", b'{"amount":3,"timestamp":1}'
        else:
            path = f"/v1/accounts/{account}/grants"
            body = b'{"amount":5,"timestamp":1,"expiry":%d}' % FAR_EXPIRY
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"bench"),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        made.append((scope, body))
    return made


async def _run(app: Any, requests: list[tuple[dict[str, Any], bytes]]) -> float:
    """CPU seconds to answer ``requests`` (each checked to succeed)."""
    statuses: list[int] = []

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    started = time.process_time()
    for scope, body in requests:

        async def receive(body: bytes = body) -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        await app(dict(scope, state={}), receive, send)
    elapsed = time.process_time() - started
    assert all(s in (200, 201) for s in statuses), set(statuses)
    return elapsed


async def measure(count: int, rounds: int) -> dict[str, list[float]]:
    """CPU microseconds per request of each variant, per round. Every variant's app runs in
    this one process at once, and the rounds interleave them: what differs between
    processes (memory layout, hash seeds) and what drifts over time (other jobs) then
    weighs on every variant alike, which at a few microseconds matters."""
    requests = _requests(count)
    figures: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        async with contextlib.AsyncExitStack() as stack:
            apps = {}
            for name, flags in VARIANTS.items():
                settings = Settings(storage="memory", data_dir=Path(tmp) / name, **flags)
                app = create_app(settings)
                if name == "none":
                    app.request_observer = None  # type: ignore[attr-defined]
                await stack.enter_async_context(app.router.lifespan_context(app))
                await _run(app, requests)  # warm up: accounts made, code paths hot
                apps[name] = app
            for round_ in range(rounds):
                for name, app in apps.items():
                    us = await _run(app, requests) / count * 1e6
                    figures[name].append(us)
                    print(f"round {round_ + 1}: {name:<12} {us:6.1f} us CPU/request", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5_000, help="per variant and round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    # Log lines go where a served process's go (stderr: a file or a pipe); here a file.
    with tempfile.NamedTemporaryFile("w", suffix=".log") as sink:
        sys.stderr = sink
        try:
            logging.config.dictConfig(log_config("info", "json"))
            logging.getLogger("app").setLevel(logging.WARNING)  # startup lines: not measured
            logging.getLogger("app.requests").setLevel(logging.INFO)
            figures = asyncio.run(measure(args.requests, args.rounds))
        finally:
            sys.stderr = sys.__stderr__
    print()
    base = figures["none"]
    for name, values in figures.items():
        low, mid = min(values), sorted(values)[len(values) // 2]
        print(
            f"{name:<12} best {low:6.1f} us/request ({low - min(base):+5.1f} us, "
            f"{low / min(base) - 1:+.1%} against none); median {mid:6.1f} "
            f"({mid - sorted(base)[len(base) // 2]:+5.1f} us)"
        )


if __name__ == "__main__":
    main()
