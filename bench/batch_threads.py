"""Where a batch run's time goes, by thread: the real server under wrk's batches, on SQLite.

Run: ``./scripts/bench batch_threads [--seconds S] [--runs 1000x8 1000x32 10000x2]``
(needs ``wrk``; Linux, for ``/proc``).

For each run (operations per batch x connections) a fresh server is started the way the
README starts it (``gpu-credits serve``, SQLite, the defaults), its 1,000 accounts are made,
and wrk posts ``bench/http.py``'s batches for ``--seconds``. Around that window the script
reads, for each of the server's threads, its CPU time (``/proc/PID/task/TID/stat``), and
the server's own metrics (``/metrics``: the storage commits' count, total seconds and group
sizes). It prints, per run:

- operations/s, and the server's CPU microseconds per operation, per thread: the event loop
  (HTTP, validation, applying, rows, answers) and the SQLite writer (the group's statement,
  its commit and fsync), each also as a share of one core;
- the writer's busy share of the wall clock (the commits' total seconds over the window:
  near 100% and the writer is what the pipeline waits for), the batches per commit, and a
  commit's mean time.

What it is for: telling which thread bounds the batch path in a configuration (the loop's
Python or the writer's SQLite), and whether a change moved the work or removed it. The
machine is shared: compare runs made together (``--baseline-src DIR`` runs an earlier
checkout's service in the same invocation, interleaved).
"""

from __future__ import annotations

import sys
from pathlib import Path

# bench/ holds http.py: drop it from the import path (see bench/http.py).
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import argparse
import os
import re
import tempfile
import time

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._procs import Server
from bench.http import batch_lua, run_wrk, warm_up

_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) so far of each of ``pid``'s threads, by thread id."""
    totals: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        fields = stat.rpartition(")")[2].split()
        totals[int(task.name)] = (int(fields[11]) + int(fields[12])) / _TICKS_PER_S
    return totals


_SAMPLE = re.compile(r"^(gpu_credits_storage_commit_(?:seconds|group_size)_(?:sum|count)) (\S+)$")


def commit_figures(base_url: str) -> dict[str, float]:
    """The storage commit histograms' sums and counts, from the server's /metrics."""
    text = httpx.get(f"{base_url}/metrics", timeout=30).text
    figures: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match:
            figures[match[1]] = float(match[2])
    return figures


def measure(src: Path | None, ops: int, connections: int, seconds: float, tmp: Path) -> str:
    server = Server(tmp / f"{src.name if src else 'this'}-{ops}x{connections}", src=src)
    server.start()
    try:
        warm_up(server.base_url)
        assert server.proc is not None
        pid = server.proc.pid
        cpu_before = thread_cpu_s(pid)
        commits_before = commit_figures(server.base_url)
        started = time.monotonic()
        result = run_wrk("batch", server.base_url, batch_lua(ops), seconds, connections, ops)
        wall_s = time.monotonic() - started
        cpu_after = thread_cpu_s(pid)
        commits_after = commit_figures(server.base_url)
    finally:
        server.stop()
    done = result.ops_per_s * wall_s

    def delta(name: str) -> float:
        return commits_after.get(name, 0.0) - commits_before.get(name, 0.0)

    # The event loop runs on the process's main thread (its id is the pid). Python 3.11
    # does not name its threads for the OS, so the writer is found as the busiest other
    # thread: the SQLite writer does a batch's commit; the others (uvloop's, the request
    # log's, the reader's) do little in a batch run.
    used = {t: cpu_after[t] - cpu_before.get(t, 0.0) for t in cpu_after}
    loop_s = used.pop(pid, 0.0)
    writer_s = max(used.values(), default=0.0)
    other_s = sum(used.values()) - writer_s
    threads = [
        f"loop {loop_s / done * 1e6:.1f} us/op ({loop_s / wall_s:.0%})",
        f"writer {writer_s / done * 1e6:.1f} us/op ({writer_s / wall_s:.0%})",
    ]
    commits = delta("gpu_credits_storage_commit_seconds_count")
    busy = delta("gpu_credits_storage_commit_seconds_sum") / wall_s
    per_commit = delta("gpu_credits_storage_commit_group_size_sum") / max(commits, 1)
    commit_ms = delta("gpu_credits_storage_commit_seconds_sum") / max(commits, 1) * 1e3
    return (
        f"{ops:>6,} ops x {connections:>2} conns {src.name if src else 'this':>8}: "
        f"{result.ops_per_s:>9,.0f} ops/s; {'; '.join(threads)}; others "
        f"{other_s / done * 1e6:.1f} us/op; writer busy {busy:.0%}, "
        f"{per_commit:.1f} batches a commit, {commit_ms:.1f} ms each"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--runs", nargs="+", default=["1000x8", "1000x32", "10000x2"], help="OPSxCONNECTIONS"
    )
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds")
    parser.add_argument("--baseline-src", type=Path, help="an earlier checkout, run alongside")
    args = parser.parse_args()
    sources: list[Path | None] = [None] if args.baseline_src is None else [args.baseline_src, None]
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for run in args.runs:
                ops, _, connections = run.partition("x")
                for src in sources:
                    where = Path(tmp) / f"round{round_}"
                    print(measure(src, int(ops), int(connections), args.seconds, where), flush=True)


if __name__ == "__main__":
    main()
