"""Test helpers for the timeline: an obviously correct model and a simulated ledger store.

``Model``: keeps the accepted writes with their arrival (the sequence the timeline gave them)
and answers everything by sorting them in effective order, (timestamp, arrival), and
replaying them on a fresh ``GPUCreditTracker`` in that order, letting it number the grants
itself (so ties at equal expiry fall back on the tracker's long-tested grant-id order) and
renaming its ids to the arrival ids afterwards. Expiration lines of one write are listed by
(expiry, arrival grant id), and the balance chain follows that listing.

``Store``: what storage would hold if it applied each ``WriteOutcome`` (upserted, removed,
live grants) and kept the checkpoints; applying checks the restatement protocol (revisions,
``restated``, sequences never reused, final lines never touched).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from app.domain import (
    EXPIRATION_RANK_BASE,
    AccountTimeline,
    Allocation,
    Checkpoint,
    ConsumeWrite,
    ConsumptionLine,
    ExpirationLine,
    GPUCreditTracker,
    GrantLine,
    GrantWrite,
    InvalidInput,
    LedgerError,
    Line,
    LiveGrant,
    SequencedWrite,
    TimelineLimits,
    TooLate,
    TrackerState,
    VoidLine,
    VoidWrite,
    Write,
    WriteOutcome,
    replay,
)


@dataclass(frozen=True)
class Accepted:
    sequence: int  # arrival
    grant_id: int | None  # the arrival id of a grant
    write: Write


def effective_key(a: Accepted) -> tuple[int, int]:
    return a.write.timestamp, a.sequence


@dataclass
class Replayed:
    tracker: GPUCreditTracker
    lines: list[Line]  # revisions 0; expiration lines' sequences 0
    to_arrival: dict[int, int]  # the replay's grant id -> arrival id


@dataclass
class Model:
    window: int
    limits: TimelineLimits = field(default_factory=TimelineLimits)
    accepted: list[Accepted] = field(default_factory=list)
    clock: int = 0
    watermark: int = 0
    next_sequence: int = 1
    next_grant_id: int = 1
    _replayed: Replayed | None = None  # of every accepted write, until the next one

    def everything(self) -> Replayed:
        """The replay of every accepted write (cached: the checks read it many times)."""
        if self._replayed is None:
            self._replayed = self.replay()
        return self._replayed

    def effective(self, writes: list[Accepted] | None = None) -> list[Accepted]:
        return sorted(self.accepted if writes is None else writes, key=effective_key)

    def replay(self, writes: list[Accepted] | None = None, until: int | None = None) -> Replayed:
        tracker = GPUCreditTracker(
            max_live_grants=self.limits.max_live_grants, max_classes=self.limits.max_classes
        )
        lines: list[Line] = []
        to_arrival: dict[int, int] = {}
        to_replay: dict[int, int] = {}
        for a in self.effective(writes):
            w = a.write
            if until is not None and w.timestamp > until:
                break
            available, debt = tracker.available, tracker.debt
            own: Line
            if isinstance(w, GrantWrite):
                g = tracker.apply_grant(w.amount, w.timestamp, w.expiry, resources=w.resources)
                assert a.grant_id is not None
                to_arrival[g.grant_id] = a.grant_id
                to_replay[a.grant_id] = g.grant_id
                expired = g.expired
                own = GrantLine(
                    a.sequence, w.timestamp, a.sequence, g.available, g.debt, 0, a.grant_id,
                    w.amount, w.expiry, g.resources, g.settled_debt, g.retained,
                )  # fmt: skip
            elif isinstance(w, ConsumeWrite):
                c = tracker.apply_consume(w.amount, w.timestamp, w.resource)
                expired = c.expired
                allocation = tuple(
                    Allocation(to_arrival[p.grant_id], p.expiry, p.amount, p.resources)
                    for p in c.allocation
                )
                own = ConsumptionLine(
                    a.sequence, w.timestamp, a.sequence, c.available, c.debt, 0, w.amount,
                    w.resource, c.consumed, c.debt_added, allocation,
                )  # fmt: skip
            else:
                v = tracker.apply_void(to_replay[w.grant_id], w.timestamp)
                expired = v.expired
                own = VoidLine(
                    a.sequence, w.timestamp, a.sequence, v.available, v.debt, 0, w.grant_id,
                    v.removed,
                )  # fmt: skip
            renamed = sorted(
                ((e.expiry, to_arrival[e.grant_id]), e.amount, e.resources) for e in expired
            )
            for (expiry, grant_id), amount, resources in renamed:
                available -= amount
                lines.append(
                    ExpirationLine(
                        0, expiry, grant_id - EXPIRATION_RANK_BASE, available, debt, 0,
                        grant_id, expiry, amount, resources,
                    )
                )  # fmt: skip
            lines.append(own)
        return Replayed(tracker, lines, to_arrival)

    # -- the rules of SPEC section 6, spelt out ------------------------------------------

    def refusal(self, write: Write) -> type[LedgerError] | None:
        """What the timeline must raise for ``write`` now (None: accept it)."""
        if write.timestamp < self.watermark:
            return TooLate
        if isinstance(write, VoidWrite):
            grant = self.grant_write(write.grant_id)
            if grant is None or write.timestamp < grant.timestamp:
                return InvalidInput
        trial = Accepted(self.next_sequence, self.next_grant_id, write)
        if not isinstance(write, GrantWrite):
            trial = Accepted(self.next_sequence, None, write)
        try:
            self.replay([*self.accepted, trial])
        except LedgerError as error:
            return type(error)
        return None

    def accept(self, write: Write, sequence: int) -> Accepted:
        """Keep ``write``, arrived now with ``sequence`` (above every earlier one's)."""
        assert sequence >= self.next_sequence
        self.next_sequence = sequence + 1
        grant_id = None
        if isinstance(write, GrantWrite):
            grant_id = self.next_grant_id
            self.next_grant_id += 1
            if write.resources is not None:  # kept normalised, as the timeline keeps it
                write = GrantWrite(
                    write.amount, write.timestamp, write.expiry, tuple(sorted(write.resources))
                )
        accepted = Accepted(sequence, grant_id, write)
        self.accepted.append(accepted)
        self._replayed = None
        self.clock = max(self.clock, write.timestamp)
        self.watermark = max(self.watermark, self.clock - self.window)
        provisional = [a for a in self.effective() if a.write.timestamp > self.watermark]
        excess = len(provisional) - self.limits.max_provisional
        if excess > 0:  # the oldest fold early: M moves to the newest of them
            self.watermark = provisional[excess - 1].write.timestamp
        return accepted

    def set_window(self, window: int) -> None:
        self.window = window
        self.watermark = max(self.watermark, self.clock - window)

    def grant_write(self, grant_id: int) -> GrantWrite | None:
        for a in self.accepted:
            if a.grant_id == grant_id:
                assert isinstance(a.write, GrantWrite)
                return a.write
        return None

    def balance_at(self, timestamp: int, resource: str | None = None) -> tuple[int, int]:
        tracker = self.replay(until=timestamp).tracker
        return tracker.available_at(timestamp, resource), tracker.debt_of(resource)

    def balances(
        self, timestamps: range, resources: list[str | None]
    ) -> dict[tuple[int, str | None], tuple[int, int]]:
        """``balance_at`` for every timestamp and class, in one sweep through the writes."""
        tracker = GPUCreditTracker(
            max_live_grants=self.limits.max_live_grants, max_classes=self.limits.max_classes
        )
        to_replay: dict[int, int] = {}
        pending = self.effective()
        out: dict[tuple[int, str | None], tuple[int, int]] = {}
        for timestamp in timestamps:
            while pending and pending[0].write.timestamp <= timestamp:
                a = pending.pop(0)
                w = a.write
                if isinstance(w, GrantWrite):
                    result = tracker.apply_grant(
                        w.amount, w.timestamp, w.expiry, resources=w.resources
                    )
                    assert a.grant_id is not None
                    to_replay[a.grant_id] = result.grant_id
                elif isinstance(w, ConsumeWrite):
                    tracker.apply_consume(w.amount, w.timestamp, w.resource)
                else:
                    tracker.apply_void(to_replay[w.grant_id], w.timestamp)
            for resource in resources:
                out[timestamp, resource] = (
                    tracker.available_at(timestamp, resource),
                    tracker.debt_of(resource),
                )
        return out

    def live_grants(self) -> list[tuple[int, int, int, tuple[str, ...] | None, int]]:
        replayed = self.everything()
        out = []
        for g in replayed.tracker.live_grants():
            grant_id = replayed.to_arrival[g.grant_id]
            write = self.grant_write(grant_id)
            assert write is not None
            out.append((grant_id, g.expiry, g.remaining, g.resources, write.timestamp))
        return out

    def sequenced(self) -> list[SequencedWrite]:
        return [(a.sequence, a.grant_id, a.write) for a in self.effective()]


def live_key(g: LiveGrant) -> tuple[int, int, int, tuple[str, ...] | None, int]:
    return g.grant_id, g.expiry, g.remaining, g.resources, g.granted_at


def full_state(tracker: GPUCreditTracker) -> tuple[object, ...]:
    """A tracker's state with what ``LiveGrant ==`` leaves out (granted_at)."""
    state = tracker.state()
    return state, tuple(live_key(g) for g in state.live_grants)


def snapshot(timeline: AccountTimeline) -> tuple[object, ...]:
    """Everything observable of a timeline: what a refused write must leave unchanged."""
    return (
        timeline.clock,
        timeline.watermark,
        timeline.window,
        timeline.next_sequence,
        timeline.next_grant_id,
        timeline.folded_since_checkpoint,
        timeline.provisional_count,
        tuple(timeline.lines()),
        tuple(timeline.provisional()),
        full_state(timeline.current),
        full_state(timeline.final),
        timeline.current is timeline.final,
    )


def without_expiration_sequences(lines: list[Line]) -> list[Line]:
    """Lines compared with a model's: revisions and expiration lines' sequences left out."""
    out: list[Line] = []
    for line in lines:
        if isinstance(line, ExpirationLine):
            out.append(line._replace(sequence=0, revision=0))
        else:
            out.append(line._replace(revision=0))
    return out


@dataclass
class Store:
    """The ledger and live-grants tables as storage would keep them from the outcomes."""

    lines: dict[int, Line] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)  # every sequence ever given
    live: dict[int, LiveGrant] = field(default_factory=dict)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    writes: list[SequencedWrite] = field(default_factory=list)  # arrival order

    def apply(self, outcome: WriteOutcome, write: Write, watermark_before: int) -> None:
        keys = [(line.timestamp, line.rank) for line in outcome.upserted]
        assert keys == sorted(keys), "upserted not in effective order"
        assert outcome.line in outcome.upserted, "the write's own line is new"
        assert outcome.line.sequence not in self.seen
        assert outcome.line.revision == 0
        changed = 0
        for line in outcome.upserted:
            old = self.lines.get(line.sequence)
            if old is None:
                assert line.sequence not in self.seen, f"sequence {line.sequence} reused"
                assert line.revision == 0
                self.seen.add(line.sequence)
            else:
                assert type(old) is type(line)
                assert (old.timestamp, old.rank) == (line.timestamp, line.rank)
                assert old.timestamp >= watermark_before, "a final line changed"
                if old.effect() != line.effect():
                    assert line.revision == old.revision + 1
                    changed += 1
                else:
                    assert line.revision == old.revision
                    assert (old.available, old.debt) != (line.available, line.debt), "no-op"
            self.lines[line.sequence] = line
        for sequence in outcome.removed:
            old = self.lines.pop(sequence)
            assert isinstance(old, ExpirationLine), "only expiration lines vanish"
            assert old.timestamp >= watermark_before, "a final line removed"
        assert outcome.restated == changed + len(outcome.removed)
        for g in outcome.live_upserted:
            self.live[g.grant_id] = g
        for grant_id in outcome.live_removed:
            assert grant_id in self.live
            del self.live[grant_id]
        self.checkpoints.extend(outcome.checkpoints)
        own = outcome.line
        self.writes.append(
            (own.sequence, own.grant_id if isinstance(own, GrantLine) else None, write)
        )

    def listing(self) -> list[Line]:
        return sorted(self.lines.values(), key=lambda line: (line.timestamp, line.rank))

    def live_listing(self) -> list[tuple[int, int, int, tuple[str, ...] | None, int]]:
        return sorted(live_key(g) for g in self.live.values())


def restored(timeline: AccountTimeline, store: Store, limits: TimelineLimits) -> AccountTimeline:
    """The timeline rebuilt as the service would after a restart: from the final state and
    the stored lines after its clock (``from_state`` when nothing is provisional)."""
    final = timeline.final.state()
    if timeline.provisional_count == 0:
        return AccountTimeline.from_state(
            final,
            next_sequence=timeline.next_sequence,
            window=timeline.window,
            folded_since_checkpoint=timeline.folded_since_checkpoint,
            limits=limits,
        )
    return AccountTimeline.restore(
        final,
        next_sequence=timeline.next_sequence,
        watermark=timeline.watermark,
        window=timeline.window,
        lines=[line for line in store.listing() if line.timestamp > final.clock],
        next_grant_id=timeline.next_grant_id,
        folded_since_checkpoint=timeline.folded_since_checkpoint,
        limits=limits,
    )


def restored_from_checkpoint(
    timeline: AccountTimeline, store: Store, limits: TimelineLimits
) -> AccountTimeline | None:
    """The timeline rebuilt from the newest stored checkpoint and the stored writes after it
    (folded ones replayed, provisional ones from their lines); None without a checkpoint."""
    if not store.checkpoints:
        return None
    checkpoint = store.checkpoints[-1]
    after = writes_after(store, checkpoint)
    folded = [w for w in after if w[2].timestamp <= timeline.watermark]
    final_clock = max([checkpoint.state.clock] + [w[2].timestamp for w in folded])
    return AccountTimeline.restore(
        checkpoint.state,
        next_sequence=timeline.next_sequence,
        watermark=timeline.watermark,
        window=timeline.window,
        folded=folded,
        lines=[line for line in store.listing() if line.timestamp > final_clock],
        limits=limits,
    )


def checkpoint_reads(store: Store, checkpoint: Checkpoint, timestamp: int) -> tuple[int, int]:
    """An as-of total read before the watermark as the service does it: the checkpoint, the
    stored writes after it up to ``timestamp``, replayed."""
    after = writes_after(store, checkpoint)
    tracker = replay(checkpoint.state, after, timestamp)
    return tracker.available_at(timestamp), tracker.debt


def writes_after(store: Store, checkpoint: Checkpoint) -> list[SequencedWrite]:
    """The stored writes after ``checkpoint`` in effective order."""
    mark = (checkpoint.timestamp, checkpoint.sequence)
    after = [w for w in store.writes if (w[2].timestamp, w[0]) > mark]
    return sorted(after, key=lambda w: (w[2].timestamp, w[0]))


def empty_state() -> TrackerState:
    return GPUCreditTracker().state()


class Run:
    """A timeline driven alongside the model and the store: every write and refusal is
    checked against the model, and the store against the timeline, after each step."""

    def __init__(self, window: int = 0, limits: TimelineLimits | None = None) -> None:
        self.limits = limits if limits is not None else TimelineLimits()
        self.timeline = AccountTimeline(window, limits=self.limits)
        self.model = Model(window, self.limits)
        self.store = Store()
        self.reads = True  # check balance_at over the whole provisional region each step

    def write(self, write: Write) -> WriteOutcome | None:
        """Write, expecting exactly what the model says; None when refused."""
        refusal = self.model.refusal(write)
        before = snapshot(self.timeline)
        watermark = self.timeline.watermark
        if refusal is not None:
            with pytest.raises(LedgerError) as refused:
                self.timeline.write(write)
            assert type(refused.value) is refusal, f"{refused.value!r}, not {refusal.__name__}"
            assert snapshot(self.timeline) == before, "a refusal changed something"
            return None
        outcome = self.timeline.write(write)
        self.model.accept(write, outcome.line.sequence)  # arrival: above every earlier one
        self.store.apply(outcome, write, watermark)
        assert (outcome.clock, outcome.watermark) == (self.model.clock, self.model.watermark)
        for checkpoint in outcome.checkpoints:
            self.check_checkpoint(checkpoint)
        self.check()
        return outcome

    def set_window(self, window: int) -> None:
        outcome = self.timeline.set_window(window)
        self.model.set_window(window)
        assert outcome.watermark == self.model.watermark
        self.store.checkpoints.extend(outcome.checkpoints)
        for checkpoint in outcome.checkpoints:
            self.check_checkpoint(checkpoint)
        self.check()

    def check(self) -> None:
        t, m = self.timeline, self.model
        t.check_invariants()
        assert (t.clock, t.watermark, t.window) == (m.clock, m.watermark, m.window)
        replayed = m.everything()
        assert without_expiration_sequences(self.store.listing()) == replayed.lines
        assert self.store.live_listing() == sorted(m.live_grants())
        assert [live_key(g) for g in t.current.live_grants()] == m.live_grants()
        assert (t.available, t.debt) == (replayed.tracker.available, replayed.tracker.debt)
        assert t.current.debts() == replayed.tracker.debts()
        assert t.next_grant_id == m.next_grant_id
        final_clock = t.final.clock
        assert t.lines() == [line for line in self.store.listing() if line.timestamp > final_clock]
        if self.reads:
            resources: list[str | None] = [None]
            resources += sorted({c for a in m.accepted for c in _classes(a.write)})
            timestamps = range(t.watermark, t.clock + 3)
            want = m.balances(timestamps, resources)
            for timestamp in timestamps:
                for resource in resources:
                    got = t.balance_at(timestamp, resource)
                    assert got == want[timestamp, resource], (timestamp, resource)

    def check_checkpoint(self, checkpoint: Checkpoint) -> None:
        t, m = self.timeline, self.model
        assert checkpoint.timestamp <= t.watermark
        for timestamp in {checkpoint.timestamp, max(checkpoint.timestamp, t.watermark - 1)}:
            assert checkpoint_reads(self.store, checkpoint, timestamp) == m.balance_at(timestamp)


def _classes(write: Write) -> list[str]:
    if isinstance(write, GrantWrite) and write.resources is not None:
        return list(write.resources)
    if isinstance(write, ConsumeWrite) and write.resource is not None:
        return [write.resource]
    return []
