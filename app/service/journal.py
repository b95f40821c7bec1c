"""Pure: one operation on one account's state, and what storage must record of it.

Each function applies an operation to an ``AccountState`` (the tracker and the next ledger
sequence) and returns the ``Change`` storage makes durable (the account's row, the live
grants added, updated or removed, the ledger entries) with the answer for the caller. No
I/O, no clock, no locks: the service calls these inside a unit of work, and single requests
and batches share them, so a rule lives here once.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from app.domain import (
    ClassList,
    Debt,
    GPUCreditTracker,
    InvalidInput,
    LiveGrant,
    TrackerState,
    forecast,
)
from app.domain.timeline import (
    AccountTimeline,
    ConsumeWrite,
    ConsumptionLine,
    ExpirationLine,
    GrantLine,
    GrantWrite,
    Line,
    SequencedWrite,
    TimelineLimits,
    VoidLine,
    VoidWrite,
    Write,
    WriteOutcome,
)
from app.domain.timeline import Checkpoint as TimelineCheckpoint
from app.service.errors import ClassAsOfUnsupported, GrantAlreadyVoided, GrantNotFound
from app.service.limits import Limits
from app.service.results import (
    AccountSettings,
    BalanceView,
    ConsumptionReceipt,
    ForecastView,
    GrantForecastView,
    GrantReceipt,
    GrantView,
    LiveGrantView,
    VoidReceipt,
)
from app.storage.base import (
    AccountRow,
    Change,
    Checkpoint,
    ConsumptionEntry,
    Entry,
    ExpirationEntry,
    GrantEntry,
    LoadedAccount,
    VoidEntry,
    WriteEntry,
    rank_of,
)

Totals = tuple[int, int]  # (available, debt) at some time


@dataclass(slots=True)
class AccountState:
    """One account as a unit of work holds it: its timeline (the tracker at the clock, the
    provisional writes, the ledger's next sequence) and its own lateness window, if any."""

    account_id: str
    timeline: AccountTimeline
    # The account's own window (SPEC section 6, PUT .../settings); None: the service's.
    window: int | None = None

    @property
    def tracker(self) -> GPUCreditTracker:
        """The state at the clock: every accepted write applied. Read it only."""
        return self.timeline.current

    @property
    def next_sequence(self) -> int:
        return self.timeline.next_sequence

    @property
    def exists(self) -> bool:
        """An account exists once a write has recorded something (sequence 1 is taken)."""
        return self.timeline.next_sequence > 1


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
    resource: str | None
    watermark: int  # the account's, when the read was made


def new_account(account_id: str, limits: Limits) -> AccountState:
    """An account never written: empty, with the service's lateness window."""
    timeline = AccountTimeline(
        limits.lateness_window, limits=_timeline_limits(limits.max_live_grants_per_account, limits)
    )
    return AccountState(account_id, timeline)


def _timeline_limits(max_live_grants: int, limits: Limits) -> TimelineLimits:
    return _shared_timeline_limits(max_live_grants, limits.max_provisional_writes)


@functools.lru_cache(maxsize=64)
def _shared_timeline_limits(max_live_grants: int, max_provisional: int) -> TimelineLimits:
    """One timeline's bounds (shared: a handful of distinct values exist)."""
    return TimelineLimits(max_provisional=max_provisional, max_live_grants=max_live_grants)


def loaded_account(account_id: str, loaded: LoadedAccount, limits: Limits) -> AccountState:
    """An account as storage kept it. With no provisional writes (every account whose
    window is 0) the stored state is the whole of it; otherwise the final state is rebuilt
    from the latest checkpoint and the writes after it, the provisional writes are replayed
    on it, and what they give must be what is stored (``AccountTimeline.restore`` checks
    their entries; the state at the clock is checked here)."""
    state = loaded.tracker_state
    window = limits.lateness_window if loaded.lateness_window is None else loaded.lateness_window
    # More live grants than the bound (a bound lowered since) are kept whole.
    max_live = max(len(state.live_grants), limits.max_live_grants_per_account)
    if loaded.watermark >= state.clock:
        timeline = AccountTimeline.from_state(
            state,
            next_sequence=loaded.next_sequence,
            window=window,
            folded_since_checkpoint=loaded.folded_since_checkpoint,
            limits=_timeline_limits(max_live, limits),
        )
        return AccountState(account_id, timeline, loaded.lateness_window)
    checkpoint = loaded.checkpoint
    base = checkpoint.state if checkpoint is not None else _EMPTY_STATE
    folded = [
        write_of(w) for w in loaded.writes_since_checkpoint if w.timestamp <= loaded.watermark
    ]
    timeline = AccountTimeline.restore(
        base,
        next_sequence=loaded.next_sequence,
        watermark=loaded.watermark,
        window=window,
        folded=folded,
        lines=[line_of(e) for e in loaded.provisional_entries],
        next_grant_id=state.next_grant_id,
        folded_since_checkpoint=loaded.folded_since_checkpoint,
        limits=_timeline_limits(max_live, limits),
    )
    current = timeline.current
    if (current.clock, current.debt, current.available) != (
        state.clock,
        state.debt,
        sum(g.remaining for g in state.live_grants),
    ):
        raise InvalidInput("state", f"{account_id}: the stored state is not what its writes give")
    return AccountState(account_id, timeline, loaded.lateness_window)


_EMPTY_STATE: Final = TrackerState(0, 0, 1, ())
_NO_IDS: Final[tuple[int, ...]] = ()


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
    account_id = account.account_id
    at_clock = account.timeline.grant_at_clock(amount, timestamp, expiry, live_room, resources)
    if at_clock is not None:
        # Most grants: in order, final at once, nothing expired. The entry is made from the
        # tracker's result (what ``write`` would make a line of, then ``entry_of`` an entry).
        granted, sequence, upserted, checkpoints = at_clock
        entry = GrantEntry(
            sequence,
            timestamp,
            granted.available,
            granted.debt,
            granted.grant_id,  # grant_id
            amount,  # amount
            expiry,  # expiry
            granted.settled_debt,  # settled_debt
            granted.retained,  # retained
            label.name,  # name
            label.metadata,  # metadata
            granted.resources,  # resources
            0,  # revision
        )
        change = Change(  # positional, as in _write
            _account_row(account),
            upserted,
            _NO_IDS,
            (entry,),
            None,
            (),
            (),
            _checkpoint(checkpoints),
        )
        return change, _grant_receipt(account_id, entry, entry.available, entry.debt, timestamp, 0)
    outcome, change = _write(account, GrantWrite(amount, timestamp, expiry, resources), live_room)
    line = outcome.line
    assert isinstance(line, GrantLine)
    own = _own_entry(change, line.sequence)
    assert isinstance(own, GrantEntry), "a grant's own entry is new"
    own.name = label.name
    own.metadata = label.metadata
    receipt = _grant_receipt(
        account_id, own, outcome.available, outcome.debt, outcome.watermark, outcome.restated
    )
    return change, receipt


def _own_entry(change: Change, sequence: int) -> Entry:
    """A write's own entry among its change's new ones: the last for a write in order (what it
    expired comes before it), else found by its sequence (a late write's)."""
    own = change.entries[-1]
    if own.sequence != sequence:
        [own] = [e for e in change.entries if e.sequence == sequence]
    return own


def _grant_receipt(
    account_id: str, entry: GrantEntry, available: int, debt: int, watermark: int, restated: int
) -> GrantReceipt:
    """A grant's answer: its own entry (labelled), and the totals at the clock after it
    (``available``, ``debt``: the entry's own unless the grant was late)."""
    # Positional, in field order (tests/test_journal_fields.py holds each field to its
    # value): keyword arguments to a class cost a dict per call, 0.4 us on every grant.
    return GrantReceipt(
        account_id,  # account_id
        entry.grant_id,  # grant_id
        entry.sequence,  # sequence
        entry.timestamp,  # timestamp
        entry.amount,  # amount
        entry.expiry,  # expiry
        available - debt,  # balance
        available,  # available
        debt,  # debt
        entry.settled_debt,  # settled_debt
        entry.retained,  # retained
        entry.name,  # name
        entry.metadata,  # metadata
        _listed(entry.resources),  # resources
        watermark,  # watermark
        restated,  # restated
    )


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
    outcome, change = _write(account, VoidWrite(grant_id, timestamp), None)
    line = outcome.line
    assert isinstance(line, VoidLine)
    receipt = VoidReceipt(
        account_id=account_id,
        grant_id=grant_id,
        sequence=line.sequence,
        timestamp=timestamp,
        amount=line.amount,
        balance=outcome.available - outcome.debt,
        available=outcome.available,
        debt=outcome.debt,
        watermark=outcome.watermark,
        restated=outcome.restated,
    )
    return change, receipt


def consume(
    account: AccountState, amount: int, timestamp: int, resource: str | None = None
) -> tuple[Change, ConsumptionReceipt]:
    """Raises ``LedgerError`` and changes nothing then."""
    at_clock = account.timeline.consume_at_clock(amount, timestamp, resource)
    if at_clock is not None:
        # Most consumptions: in order, final at once, nothing expired (see grant).
        consumed, sequence, upserted, removed, checkpoints = at_clock
        available = consumed.available
        debt = consumed.debt
        entry = ConsumptionEntry(
            sequence,
            timestamp,
            available,
            debt,
            amount,  # amount
            consumed.consumed,  # consumed
            consumed.debt_added,  # debt_added
            consumed.allocation,  # allocation
            resource,  # resource
            0,  # revision
        )
        change = Change(  # positional, as in _write
            _account_row(account),
            upserted,
            removed,
            (entry,),
            None,
            (),
            (),
            _checkpoint(checkpoints),
        )
        return change, _consumption_receipt(
            account.account_id, entry, available, debt, timestamp, 0
        )
    outcome, change = _write(account, ConsumeWrite(amount, timestamp, resource), None)
    line = outcome.line
    assert isinstance(line, ConsumptionLine)
    own = _own_entry(change, line.sequence)
    assert isinstance(own, ConsumptionEntry), "a consumption's own entry is new"
    receipt = _consumption_receipt(
        account.account_id,
        own,
        outcome.available,
        outcome.debt,
        outcome.watermark,
        outcome.restated,
    )
    return change, receipt


def _consumption_receipt(
    account_id: str,
    entry: ConsumptionEntry,
    available: int,
    debt: int,
    watermark: int,
    restated: int,
) -> ConsumptionReceipt:
    """A consumption's answer: its own entry, and the totals at the clock after it
    (``available``, ``debt``: the entry's own unless the consumption was late)."""
    return ConsumptionReceipt(  # positional, as a grant's receipt (_grant_receipt)
        account_id,  # account_id
        entry.sequence,  # sequence
        entry.timestamp,  # timestamp
        entry.amount,  # amount
        available - debt,  # balance
        available,  # available
        debt,  # debt
        entry.consumed,  # consumed
        entry.debt_added,  # debt_added
        entry.allocation,  # allocation
        entry.resource,  # resource
        watermark,  # watermark
        restated,  # restated
    )


def set_window(account: AccountState, window: int | None, default_window: int) -> Change:
    """Give the account its own lateness window (None: the service's again). Lowering it
    moves the watermark forward and the writes it passes become final; raising it never
    moves the watermark back (SPEC section 6)."""
    fold = account.timeline.set_window(default_window if window is None else window)
    account.window = window
    return Change(account=_account_row(account), checkpoint=_checkpoint(fold.checkpoints))


def view(
    account_id: str, tracker: GPUCreditTracker, watermark: int, resource: str | None = None
) -> BalanceView:
    """The account at its clock, in total or for class ``resource``."""
    return projection(account_id, tracker, watermark, tracker.clock, resource)


def projection(
    account_id: str,
    tracker: GPUCreditTracker,
    watermark: int,
    timestamp: int,
    resource: str | None,
) -> BalanceView:
    """The account at ``timestamp`` (at or after its clock) if nothing else happens before:
    credits expiring by then no longer count. In total, or for class ``resource`` (the
    credits a consumption of it could draw, and its own debt). Never final: a write at the
    clock may still come."""
    available = tracker.available_at(timestamp, resource)
    debt = tracker.debt_of(resource)
    return BalanceView(
        account_id, timestamp, available - debt, available, debt, resource, watermark, False
    )


def read_balance(
    account_id: str,
    tracker: GPUCreditTracker,
    watermark: int,
    timestamp: int | None,
    resource: str | None = None,
) -> BalanceView | AsOfRead:
    """A balance read that changes nothing (SPEC section 3). At or after the clock it is the
    projection from the live grants; before it, an ``AsOfRead`` the stored history answers
    (``app.service.history``)."""
    if timestamp is None:
        return view(account_id, tracker, watermark, resource)
    if timestamp < tracker.clock:
        return AsOfRead(account_id, timestamp, resource, watermark)
    return projection(account_id, tracker, watermark, timestamp, resource)


def watermark_in_force(watermark: int, clock: int, window: int | None, default_window: int) -> int:
    """A stored account's watermark under the window in force now: ``max(M, C - W)``
    (SPEC section 6). Equal to the stored one unless the window was lowered since it was
    written (the service's, by configuration across a restart): then loading the account
    folds the same writes (``AccountTimeline.restore``) and the next write stores it, and a
    read from storage alone must answer the same meanwhile."""
    in_force = default_window if window is None else window
    return max(watermark, clock - in_force)


def as_of_view(read: AsOfRead, available: int, debt: int) -> BalanceView:
    """An as-of answer: final when its time is before the watermark (SPEC section 6)."""
    return BalanceView(
        read.account_id,
        read.timestamp,
        available - debt,
        available,
        debt,
        read.resource,
        read.watermark,
        read.timestamp < read.watermark,
    )


def as_of_in_batch(
    read: AsOfRead,
    account: AccountState,
    entries: Sequence[Entry],
    baseline: BalanceView | None,
    watermark_before: int,
    late: bool,
) -> BalanceView:
    """An as-of read inside a batch, which sees the batch so far. From the watermark on the
    timeline answers (the provisional writes are in memory). Before it: as the account stood
    before the batch (``baseline``, read before the batch began) when the batch's writes
    cannot have touched that time (it is before the watermark the batch started from), or
    after the batch's last own entry at or before it when the batch wrote in order (its
    ``entries`` are in time order then); otherwise (the batch's own late writes made that
    time final) it is refused: read it after the batch."""
    timeline = account.timeline
    timestamp = read.timestamp
    if timestamp >= timeline.watermark:
        available, debt = timeline.balance_at(timestamp, read.resource)
        return as_of_view(replace(read, watermark=timeline.watermark), available, debt)
    read = replace(read, watermark=timeline.watermark)
    if timestamp < watermark_before:
        assert baseline is not None, "read before the batch"
        return as_of_view(read, baseline.available, baseline.debt)
    if read.resource is None and not late:
        index = bisect.bisect_right(entries, timestamp, key=lambda e: e.timestamp)
        if index:
            return as_of_view(read, entries[index - 1].available, entries[index - 1].debt)
        assert baseline is not None, "read before the batch"
        return as_of_view(read, baseline.available, baseline.debt)
    raise ClassAsOfUnsupported(
        read.resource, timestamp, "this batch's own writes made it final; read it after the batch"
    )


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


def forecast_of(view: BalanceView, live: Sequence[LiveGrantView], burn_rate: int) -> ForecastView:
    """A burn of ``burn_rate`` per timestamp unit from the clock (``view.timestamp``) over the
    live grants as ``live_grant_views`` lists them for ``view.resource`` (consumption order):
    see ``app.domain.forecast``. Raises ``InvalidInput`` for a burn rate outside 1 to
    2^53-1."""
    grants = [LiveGrant(g.grant_id, g.expiry, g.remaining, _class_set(g.resources)) for g in live]
    result = forecast(grants, view.timestamp, burn_rate, view.resource)
    return ForecastView(
        account_id=view.account_id,
        timestamp=result.start,
        burn_rate=result.burn_rate,
        resource=result.resource,
        available=result.available,
        debt=view.debt,
        run_out_at=result.run_out_at,
        consumed=result.consumed,
        expiring_unused=result.expiring_unused,
        grants=[
            GrantForecastView(
                g.grant_id,
                g.expiry,
                g.remaining,
                g.consumed,
                g.expiring_unused,
                g.used_up_at,
                _listed(g.resources),
            )
            for g in result.grants
        ],
    )


def labelled(live: list[LiveGrantView], entries: Mapping[int, GrantEntry]) -> None:
    """Give the live grants the labels their grant entries carry."""
    for view in live:
        entry = entries.get(view.grant_id)
        if entry is not None:
            view.name = entry.name
            view.metadata = entry.metadata


def settings_of(account: AccountState) -> AccountSettings:
    timeline = account.timeline
    return AccountSettings(
        account.account_id,
        timeline.window,
        account.window is None,
        timeline.clock,
        timeline.watermark,
    )


def _write(
    account: AccountState, write: Write, live_room: int | None
) -> tuple[WriteOutcome, Change]:
    """One write through the account's timeline, and what storage must make of it: the new
    entries (sequences after the last one stored, in sequence order), the entries a late
    write restated or undid, the live grants of the state at the clock, the row, and a
    checkpoint now and then."""
    first_new = account.timeline.next_sequence
    outcome = account.timeline.write(write, live_room=live_room)
    upserted = outcome.upserted
    new: Sequence[Entry]
    restated: Sequence[Entry] = ()
    if len(upserted) == 1 and upserted[0].sequence >= first_new:
        new = (entry_of(upserted[0]),)  # the common write: in order, nothing expired
    else:
        appended: list[Entry] = []
        earlier: list[Entry] = []
        for line in upserted:
            (appended if line.sequence >= first_new else earlier).append(entry_of(line))
        appended.sort(key=_sequence_of)
        new = appended
        if earlier:
            restated = earlier
    change = Change(  # positional, as the receipts (see grant)
        _account_row(account),  # account
        outcome.live_upserted,  # upserted_live_grants
        outcome.live_removed,  # removed_grant_ids
        new,  # entries
        None,  # idempotency
        restated,  # restated
        outcome.removed,  # removed_sequences
        _checkpoint(outcome.checkpoints),  # checkpoint
    )
    return outcome, change


def _sequence_of(entry: Entry) -> int:
    return entry.sequence


def entry_of(line: Line) -> Entry:
    """A ledger line as storage keeps it (a grant's label is the service's to add)."""
    # Positional, in field order (tests/test_journal_fields.py holds each field to its
    # value): keyword arguments to a class cost a dict per call, and this runs per write.
    if isinstance(line, GrantLine):
        return GrantEntry(
            line.sequence,
            line.timestamp,
            line.available,
            line.debt,
            line.grant_id,  # grant_id
            line.amount,  # amount
            line.expiry,  # expiry
            line.settled_debt,  # settled_debt
            line.retained,  # retained
            None,  # name: the service's to add
            None,  # metadata
            line.resources,  # resources
            line.revision,  # revision
        )
    if isinstance(line, ConsumptionLine):
        return ConsumptionEntry(
            line.sequence,
            line.timestamp,
            line.available,
            line.debt,
            line.amount,  # amount
            line.consumed,  # consumed
            line.debt_added,  # debt_added
            line.allocation,  # allocation
            line.resource,  # resource
            line.revision,  # revision
        )
    if isinstance(line, VoidLine):
        return VoidEntry(
            line.sequence,
            line.timestamp,
            line.available,
            line.debt,
            line.grant_id,
            line.amount,
            revision=line.revision,
        )
    return ExpirationEntry(
        line.sequence,
        line.timestamp,
        line.available,
        line.debt,
        grant_id=line.grant_id,
        expiry=line.expiry,
        amount=line.amount,
        resources=line.resources,
        revision=line.revision,
    )


def line_of(entry: Entry) -> Line:
    """A stored entry as the timeline's line (to restore provisional writes)."""
    rank = rank_of(entry)
    if isinstance(entry, GrantEntry):
        return GrantLine(
            entry.sequence,
            entry.timestamp,
            rank,
            entry.available,
            entry.debt,
            entry.revision,
            entry.grant_id,
            entry.amount,
            entry.expiry,
            entry.resources,
            entry.settled_debt,
            entry.retained,
        )
    if isinstance(entry, ConsumptionEntry):
        return ConsumptionLine(
            entry.sequence,
            entry.timestamp,
            rank,
            entry.available,
            entry.debt,
            entry.revision,
            entry.amount,
            entry.resource,
            entry.consumed,
            entry.debt_added,
            entry.allocation,
        )
    if isinstance(entry, VoidEntry):
        return VoidLine(
            entry.sequence,
            entry.timestamp,
            rank,
            entry.available,
            entry.debt,
            entry.revision,
            entry.grant_id,
            entry.amount,
        )
    return ExpirationLine(
        entry.sequence,
        entry.timestamp,
        rank,
        entry.available,
        entry.debt,
        entry.revision,
        entry.grant_id,
        entry.expiry,
        entry.amount,
        entry.resources,
    )


def write_of(entry: WriteEntry) -> SequencedWrite:
    """A stored write entry as the write it recorded (to replay it)."""
    if isinstance(entry, GrantEntry):
        grant_write = GrantWrite(entry.amount, entry.timestamp, entry.expiry, entry.resources)
        return entry.sequence, entry.grant_id, grant_write
    if isinstance(entry, ConsumptionEntry):
        return entry.sequence, None, ConsumeWrite(entry.amount, entry.timestamp, entry.resource)
    return entry.sequence, None, VoidWrite(entry.grant_id, entry.timestamp)


def _checkpoint(checkpoints: Sequence[TimelineCheckpoint]) -> Checkpoint | None:
    """The newest of a write's checkpoints, as storage keeps it (position: its write's)."""
    if not checkpoints:
        return None
    newest = checkpoints[-1]
    return Checkpoint((newest.timestamp, newest.sequence), newest.state)


def _account_row(account: AccountState) -> AccountRow:
    timeline = account.timeline
    t = timeline.current
    debt = t.debt
    return AccountRow(
        account.account_id,
        t.clock,
        debt,
        t.next_grant_id,
        timeline.next_sequence,
        _debt_queue(t) if debt else (),  # per write: no call for an account without debt
        timeline.watermark,
        account.window,
        timeline.folded_since_checkpoint,
    )


def _debt_queue(tracker: GPUCreditTracker) -> tuple[Debt, ...]:
    """The debt queue as storage keeps it (``TrackerState.debts``): () when all of it (if
    any) is of no class, so an account that never names a class writes what it always did."""
    if not tracker.debt or not tracker.debt_may_name_a_class:
        return ()
    queue = tracker.debts()
    return () if len(queue) == 1 and queue[0].resource is None else queue


def _listed(resources: tuple[str, ...] | None) -> list[str] | None:
    return None if resources is None else list(resources)


def _class_set(resources: list[str] | None) -> tuple[str, ...] | None:
    return None if resources is None else tuple(resources)
