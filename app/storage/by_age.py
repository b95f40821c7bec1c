"""Records held until they expire by age (Idempotency-Keys, usage-stream event ids): by key,
and in the order they were made, so that the ones to forget are found at the front.

Why: a scan of every record held for the few that expired holds the event loop for as long
as the scan takes (10^6 keys: 70 ms to 0.2 s here), and it ran on a request at the bound on
keys (once a second) and, with the forgetting, in the hourly sweep (10^6 expired keys: 0.7 s
in one piece). From the front, the work is the records forgotten plus one, and the callers
take them a slice at a time (``FORGET_SLICE``), letting the loop run between slices. The
order is a deque of the records beside the dict: a dict's own order would do, but each scan
of it from the start steps again over every entry deleted since it last grew.

The order is the order of ``put`` calls, which make each record with the wall clock of the
moment: the order of their ``created_at_s``, but for a wall clock stepped back (or records
made on one side of an await and held on the other). A record made earlier than one before
it is then forgotten when that one is, later than it could be, never earlier: the retention
is "at least" (SPEC). Records read back at startup are put oldest first.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Final, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")

# The most records a caller forgets without letting the event loop run: about 2 ms here
# (0.7 to 0.9 us a key for the dict and its tenants' counts). A request that arrives
# during a sweep waits a few slices (its read, its task's wake-up, its turn): under 15 ms.
FORGET_SLICE: Final = 2_000


class ByAge(Generic[K, V]):
    """Records by key, forgotten oldest first. ``key_of`` gives a record's key."""

    __slots__ = ("_key_of", "_order", "_records")

    def __init__(self, key_of: Callable[[V], K]) -> None:
        self._key_of = key_of
        self._records: dict[K, V] = {}
        # Every record put, oldest first; one that was put again under its key since (an
        # expired key used again before it was forgotten) is skipped when it comes up.
        self._order: deque[V] = deque()

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[K]:
        return iter(self._records)

    def get(self, key: K) -> V | None:
        return self._records.get(key)

    def discard(self, key: K, value: V) -> bool:
        """Forget ``key`` if ``value`` is still its record (out of turn: its place in the
        order is passed over when it comes up). Whether it was."""
        if self._records.get(key) is not value:
            return False
        del self._records[key]
        return True

    def put(self, value: V) -> None:
        """Hold ``value`` as the newest record (over any record of its key)."""
        self._records[self._key_of(value)] = value
        self._order.append(value)

    def pop_oldest(self, expired: Callable[[V], bool], limit: int) -> list[K]:
        """Forget the oldest records for which ``expired`` holds, up to the first that does
        not, at most ``limit`` of them; their keys, oldest first."""
        assert limit >= 1
        records, order, key_of = self._records, self._order, self._key_of
        taken: list[K] = []
        while order and len(taken) < limit:
            value = order[0]
            key = key_of(value)
            if records.get(key) is not value:  # put again since: that one comes later
                order.popleft()
                continue
            if not expired(value):
                break
            order.popleft()
            del records[key]
            taken.append(key)
        assert len(order) >= len(records)
        return taken
