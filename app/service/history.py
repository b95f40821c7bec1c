"""As-of reads (SPEC section 6): an account's state at a time before its clock, from what
storage keeps, in work that does not grow with the account's history.

- Totals: every entry carries the totals right after it and a late write restates the
  entries after it in place, so the last entry at or before the time answers: one index
  descent.
- One GPU class: the latest checkpoint at or before the time (a final state, stored every
  few hundred writes, see ``app.domain.timeline``) and the writes after it up to the time,
  replayed. At most about ``K`` final writes plus the provisional ones (10,000 at most) lie
  between, so ``MAX_REPLAYED_WRITES`` is a bound, not a cut: only history written before
  checkpoints existed can exceed it, and that read is refused (totals are still answered).
"""

from __future__ import annotations

from typing import Final, Protocol

from app.domain import TrackerState
from app.domain.timeline import replay
from app.service.errors import ClassAsOfUnsupported
from app.service.journal import AsOfRead, as_of_view, write_of
from app.service.results import BalanceView
from app.storage.base import Checkpoint, WriteEntry

MAX_REPLAYED_WRITES: Final = 30_000
_EMPTY: Final = TrackerState(0, 0, 1, ())
# A replayed state may hold more live grants than a write may leave (a bound lowered since).
_NO_LIVE_BOUND: Final = 10**9


class History(Protocol):
    async def read_totals_at(self, account_id: str, timestamp: int) -> tuple[int, int]: ...

    async def read_replay(
        self, account_id: str, timestamp: int, limit: int
    ) -> tuple[Checkpoint | None, list[WriteEntry]]: ...


async def as_of(history: History, read: AsOfRead) -> BalanceView:
    """The committed state at ``read.timestamp``, in total or for ``read.resource``."""
    account_id, timestamp, resource = read.account_id, read.timestamp, read.resource
    if resource is None:
        available, debt = await history.read_totals_at(account_id, timestamp)
        return as_of_view(read, available, debt)
    checkpoint, writes = await history.read_replay(account_id, timestamp, MAX_REPLAYED_WRITES + 1)
    return replayed(read, checkpoint, writes)


def replayed(
    read: AsOfRead, checkpoint: Checkpoint | None, writes: list[WriteEntry]
) -> BalanceView:
    """A class's as-of state: ``checkpoint`` and the stored ``writes`` after it up to
    ``read.timestamp`` (at most ``MAX_REPLAYED_WRITES`` of them, else refused), replayed."""
    resource, timestamp = read.resource, read.timestamp
    assert resource is not None, "totals come from one entry"
    if len(writes) > MAX_REPLAYED_WRITES:
        raise ClassAsOfUnsupported(
            resource,
            timestamp,
            f"more than {MAX_REPLAYED_WRITES} writes lie between it and the account's "
            "nearest checkpoint (history from before late events); totals are answered "
            "(read without resource)",
        )
    tracker = replay(
        _EMPTY if checkpoint is None else checkpoint.state,
        [write_of(w) for w in writes],
        timestamp,
        max_live_grants=_NO_LIVE_BOUND,
    )
    return as_of_view(read, tracker.available_at(timestamp, resource), tracker.debt_of(resource))
