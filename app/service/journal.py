"""Pure: one operation on one account's state, and what storage must record of it.

Each function applies an operation to an ``AccountState`` (the tracker and the next ledger
sequence) and returns the ``Change`` storage makes durable (the account's row, the live
grants added, updated or removed, the ledger entries) with the answer for the caller. No
I/O, no clock, no locks: the service calls these inside a unit of work, and single requests
and batches share them, so a rule lives here once.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from app.domain import (
    ClassList,
    ConsumeResult,
    Debt,
    Expiration,
    GPUCreditTracker,
    InvalidInput,
    LiveGrant,
)
from app.service.errors import ClassAsOfUnsupported, GrantAlreadyVoided, GrantNotFound
from app.service.results import (
    AllocationView,
    BalanceView,
    ConsumptionReceipt,
    GrantReceipt,
    GrantView,
    LiveGrantView,
    VoidReceipt,
)
from app.storage.base import (
    AccountRow,
    Change,
    ConsumptionEntry,
    Entry,
    ExpirationEntry,
    GrantEntry,
    VoidEntry,
)

Totals = tuple[int, int]  # (available, debt) at some time


@dataclass(slots=True)
class AccountState:
    """One account as a unit of work holds it: its tracker and its ledger's next sequence."""

    account_id: str
    tracker: GPUCreditTracker
    next_sequence: int

    @property
    def exists(self) -> bool:
        """An account exists once a write has recorded something (sequence 1 is taken)."""
        return self.next_sequence > 1


@dataclass(frozen=True, slots=True)
class Label:
    """A grant's name and metadata (SPEC section 7), kept with its grant entry and shown
    wherever the grant is; the API layer enforces their limits."""

    name: str | None = None
    metadata: dict[str, str] | None = None


NO_LABEL: Final = Label()


@dataclass(slots=True)
class AsOfRead:
    """A balance read at a time before the account's clock: the stored history answers."""

    account_id: str
    timestamp: int


def grant(
    account: AccountState,
    amount: int,
    timestamp: int,
    expiry: int,
    live_room: int | None,
    label: Label = NO_LABEL,
    resources: ClassList | None = None,
) -> tuple[Change, GrantReceipt]:
    """Raises ``LedgerError`` (``NoLiveRoom`` past ``live_room``) and changes nothing then."""
    tracker = account.tracker
    before = (tracker.available, tracker.debt)
    result = tracker.apply_grant(amount, timestamp, expiry, live_room, resources=resources)
    entries = _expiration_entries(account, result.expired, *before)
    sequence = _next_sequence(account)
    entries.append(
        GrantEntry(
            sequence,
            timestamp,
            result.available,
            result.debt,
            grant_id=result.grant_id,
            amount=amount,
            expiry=expiry,
            settled_debt=result.settled_debt,
            retained=result.retained,
            name=label.name,
            metadata=label.metadata,
            resources=result.resources,
        )
    )
    change = _change(account, entries)
    change.removed_grant_ids.extend(e.grant_id for e in result.expired)
    if result.retained:
        change.upserted_live_grants.append(
            LiveGrant(result.grant_id, expiry, result.retained, result.resources, timestamp)
        )
    receipt = GrantReceipt(
        account_id=account.account_id,
        grant_id=result.grant_id,
        sequence=sequence,
        timestamp=timestamp,
        amount=amount,
        expiry=expiry,
        balance=result.available - result.debt,
        available=result.available,
        debt=result.debt,
        settled_debt=result.settled_debt,
        retained=result.retained,
        name=label.name,
        metadata=label.metadata,
        resources=_listed(result.resources),
    )
    return change, receipt


def void(
    account: AccountState,
    grant_id: int,
    timestamp: int,
    grant: GrantEntry | None,
    voided: VoidEntry | None,
) -> tuple[Change, VoidReceipt]:
    """Void a grant (SPEC section 7): ``grant`` and ``voided`` are its grant entry and the
    entry that voided it, if any (read from storage or from the batch so far). Raises
    ``GrantNotFound``, ``GrantAlreadyVoided`` or ``LedgerError`` and changes nothing then."""
    account_id = account.account_id
    if grant is None:
        raise GrantNotFound(account_id, grant_id)
    if voided is not None:
        raise GrantAlreadyVoided(account_id, grant_id, voided.timestamp)
    if timestamp < grant.timestamp:
        raise InvalidInput(
            "timestamp", f"{timestamp} is before grant {grant_id}'s timestamp {grant.timestamp}"
        )
    tracker = account.tracker
    before = (tracker.available, tracker.debt)
    result = tracker.apply_void(grant_id, timestamp)
    entries = _expiration_entries(account, result.expired, *before)
    sequence = _next_sequence(account)
    entries.append(
        VoidEntry(sequence, timestamp, result.available, result.debt, grant_id, result.removed)
    )
    change = _change(account, entries)
    change.removed_grant_ids.extend(e.grant_id for e in result.expired)
    if result.removed:
        change.removed_grant_ids.append(grant_id)
    receipt = VoidReceipt(
        account_id=account_id,
        grant_id=grant_id,
        sequence=sequence,
        timestamp=timestamp,
        amount=result.removed,
        balance=result.available - result.debt,
        available=result.available,
        debt=result.debt,
    )
    return change, receipt


def consume(
    account: AccountState, amount: int, timestamp: int, resource: str | None = None
) -> tuple[Change, ConsumptionReceipt]:
    """Raises ``LedgerError`` and changes nothing then."""
    tracker = account.tracker
    before = (tracker.available, tracker.debt)
    result = tracker.apply_consume(amount, timestamp, resource)
    entries = _expiration_entries(account, result.expired, *before)
    sequence = _next_sequence(account)
    allocation = [
        AllocationView(a.grant_id, a.expiry, a.amount, _listed(a.resources))
        for a in result.allocation
    ]
    entries.append(
        ConsumptionEntry(
            sequence,
            timestamp,
            result.available,
            result.debt,
            amount=amount,
            consumed=result.consumed,
            debt_added=result.debt_added,
            allocation=result.allocation,
            resource=resource,
        )
    )
    change = _change(account, entries)
    change.removed_grant_ids.extend(e.grant_id for e in result.expired)
    _record_allocation(change, result)
    receipt = ConsumptionReceipt(
        account_id=account.account_id,
        sequence=sequence,
        timestamp=timestamp,
        amount=amount,
        balance=result.available - result.debt,
        available=result.available,
        debt=result.debt,
        consumed=result.consumed,
        debt_added=result.debt_added,
        allocation=allocation,
        resource=resource,
    )
    return change, receipt


def view(account_id: str, tracker: GPUCreditTracker, resource: str | None = None) -> BalanceView:
    """The account at its clock, in total or for class ``resource``."""
    return projection(account_id, tracker, tracker.clock, resource)


def projection(
    account_id: str, tracker: GPUCreditTracker, timestamp: int, resource: str | None
) -> BalanceView:
    """The account at ``timestamp`` (at or after its clock) if nothing else happens before:
    credits expiring by then no longer count. In total, or for class ``resource`` (the
    credits a consumption of it could draw, and its own debt)."""
    available = tracker.available_at(timestamp, resource)
    debt = tracker.debt_of(resource)
    return BalanceView(account_id, timestamp, available - debt, available, debt, resource)


def read_balance(
    account_id: str, tracker: GPUCreditTracker, timestamp: int | None, resource: str | None = None
) -> BalanceView | AsOfRead:
    """A balance read that changes nothing (SPEC section 3). At or after the clock it is the
    projection from the live grants; before it, an ``AsOfRead`` the stored history answers
    (totals only: a per-class read before the clock is refused, see ``ClassAsOfUnsupported``)."""
    clock = tracker.clock
    if timestamp is None:
        return view(account_id, tracker, resource)
    if timestamp < clock:
        if resource is not None:
            raise ClassAsOfUnsupported(resource, timestamp, clock)
        return AsOfRead(account_id, timestamp)
    return projection(account_id, tracker, timestamp, resource)


def totals_view(account_id: str, timestamp: int, totals: Totals) -> BalanceView:
    available, debt = totals
    return BalanceView(account_id, timestamp, available - debt, available, debt)


def as_of_in_batch(
    read: AsOfRead, entries: Sequence[Entry], baselines: dict[tuple[str, int], Totals]
) -> BalanceView:
    """An as-of read inside a batch: after the batch's last own entry at or before its time,
    or as the account stood before the batch. ``entries`` are in time order."""
    index = bisect.bisect_right(entries, read.timestamp, key=lambda e: e.timestamp)
    if index:
        totals = (entries[index - 1].available, entries[index - 1].debt)
    else:
        totals = baselines[(read.account_id, read.timestamp)]
    return totals_view(read.account_id, read.timestamp, totals)


def grant_view_of(account_id: str, grant_id: int, entry: Entry | None, remaining: int) -> GrantView:
    """One grant as getGrant shows it: its ledger entry plus what is left of it now."""
    if not isinstance(entry, GrantEntry):
        raise GrantNotFound(account_id, grant_id)
    return GrantView(
        account_id=account_id,
        grant_id=grant_id,
        sequence=entry.sequence,
        timestamp=entry.timestamp,
        amount=entry.amount,
        expiry=entry.expiry,
        settled_debt=entry.settled_debt,
        retained=entry.retained,
        remaining=remaining,
        name=entry.name,
        metadata=entry.metadata,
        resources=_listed(entry.resources),
    )


def live_grant_views(tracker: GPUCreditTracker, resource: str | None) -> list[LiveGrantView]:
    """The live grants in consumption order: all of them, or those a consumption of class
    ``resource`` could draw, in the order it would."""
    return [
        LiveGrantView(g.grant_id, g.expiry, g.remaining, resources=_listed(g.resources))
        for g in tracker.live_grants(resource)
    ]


def labelled(live: list[LiveGrantView], entries: Mapping[int, GrantEntry]) -> None:
    """Give the live grants the labels their grant entries carry."""
    for view in live:
        entry = entries.get(view.grant_id)
        if entry is not None:
            view.name = entry.name
            view.metadata = entry.metadata


def _next_sequence(account: AccountState) -> int:
    sequence = account.next_sequence
    account.next_sequence = sequence + 1
    return sequence


def _expiration_entries(
    account: AccountState,
    expired: tuple[Expiration, ...],
    available_before: int,
    debt_before: int,
) -> list[Entry]:
    entries: list[Entry] = []
    available = available_before
    if len(expired) > 1:
        # The ledger lists the expirations of one timestamp by grant id (their rank, see
        # app.storage.base.rank_of), so their balances are computed in that order.
        expired = tuple(sorted(expired, key=lambda e: (e.expiry, e.grant_id)))
    for e in expired:
        available -= e.amount
        entries.append(
            ExpirationEntry(
                _next_sequence(account),
                timestamp=e.expiry,
                available=available,
                debt=debt_before,
                grant_id=e.grant_id,
                expiry=e.expiry,
                amount=e.amount,
                resources=e.resources,
            )
        )
    return entries


def _change(account: AccountState, entries: list[Entry]) -> Change:
    t = account.tracker
    row = AccountRow(
        account.account_id,
        t.clock,
        t.debt,
        t.next_grant_id,
        account.next_sequence,
        _debt_queue(t),
        watermark=t.clock,  # a window of 0: every write is final at once
    )
    return Change(account=row, entries=entries)


def _debt_queue(tracker: GPUCreditTracker) -> tuple[Debt, ...]:
    """The debt queue as storage keeps it (``TrackerState.debts``): () when all of it (if
    any) is of no class, so an account that never names a class writes what it always did."""
    if not tracker.debt:
        return ()
    queue = tracker.debts()
    return () if len(queue) == 1 and queue[0].resource is None else queue


def _listed(resources: tuple[str, ...] | None) -> list[str] | None:
    return None if resources is None else list(resources)


def _record_allocation(change: Change, result: ConsumeResult) -> None:
    # The result says what each grant drawn from has left: 0 is used up (removed), anything
    # else is the live grant's new remainder (its key is unchanged).
    for part, left in zip(result.allocation, result.remaining, strict=True):
        if left:
            change.upserted_live_grants.append(
                LiveGrant(part.grant_id, part.expiry, left, part.resources)
            )
        else:
            change.removed_grant_ids.append(part.grant_id)
