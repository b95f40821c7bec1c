"""Late-write benchmark: AccountTimeline (SPEC section 6) against itself and the tracker.

Run: ``python bench/late.py`` (``--quick`` for a smoke run). As in bench/core.py, everything
is measured in this one process and reported as ratios of figures measured in the same run
(turns, best of several), because the machines are shared and noisy. Times are this
process's CPU time (``time.process_time``), not wall time: on a machine shared with other
busy processes, wall time swings by 2x between identical runs, CPU time by a few percent.

(a) A late write with F provisional writes after it (F = 10, 100, 1,000, 10,000), against an
    in-order write on the same account (same live grants, same provisional writes). Each late
    write is a consumption of 1 credit: every line after it gets a new balance (all upserted)
    and the consumption that reaches the end of a grant is restated; the in-order write is
    the same consumption at the clock.
(b) ``balance_at(T)`` for T in the provisional region (spread over its middle half), with
    10^3 and with 10^4 provisional writes: the ratio should stay near 1 (the cost does not
    grow with the provisional writes), for a total read (from the lines) and a read for one
    class (a mark copied and replayed).
(c) A window of 0, the hot path of every account: the timeline on bench/core.py's call mix
    against the bare tracker's ``grant``/``consume``/``get_balance``, and against what the
    service does per write today (``apply_*``, the journal's ledger entries and live-grant
    records), which is the fair floor: the timeline's answer carries the same.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from core import Call, make_calls

from app.domain import (
    AccountTimeline,
    ConsumeWrite,
    GPUCreditTracker,
    GrantWrite,
    LiveGrant,
    TimelineLimits,
    Write,
)
from app.storage.base import ConsumptionEntry, Entry, ExpirationEntry, GrantEntry

HORIZON = 10**12  # expiries far out: the live grants stay live for the whole run


def build(live: int, provisional: int, seed: int = 5) -> AccountTimeline:
    """An account with ``live`` long-lived live grants, all final, then ``provisional``
    writes (one timestamp each) inside a window that keeps them provisional: grants that
    expire within 100 and consumptions that draw them first, so the account keeps about
    ``live`` + 50 live grants however many provisional writes there are."""
    rng = random.Random(seed)
    timeline = AccountTimeline(window=HORIZON, limits=TimelineLimits(max_provisional=20_000))
    for index in range(live):
        timeline.write(GrantWrite(10**6, index, HORIZON + rng.randint(1, live)))
    timeline.set_window(0)  # everything so far final
    timeline.set_window(HORIZON)
    now = live
    for _ in range(provisional):
        now += 1
        if rng.random() < 0.5:
            timeline.write(GrantWrite(rng.randint(1, 100), now, now + rng.randint(1, 100)))
        else:
            timeline.write(ConsumeWrite(rng.randint(1, 100), now))
    return timeline


def time_writes(timeline: AccountTimeline, writes: list[Write]) -> float:
    """Seconds per write, for ``writes`` applied one after the other. The objects that exist
    already (the account built) are frozen out of the collector's sight, as in bench/core.py:
    otherwise a full collection over them lands on whichever write happens to trigger it."""
    gc.collect()
    gc.freeze()
    try:
        start = time.process_time()
        for write in writes:
            timeline.write(write)
        return (time.process_time() - start) / len(writes)
    finally:
        gc.unfreeze()


def late_cost(live: int, following: int, repeats: int) -> tuple[float, float, int]:
    """(seconds per late write with ``following`` provisional writes after it, seconds per
    in-order write, live grants), measured in turns on one account."""
    timeline = build(live, following + 64)
    late_times: list[float] = []
    in_order_times: list[float] = []
    for _ in range(repeats):
        clock = timeline.clock
        # The late write goes before the last ``following`` provisional writes.
        position = timeline.provisional_count - following
        at = timeline.provisional()[position][2].timestamp - 1
        late_times.append(time_writes(timeline, [ConsumeWrite(1, at)]))
        in_order_times.append(time_writes(timeline, [ConsumeWrite(1, clock + 1)]))
    # In-order writes are cheap: time a batch of them too, for a steadier figure.
    clock = timeline.clock
    batch = [ConsumeWrite(1, clock + 1 + i) for i in range(200)]
    in_order_times.append(time_writes(timeline, batch))
    return min(late_times), min(in_order_times), timeline.current.live_grant_count


def read_cost(live: int, provisional: int, resource: str | None, reads: int) -> float:
    """Seconds per ``balance_at(T)``, T spread over the middle half of the provisional
    region (a class read replays from the nearest mark: its cost depends on where T falls
    between two marks, so one T would say little)."""
    timeline = build(live, provisional)
    if resource is not None:
        timeline.write(GrantWrite(10, timeline.clock + 1, HORIZON, [resource]))
    stamps = [w[2].timestamp for w in timeline.provisional()]
    quarter = len(stamps) // 4
    at = [stamps[quarter + i * 2 * quarter // reads] for i in range(reads)]
    gc.collect()
    gc.freeze()
    best = float("inf")
    try:
        for _ in range(3):
            start = time.process_time()
            for timestamp in at:
                timeline.balance_at(timestamp, resource)
            best = min(best, (time.process_time() - start) / reads)
    finally:
        gc.unfreeze()
    return best


# -- (c) a window of 0 ---------------------------------------------------------------------


def as_writes(calls: list[Call]) -> list[Write | int]:
    """bench/core.py's calls as timeline writes (an int: a balance read at that time)."""
    out: list[Write | int] = []
    for c in calls:
        if c.kind == "grant":
            out.append(GrantWrite(c.amount, c.timestamp, c.expiry))
        elif c.kind == "consume":
            out.append(ConsumeWrite(c.amount, c.timestamp))
        else:
            out.append(c.timestamp)
    return out


def run_timeline(writes: list[Write | int]) -> float:
    timeline = AccountTimeline()
    write, read = timeline.write, timeline.balance_at
    start = time.process_time()
    for w in writes:
        if type(w) is int:
            read(w)
        else:
            write(w)  # type: ignore[arg-type]
    return time.process_time() - start


def run_bare(calls: list[Call]) -> float:
    """bench/core.py's tracker loop (``grant``, ``consume``, ``get_balance``), CPU time."""
    tracker = GPUCreditTracker()
    grant, consume, balance = tracker.grant, tracker.consume, tracker.get_balance
    start = time.process_time()
    for c in calls:
        if c.kind == "grant":
            grant(c.amount, c.timestamp, c.expiry)
        elif c.kind == "consume":
            consume(c.amount, c.timestamp)
        else:
            balance(c.timestamp)
    return time.process_time() - start


def best_of_pair(
    runs: int, first: Callable[[], float], second: Callable[[], float]
) -> tuple[float, float]:
    """bench/core.py's ``best_of_pair``: best of ``runs`` of each, in turns, with the
    objects that exist already frozen out of the collector's sight."""
    gc.collect()
    gc.freeze()
    try:
        times = [(first(), second()) for _ in range(runs)]
    finally:
        gc.unfreeze()
    return min(t[0] for t in times), min(t[1] for t in times)


def run_journal(writes: list[Write | int]) -> float:
    """What the service does per write today (app/service/journal.py, minus its I/O-side
    records): the detailed tracker call, ledger entries with the balance chain, live-grant
    records; a read is the projection."""
    tracker = GPUCreditTracker()
    sequence = 1
    start = time.process_time()
    for w in writes:
        if type(w) is int:
            tracker.available_at(w)
            tracker.debt_of(None)
            continue
        available, debt = tracker.available, tracker.debt
        entries: list[Entry] = []
        live: list[LiveGrant] = []
        if type(w) is GrantWrite:
            g = tracker.apply_grant(w.amount, w.timestamp, w.expiry)
            expired = g.expired
        else:
            assert type(w) is ConsumeWrite
            c = tracker.apply_consume(w.amount, w.timestamp)
            expired = c.expired
        removed = [e.grant_id for e in expired]
        for e in expired:
            available -= e.amount
            entries.append(
                ExpirationEntry(
                    sequence, e.expiry, available, debt, e.grant_id, e.expiry, e.amount, None
                )
            )
            sequence += 1
        if type(w) is GrantWrite:
            entries.append(
                GrantEntry(
                    sequence, w.timestamp, g.available, g.debt, g.grant_id, w.amount,
                    w.expiry, g.settled_debt, g.retained,
                )
            )  # fmt: skip
            if g.retained:
                live.append(LiveGrant(g.grant_id, w.expiry, g.retained, None, w.timestamp))
        else:
            entries.append(
                ConsumptionEntry(
                    sequence, w.timestamp, c.available, c.debt, w.amount, c.consumed,
                    c.debt_added, c.allocation,
                )
            )  # fmt: skip
            for part, left in zip(c.allocation, c.remaining, strict=True):
                if left:
                    live.append(LiveGrant(part.grant_id, part.expiry, left, None, 0))
                else:
                    removed.append(part.grant_id)
        sequence += 1
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args()
    live, followings, repeats, runs = 1_000, [10, 100, 1_000, 10_000], 5, 3
    reads_small, reads_big, reads = 1_000, 10_000, 200
    calls_n, live_n = 200_000, 100_000
    if args.quick:
        live, followings, repeats, runs = 200, [10, 100, 1_000], 2, 1
        reads_small, reads_big, reads = 100, 1_000, 50
        calls_n, live_n = 20_000, 10_000

    print(f"(a) late write vs in-order write, {live} live grants (a consumption of 1 each)")
    print(f"    {'following':>10} {'late us':>10} {'in-order us':>12} {'ratio':>8}")
    for following in followings:
        late, in_order, count = late_cost(live, following, repeats)
        print(
            f"    {following:>10,} {late * 1e6:>10.1f} {in_order * 1e6:>12.1f} "
            f"{late / in_order:>7.1f}x   ({count} live)"
        )

    print(f"(b) balance_at(T), middle half, {reads_small:,} vs {reads_big:,} provisional writes")
    print(f"    {'read':>10} {'small us':>10} {'big us':>10} {'ratio':>8}")
    for name, resource in (("total", None), ("class", "h100")):
        small = read_cost(live, reads_small, resource, reads)
        big = read_cost(live, reads_big, resource, reads)
        print(f"    {name:>10} {small * 1e6:>10.1f} {big * 1e6:>10.1f} {big / small:>7.2f}x")

    calls = make_calls(calls_n, live_n)
    writes = as_writes(calls)
    print(f"(c) a window of 0 on bench/core.py's mix, {len(calls):,} calls, {live_n:,} live")

    def pair(name: str, other: Callable[[], float]) -> None:
        timeline_s, other_s = best_of_pair(runs + 2, lambda: run_timeline(writes), other)
        print(
            f"    timeline {timeline_s:.3f} s vs {name} {other_s:.3f} s: "
            f"{timeline_s / other_s:.2f}x"
        )

    pair("apply_* + journal entries", lambda: run_journal(writes))
    pair("bare tracker calls", lambda: run_bare(calls))


if __name__ == "__main__":
    main()
