"""POST /v1/batch in process (ASGI, no HTTP): microseconds per operation, against the ceiling.

Run: ``.venv/bin/python bench/batch_inproc.py [--storage sqlite memory] [--ops N]``.

The same batches as ``bench/http.py`` and ``bench/ceiling.py`` (grants and consumptions
alternating over 1,000 accounts, created first by a warm-up batch), sent straight to the
application object: what the batch path itself costs, without uvicorn, sockets or a client
competing for the two cores. The ceiling runs in the same invocation and each figure is also
given as a ratio to it (ceiling us/op over batch us/op; 1.0 would be the ceiling). Best of
``--rounds`` batches, as the ceiling counts: the machine is shared and noisy. Run it under
``py-spy record`` to see where the time goes by stage.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

# bench/ holds http.py: drop it from the import path, or "import http.client" would find it.
HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
sys.path.insert(0, str(HERE.parent))

from bench.ceiling import ACCOUNTS, FAR_EXPIRY, batch_body
from bench.ceiling import measure as measure_ceiling

Message = MutableMapping[str, Any]
App = Callable[
    [Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]


async def _post(app: App, payload: bytes) -> tuple[int, bytes]:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await asyncio.Event().wait()  # never disconnects
        raise AssertionError

    status = 0
    chunks: list[bytes] = []

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    scope: Message = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/batch",
        "raw_path": b"/v1/batch",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    return status, b"".join(chunks)


async def measure(storage: str, ops: int, rounds: int) -> float:
    """Best microseconds per operation of ``rounds`` batches of ``ops`` on ``storage``."""
    from app.main import create_app
    from app.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(Settings(storage=storage, data_dir=Path(tmp)))
        async with app.router.lifespan_context(app):
            warm = [
                {
                    "op": "grant",
                    "account_id": f"acct-{i}",
                    "amount": 10**6,
                    "timestamp": 1,
                    "expiry": FAR_EXPIRY,
                }
                for i in range(ACCOUNTS)
            ]
            status, out = await _post(app, json.dumps({"operations": warm}).encode())
            assert status == 200, out[:300]
            payload = batch_body(ops)
            for _ in range(3):
                await _post(app, payload)
            best_s = float("inf")
            for _ in range(rounds):
                started = time.perf_counter()
                status, out = await _post(app, payload)
                best_s = min(best_s, time.perf_counter() - started)
                assert status == 200, out[:300]
    return best_s / ops * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--storage", nargs="+", default=["sqlite", "memory"])
    parser.add_argument("--ops", type=int, default=1000, help="operations per batch")
    parser.add_argument("--rounds", type=int, default=30, help="batches; the best counts")
    args = parser.parse_args()
    ceiling_us = 1e6 / measure_ceiling(args.ops, args.rounds)
    print(f"ceiling: {ceiling_us:.1f} us/op")
    for storage in args.storage:
        us = asyncio.run(measure(storage, args.ops, args.rounds))
        print(
            f"batch in process, {storage}, {args.ops:,} ops a batch: {us:.1f} us/op "
            f"({1e6 / us:,.0f} ops/s), {ceiling_us / us:.2f} of the ceiling"
        )


if __name__ == "__main__":
    sys.exit(main())
