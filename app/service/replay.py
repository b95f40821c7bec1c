"""What late writes cost the event loop, counted before they are applied.

A late write (SPEC section 6) replays the account's provisional writes from its replay base
on, 3 to 10 us each on the event loop, which applies a batch or a stream's chunk without a
pause: 200 late grants behind 8,000 provisional writes held it 16 s in one batch. A usage
stream cuts its chunks by this count (``app.api.events``); a batch, one request and one
transaction, is refused past ``MAX_BATCH_REPLAYED_WRITES`` (``Ledger.batch``).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Final

from app.domain.timeline import REPLAY_SPACING_DIVISOR, AccountTimeline

# Provisional writes one batch's late writes may replay, about (``ReplayCost``). Measured in
# process (memory storage): 5 late writes each behind 10,000 provisional writes (50,000)
# took 0.69 s, about 14 us a replayed write with the request's own work, while the largest
# batch in order (10,000 operations) took 0.26 to 0.32 s. This bounds a late batch to about
# as long: two late writes behind the most provisional writes an account may hold (10,000,
# plus the copy of its state) pass, as every single late write does; past it the batch is
# refused with a problem that says to split it or stream it.
MAX_BATCH_REPLAYED_WRITES: Final = 25_000
# A single write or dry run that replays more provisional writes than this (about 14 ms)
# runs on a copy of its account in a worker thread, the copy then taking the account's
# place (``Ledger._journal_write``): the event loop goes on serving other requests
# meanwhile, sharing the GIL with the thread in 5 ms turns, instead of waiting up to 1.5 s
# for the replay. Below it, the copy would cost more than the wait it saves.
OFF_LOOP_REPLAYED_WRITES: Final = 1_000
# The live grants an atomic batch copies (to put its accounts back on a failure) that count
# as one replayed write (see ``Ledger``'s ``_check_replay_cost``).
ATOMIC_COPY_GRANTS_PER_WRITE: Final = 16

# The account's timeline as it stands before the run is applied (an account not written
# yet: an empty one with the service's window). Read only.
TimelineOf = Callable[[str], AccountTimeline]

_NO_STAMPS: Final[list[int]] = []


class ReplayCost:
    """About how many provisional writes a run of writes will replay, write by write as they
    are counted in, in the order they will be applied: for each, those its account holds
    now from the replay base before it on, with that base's copy, and those after it among
    the run's earlier writes to that account (applied before it, so replayed too; late
    writes mostly come late behind writes just before them), with the base that may lie
    among the run's writes before it and the live grants the run's grants add
    (``AccountTimeline.replay_cost``). A write that replays nothing and that no later one
    replays (before the watermark, or on an account without a window) is not counted."""

    __slots__ = ("_grants", "_latest", "_stamps", "_timeline_of", "total")

    def __init__(self, timeline_of: TimelineOf) -> None:
        self._timeline_of = timeline_of
        self._stamps: dict[str, list[int]] = {}  # per account, the run's timestamps, sorted
        self._grants: dict[str, int] = {}  # per account, the run's grants so far
        self._latest: dict[str, int] = {}  # per account, the run's latest write so far
        self.total = 0

    def add(self, account_id: str, timestamp: int, *, grant: bool = False) -> int:
        """Count a write in (``grant``: it may add a live grant); the total so far."""
        stamps = self._stamps.get(account_id, _NO_STAMPS)
        in_order = not stamps or timestamp >= stamps[-1]
        earlier = len(stamps) if in_order else bisect.bisect_right(stamps, timestamp)
        later = len(stamps) - earlier
        cost = self._timeline_of(account_id).replay_cost(
            timestamp, late=later > 0, earlier=earlier, grown=self._grants.get(account_id, 0)
        )
        # Whatever it replays, a grant may add a live grant that later reads walk, and a
        # write moves the clock (a refused one is behind it: the max keeps the clock).
        if grant:
            self._grants[account_id] = self._grants.get(account_id, 0) + 1
        if timestamp > self._latest.get(account_id, -1):
            self._latest[account_id] = timestamp
        if cost is None:  # refused, or folded at once: replays nothing, nothing replays it
            return self.total
        if stamps is _NO_STAMPS:
            stamps = self._stamps[account_id] = []
        if in_order:  # O(1)
            stamps.append(timestamp)
        else:
            stamps.insert(earlier, timestamp)
        self.total += cost + later
        return self.total

    def latest(self, account_id: str) -> int:
        """The latest timestamp of the run's writes to the account so far (-1: none)."""
        return self._latest.get(account_id, -1)

    def project(self, account_id: str, timestamp: int) -> int:
        """Count in a balance read at or after the account's clock (a projection): it
        leaves out the live grants expiring by then, walking them (``available_at``: O(e),
        about 1 us each), counted as a copy is (an eighth of the live grants, with those
        the run's grants add). Nothing when nothing expires by then (O(1)); the total so
        far."""
        grown = self._grants.get(account_id, 0)
        tracker = self._timeline_of(account_id).current
        if grown or not tracker.expires_nothing_by(timestamp):
            self.total += (tracker.live_grant_count + grown) // REPLAY_SPACING_DIVISOR
        return self.total

    def read(self, account_id: str, timestamp: int) -> int:
        """Count in a class read (the total read needs no replay); the total so far."""
        stamps = self._stamps.get(account_id, _NO_STAMPS)
        earlier = bisect.bisect_right(stamps, timestamp)
        cost = self._timeline_of(account_id).replay_cost(
            timestamp,
            late=earlier < len(stamps),
            earlier=earlier,
            grown=self._grants.get(account_id, 0),
            read=True,
        )
        self.total += cost or 0
        return self.total
