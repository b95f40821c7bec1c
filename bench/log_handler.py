"""What writing the request log costs per line, by handler: ``logging.StreamHandler`` (one
``write()`` a line, what the service used before) against ``app.logs.BufferedStreamHandler``
(lines batched, one ``write()`` per flush), the same request-log record through the same
``JsonFormatter``, into a file and into a pipe read by another process (as under
``docker logs`` or systemd). CPU time of this process per line, best of the rounds
(interleaved), so other jobs on a shared machine weigh little.

Run: ``./scripts/bench log_handler [--lines N] [--rounds R]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds http.py: drop it from the import path (see bench/http.py).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import logging
import subprocess
import tempfile
import time
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.logs import FIELDS_ATTR, BufferedStreamHandler, JsonFormatter

FIELDS = {
    "request_id": "4bf92f3577b34da6a3ce929d0e0e4736",
    "method": "POST",
    "route": "/v1/accounts/{account_id}/grants",
    "path": "/v1/accounts/acct-17/grants",
    "account": "acct-17",
    "status": 201,
    "latency_ms": 0.412,
    "key_id": None,
    "client": "127.0.0.1",
}


def per_line_us(handler: logging.Handler, lines: int) -> float:
    logger = logging.Logger("bench.requests", logging.INFO)
    logger.addHandler(handler)
    started = time.process_time()
    for _ in range(lines):
        logger.info(
            "%s %s %d", "POST", "/v1/accounts/{account_id}/grants", 201, extra={FIELDS_ATTR: FIELDS}
        )
    handler.flush()
    return (time.process_time() - started) / lines * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    logging.logThreads = False  # as app.logs configures a served process
    logging.logProcesses = False
    logging.logMultiprocessing = False
    reader = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert reader.stdin is not None
    pipe: TextIO = open(reader.stdin.fileno(), "w", closefd=False)  # noqa: SIM115
    with tempfile.TemporaryFile("w") as file:
        sinks: dict[str, TextIO] = {"file": file, "pipe": pipe}
        makers: dict[str, Any] = {
            "StreamHandler": logging.StreamHandler,
            "BufferedStreamHandler": BufferedStreamHandler,
        }
        figures: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.rounds):
            for sink_name, sink in sinks.items():
                for name, make in makers.items():
                    handler = make(sink)
                    handler.setFormatter(JsonFormatter())
                    figures.setdefault((sink_name, name), []).append(
                        per_line_us(handler, args.lines)
                    )
                    handler.close()
    pipe.close()
    reader.stdin.close()
    reader.wait()
    for (sink_name, name), values in figures.items():
        print(
            f"{sink_name:<5} {name:<22} best {min(values):5.2f} us/line, "
            f"median {sorted(values)[len(values) // 2]:5.2f}"
        )


if __name__ == "__main__":
    main()
