"""CPython's cyclic collector, tuned for a ledger (process-wide: the collector is).

A young collection scans every tracked object allocated since the last one that is still
alive. Under batch load that is every batch in flight: about a dozen objects per operation
when measured (counted at collections: the request's model and its set of fields, the
service's operation, the change, its account row, entry and live grant, the receipt, tuples;
a few fewer since the operations became dataclasses and the common write lost its ledger
line), all of which die as the answers go out. With a fixed threshold the collector
rescans them again and again and finds nothing. So the threshold grows with the operations
in flight (``batch_in_flight``) and comes back when they are answered: what triggers a
collection is then what else was allocated (garbage that may hold a cycle, and what the
ledger keeps), not the batches.
Measured in process on SQLite (a file grown by the run before): 32 clients posting 1,000-op
batches collected 7 times in 192 batches (1.9 us per operation), then once (0.9); two
clients posting 10,000-op batches 16 times in 16 (2.4 to 2.6 us per operation, the loop's
CPU 22 us per operation), then once (0.3; 19 us).

Why not a larger fixed threshold instead: what a young collection finds alive also includes
what memory storage keeps; at 200,000, single operations at a fixed rate had a p99 of 32-35
ms (the README's target is 25). Single operations keep the base.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

# Objects allocated (net) between collections of the young generation; young collections
# between collections of the middle one; middle ones between full ones. The middle
# generation is collected about as often as with (50,000, 50): every 2.5 million objects.
GC_THRESHOLDS: Final = (100_000, 25, 100)
# Tracked objects an operation keeps alive while its batch is in flight (counted with
# gc.get_objects(0) under load: 12.2 for grants and consumptions, before the changes that
# made fewer), with room to spare: an upper bound.
OBJECTS_PER_OPERATION: Final = 16
# The most the young threshold grows: 2 million objects more, 125,000 operations in flight
# (the benchmark's heaviest load, 32 batches of 1,000, needs 512,000). The request limits do
# not bound it first (2,048 requests in flight, 256 per client address, each batch up to
# 10,000 operations): this cap does. So a young collection scans at most about 2 million
# objects (0.15 s for 2 million changes and account rows here), and at most that many, live
# or cyclic garbage, wait for one.
MAX_YOUNG_THRESHOLD: Final = GC_THRESHOLDS[0] + 2_000_000


class _Collector:
    def __init__(self) -> None:
        self.tuned = False
        self.operations_in_flight = 0
        # One event loop serves in production; tests may run apps on other threads.
        self._lock = threading.Lock()

    def tune(self) -> None:
        """Freeze what startup loaded and collect the young generation less often than
        CPython's default (every 700 allocations rescans the long-lived trackers: a third of a
        batch's time in an early profile); the service creates no reference cycles on its hot
        path, so little is left for the collector to find."""
        gc.collect()
        gc.freeze()
        with self._lock:
            self.tuned = True
            self._set()

    def _set(self) -> None:
        young, middle, old = GC_THRESHOLDS
        extra = OBJECTS_PER_OPERATION * self.operations_in_flight
        gc.set_threshold(min(young + extra, MAX_YOUNG_THRESHOLD), middle, old)

    @contextmanager
    def batch_in_flight(self, operations: int) -> Iterator[None]:
        """While a batch of ``operations`` is being applied, committed and answered."""
        assert operations >= 0
        self._add(operations)
        try:
            yield
        finally:
            self._add(-operations)

    def _add(self, operations: int) -> None:
        with self._lock:
            self.operations_in_flight += operations
            assert self.operations_in_flight >= 0
            if self.tuned:
                self._set()


COLLECTOR: Final = _Collector()
