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

# Provisional writes one batch's late writes may replay, about (``ReplayCost``). Measured in
# process (memory storage): 5 late writes each behind 10,000 provisional writes (50,000)
# took 0.69 s, about 14 us a replayed write with the request's own work, while the largest
# batch in order (10,000 operations) took 0.26 to 0.32 s. This bounds a late batch to about
# as long: two late writes behind the most provisional writes an account may hold (10,000,
# plus the copy of its state) pass, as every single late write does; past it the batch is
# refused with a problem that says to split it or stream it.
MAX_BATCH_REPLAYED_WRITES: Final = 25_000

# (account id, timestamp, late): the provisional writes the account holds now that a write
# at that timestamp would replay, with its base's copy (``AccountTimeline.replay_cost``).
Estimate = Callable[[str, int, bool], int]


class ReplayCost:
    """About how many provisional writes a run of writes will replay, write by write as they
    are counted in, in the order they will be applied: for each, those its account holds now
    from the replay base before it on, with that base's copy (``estimate``), and those after
    it among the run's earlier writes to that account (applied before it, so replayed too;
    late writes mostly come late behind writes just before them)."""

    __slots__ = ("_estimate", "_stamps", "total")

    def __init__(self, estimate: Estimate) -> None:
        self._estimate = estimate
        self._stamps: dict[str, list[int]] = {}  # per account, the run's timestamps, sorted
        self.total = 0

    def add(self, account_id: str, timestamp: int) -> int:
        """Count a write in; the total so far."""
        stamps = self._stamps.get(account_id)
        if stamps is None:
            stamps = self._stamps[account_id] = []
        late = bool(stamps) and timestamp < stamps[-1]
        if not late:  # in order within the run: O(1)
            stamps.append(timestamp)
        else:
            self.total += len(stamps) - bisect.bisect_right(stamps, timestamp)
            bisect.insort_right(stamps, timestamp)
        # Late behind the run's own writes, it is late however the account is now: it
        # copies a replay base as any late write does.
        self.total += self._estimate(account_id, timestamp, late)
        return self.total
