"""Where a single grant's time goes: the real server under wrk, sampled with py-spy, against
the bare FastAPI endpoint (``bench/bare_app.py``) sampled the same way in the same run.

Run: ``./scripts/bench profile_http [--seconds S] [--rate HZ]`` (needs ``wrk`` and the dev
extra's ``py-spy``; as root, or with ptrace allowed).

Each server is loaded with single grants over 1,000 accounts (memory storage, 64
connections, the default settings: metrics and the request log on) while py-spy samples it
(``--nonblocking``, so the server is not paused). Every sample is charged to the innermost
frame that belongs to one of the layers below (a frame of the standard library is charged to
the layer that called it: ``json`` under the request log is the request log's); samples
times the sampling interval, divided by the requests answered while sampling, give CPU
microseconds per request per layer, which are then scaled so that they add up to the
server's CPU time per request read from /proc (on a busy machine py-spy also samples a thread
waiting for a core, and its totals run high; the shares hold). ``--baseline-src DIR`` (a
checkout of an earlier commit, e.g. from ``git archive``) profiles that version's service
too, in the same run.
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds http.py: drop it from the import path (see bench/http.py).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import re
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import importlib.util

from bench._procs import Server

_spec = importlib.util.spec_from_file_location("bench_http", ROOT / "bench" / "http.py")
assert _spec is not None
assert _spec.loader is not None
bench_http = importlib.util.module_from_spec(_spec)
sys.modules["bench_http"] = bench_http
_spec.loader.exec_module(bench_http)

OTHER = "other (GC, interpreter, unattributed)"
# Layer, and the frames (py-spy's "function (file:line)") that belong to it. The innermost
# frame that matches any layer wins; the first matching layer in this order wins a frame.
LAYERS: list[tuple[str, str]] = [
    ("request log (record, JSON, write)", r"\(logging/|\(app/logs\.py|RequestObserver\._log "),
    ("request id, metrics (app/api/requests.py)", r"\(requests\.py|\(app/metrics\.py"),
    ("our limits (limits.py, http_protocol.py)", r"\(limits\.py|\(http_protocol\.py"),
    ("route guard: auth, media type (routing.py)", r"\(routing\.py|\(auth\.py|\(app/keys\.py"),
    ("body parse (strict JSON)", r"\(strict_json\.py|\(json/decoder|\(json/__init__"),
    ("endpoint (routes.py, idempotency)", r"\(routes\.py|\(idempotent\.py|\(bare_app\.py"),
    ("ledger service (service, domain, storage)", r"\(app/(service|adapters|domain|storage)/"),
    ("rendering, Response object", r"\(render\.py|\(starlette/responses\.py|\(json/encoder"),
    (
        "FastAPI handling: parameters, validation",
        r"\(fastapi/dependencies/|\(pydantic|\(fastapi/_compat|\(email/|\(fastapi/encoders",
    ),
    (
        "FastAPI/Starlette routing, Request object",
        r"\(fastapi/routing\.py|\(starlette/routing\.py|\(starlette/requests\.py"
        r"|\(starlette/datastructures|\(fastapi/_body_limit",
    ),
    (
        "middleware stack (errors, exceptions, telemetry, proxy headers)",
        r"\(starlette/middleware|\(starlette/_exception_handler|\(fastapi/applications"
        r"|\(starlette/applications|\(fastapi/middleware|\(fastapi/telemetry|\(uvicorn/middleware"
        r"|\(trace/|\(metrics/_internal|\(_logs/|\(context/",
    ),
    ("uvicorn protocol, socket writes, event loop", r"\(uvicorn/|\(asyncio/|\(uvloop"),
]
_MATCHERS = [(name, re.compile(pattern)) for name, pattern in LAYERS]


def layer_of(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, matcher in _MATCHERS:
            if matcher.search(frame):
                return name
    return OTHER


def us_per_request(raw: Path, requests: int, rate_hz: int) -> dict[str, float]:
    """CPU microseconds per request per layer, from py-spy's raw (collapsed) output."""
    samples: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = stack.split(";")
        if "_flush_forever" in stack and "_write_waiting" not in stack:
            continue  # the log flusher thread waiting for its next flush: idle, not work
        samples[layer_of(frames)] += int(count)
    return {name: n * 1e6 / rate_hz / requests for name, n in samples.items()}


def scaled(layers: dict[str, float], cpu_us: float) -> dict[str, float]:
    """The layers scaled to the CPU time the process really used. On a busy machine py-spy
    also samples a thread that is ready to run but waiting for a core (it cannot tell), so
    its totals run high there; the shares between layers stay right."""
    total = sum(layers.values())
    return {name: us * cpu_us / total for name, us in layers.items()} if total else layers


def profile(
    name: str, pid: int, url: str, seconds: float, rate_hz: int, out: Path
) -> tuple[dict[str, float], float, float]:
    """(us per request per layer, requests/s, CPU us per request from /proc)."""
    bench_http.run_wrk("warm-up", url, bench_http.GRANT_ONLY_LUA, 2, 64, 1)
    spy_command = [str(Path(sys.executable).parent / "py-spy"), "record", "--nonblocking"]
    spy = subprocess.Popen(
        [*spy_command, "-r", str(rate_hz), "-f", "raw", "-o", str(out), "--pid", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(1.0)  # py-spy attaches; samples before the load are idle and not recorded
        cpu_before_s = bench_http._cpu_seconds(pid)
        result = bench_http.run_wrk(name, url, bench_http.GRANT_ONLY_LUA, seconds, 64, 1)
        cpu_us = (bench_http._cpu_seconds(pid) - cpu_before_s) / result.requests * 1e6
    finally:
        spy.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
        spy.wait(timeout=60)
    assert not result.errors, result.line()
    layers = scaled(us_per_request(out, result.requests, rate_hz), cpu_us)
    return layers, result.requests_per_s, cpu_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="also profile the service of this checkout (an earlier commit) in the same run",
    )
    args = parser.parse_args()
    columns: dict[str, tuple[dict[str, float], float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        bare, bare_url = bench_http.start_bare()
        try:
            columns["bare FastAPI"] = profile(
                "bare", bare.pid, bare_url, args.seconds, args.rate, Path(tmp) / "bare.txt"
            )
        finally:
            bare.terminate()
            bare.wait()
        services: dict[str, Path | None] = {"service": None}
        if args.baseline_src is not None:
            services = {"baseline": args.baseline_src.resolve(), "service": None}
        for name, src in services.items():
            server = Server(Path(tmp) / name, "memory", src=src)
            server.start()
            try:
                assert server.proc is not None
                bench_http.warm_up(server.base_url)
                columns[name] = profile(
                    name,
                    server.proc.pid,
                    server.base_url,
                    args.seconds,
                    args.rate,
                    Path(tmp) / f"{name}.txt",
                )
            finally:
                server.stop()
    _print_table(columns, lambda name: name)


def _print_table(
    columns: dict[str, tuple[dict[str, float], float, float]], label: Callable[[str], str]
) -> None:
    names = list(columns)
    print("| CPU us per single grant | " + " | ".join(label(n) for n in names) + " |")
    print("|---|" + "---:|" * len(names))
    for layer in [name for name, _ in LAYERS] + [OTHER]:
        print(
            f"| {layer} | "
            + " | ".join(f"{columns[n][0].get(layer, 0.0):.1f}" for n in names)
            + " |"
        )
    totals = " | ".join(f"**{columns[n][2]:.1f}**" for n in names)
    print(f"| **total: CPU us per request (/proc)** | {totals} |")
    print(
        "| requests/s under py-spy | " + " | ".join(f"{columns[n][1]:,.0f}" for n in names) + " |"
    )
    print()
    for name in names[1:]:
        ratio = columns[name][1] / columns[names[0]][1]
        print(f"{name} / {names[0]}, requests/s under py-spy: {ratio:.2f}")


if __name__ == "__main__":
    main()
