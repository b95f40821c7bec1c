"""The timeline against sort-and-replay (tests/timeline_model.py), with hypothesis.

- Any arrival order of writes whose timestamps stay within the window: every write is
  accepted, and after each one the state, the stored ledger (sequence of expiration lines
  and revisions aside), the live grants and every ``balance_at`` read are what applying the
  accepted writes in effective order to a fresh tracker gives. Writes before the watermark
  are then refused and change nothing.
- A state machine mixing in-order, late and too-late writes (grants, consumptions with and
  without a class, voids), window changes and restarts (``restore``, ``from_state``, from
  the newest checkpoint), under tight limits (provisional writes, live grants, classes,
  totals) so refusals of late writes that break a later one happen too.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from app.domain import (
    MAX_VALUE,
    ConsumeWrite,
    GrantWrite,
    TimelineLimits,
    VoidWrite,
    Write,
)
from tests.timeline_model import Run, restored, restored_from_checkpoint, snapshot

CLASS_SETS: list[list[str] | None] = [None, None, ["h100"], ["a100"], ["a100", "h100"], ["b200"]]
RESOURCES: list[str | None] = [None, None, "h100", "a100", "b200"]

# -- any arrival order within the window ------------------------------------------------------


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[int, list[Write]]:
    """A window, and writes with timestamps within it of each other, in an arrival order
    (a void arrives after the grant it names, at or after the grant's timestamp)."""
    window = draw(st.integers(1, 12))
    base = draw(st.integers(0, 30))
    count = draw(st.integers(1, 12))
    specs: list[tuple[str, int, int]] = []  # (kind, timestamp, index of the spec)
    writes: list[Write] = []
    for index in range(count):
        timestamp = base + draw(st.integers(0, window))
        kind = draw(st.sampled_from(["grant", "grant", "consume", "consume", "void"]))
        amount = draw(st.integers(1, 40))
        if kind == "grant":
            expiry = timestamp + draw(st.integers(1, window + 3))
            writes.append(GrantWrite(amount, timestamp, expiry, draw(st.sampled_from(CLASS_SETS))))
        else:
            writes.append(ConsumeWrite(amount, timestamp, draw(st.sampled_from(RESOURCES))))
        specs.append((kind, timestamp, index))
    order = list(draw(st.permutations(range(count))))
    # Voids: each names a grant before it in the arrival order with a timestamp <= its own
    # (drawn among those), or stays a consumption when there is none.
    arrived: list[Write] = []
    grant_ids: dict[int, int] = {}  # spec index -> arrival grant id
    for index in order:
        write = writes[index]
        if specs[index][0] == "void":
            candidates = sorted(
                grant_ids[i] for i in grant_ids if writes[i].timestamp <= write.timestamp
            )
            if candidates:
                write = VoidWrite(draw(st.sampled_from(candidates)), write.timestamp)
        elif isinstance(write, GrantWrite):
            grant_ids[index] = len(grant_ids) + 1
        arrived.append(write)
    return window, arrived


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arrivals())
def test_any_arrival_order_within_the_window_is_sort_and_replay(
    case: tuple[int, list[Write]],
) -> None:
    window, writes = case
    run = Run(window, TimelineLimits(checkpoint_spacing_min=2, replay_spacing_min=1))
    for write in writes:
        assert run.write(write) is not None, "within the window every write is accepted"
    watermark = run.timeline.watermark
    if watermark:  # too late now: refused, nothing changed (the Run checks both)
        assert run.write(ConsumeWrite(1, watermark - 1)) is None
        assert run.write(GrantWrite(1, 0, watermark + 5)) is None


# -- the state machine ---------------------------------------------------------------------

LIMITS = [
    TimelineLimits(max_provisional=6, checkpoint_spacing_min=3, replay_spacing_min=2),
    TimelineLimits(
        max_provisional=4,
        max_live_grants=3,
        max_classes=2,
        checkpoint_spacing_min=2,
        replay_spacing_min=1,
    ),
    TimelineLimits(),
]


class TimelineMachine(RuleBasedStateMachine):
    run: Run

    @initialize(window=st.integers(0, 8), limits=st.sampled_from(range(len(LIMITS))))
    def start(self, window: int, limits: int) -> None:
        self.run = Run(window, LIMITS[limits])

    def _write_at(self, data: st.DataObject, timestamp: int) -> Write:
        kind = data.draw(st.sampled_from(["grant", "grant", "consume", "consume", "void"]))
        amount = data.draw(
            st.one_of(st.integers(1, 30), st.integers(MAX_VALUE - 40, MAX_VALUE)), label="amount"
        )
        if kind == "void" and self.run.timeline.next_grant_id > 1:
            grant_id = data.draw(st.integers(1, self.run.timeline.next_grant_id), label="grant")
            return VoidWrite(grant_id, timestamp)  # sometimes unknown or before its grant
        if kind == "grant":
            expiry = timestamp + data.draw(st.integers(1, 12), label="lifetime")
            return GrantWrite(amount, timestamp, expiry, data.draw(st.sampled_from(CLASS_SETS)))
        return ConsumeWrite(amount, timestamp, data.draw(st.sampled_from(RESOURCES)))

    @rule(data=st.data())
    def in_order(self, data: st.DataObject) -> None:
        timestamp = self.run.timeline.clock + data.draw(st.integers(0, 3), label="step")
        self.run.write(self._write_at(data, timestamp))

    @precondition(lambda self: self.run.timeline.clock > self.run.timeline.watermark)
    @rule(data=st.data())
    def late(self, data: st.DataObject) -> None:
        t = self.run.timeline
        timestamp = data.draw(st.integers(t.watermark, t.clock - 1), label="timestamp")
        self.run.write(self._write_at(data, timestamp))

    @precondition(lambda self: self.run.timeline.watermark > 0)
    @rule(data=st.data())
    def too_late(self, data: st.DataObject) -> None:
        timestamp = data.draw(st.integers(0, self.run.timeline.watermark - 1), label="timestamp")
        assert self.run.write(self._write_at(data, timestamp)) is None

    @rule(window=st.integers(0, 8))
    def set_window(self, window: int) -> None:
        self.run.set_window(window)

    @rule(from_checkpoint=st.booleans())
    def restart(self, from_checkpoint: bool) -> None:
        run = self.run
        rebuilt = (
            restored_from_checkpoint(run.timeline, run.store, run.limits)
            if from_checkpoint
            else restored(run.timeline, run.store, run.limits)
        )
        if rebuilt is None:
            return
        rebuilt.check_invariants()
        # Everything but whether the two trackers are one object (a restart with nothing
        # provisional keeps one; the running timeline may have split already).
        assert snapshot(rebuilt)[:11] == snapshot(run.timeline)[:11]
        run.timeline = rebuilt
        run.check()

    @invariant()
    def checked(self) -> None:
        if hasattr(self, "run"):
            self.run.timeline.check_invariants()


TimelineMachine.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTimelineMachine = TimelineMachine.TestCase
