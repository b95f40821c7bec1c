"""The timeline (SPEC section 6): late writes, restatements, the watermark, checkpoints.

Most tests drive a ``Run`` (tests/timeline_model.py): every write is checked against a
sort-and-replay model and a simulated store after each step, so the literal expectations
here are SPEC's examples and the cases named in the test names.
"""

from __future__ import annotations

import random

import pytest

from app.domain import (
    MAX_VALUE,
    REPLAY_SPACING_DIVISOR,
    AccountTimeline,
    Allocation,
    ClassLimit,
    ConsumeResult,
    ConsumeWrite,
    ConsumptionLine,
    ExpirationLine,
    GPUCreditTracker,
    GrantLine,
    GrantResult,
    GrantWrite,
    InvalidInput,
    Line,
    LiveGrant,
    LiveGrantLimit,
    NoLiveRoom,
    TimelineLimits,
    TimestampRegression,
    TooLate,
    TotalOverflow,
    VoidLine,
    VoidResult,
    VoidWrite,
    Write,
    WriteOutcome,
    replay,
)
from tests.timeline_model import (
    Model,
    Run,
    checkpoint_reads,
    empty_state,
    full_state,
    live_key,
    restored,
    restored_from_checkpoint,
    snapshot,
    without_expiration_sequences,
)

# Small spacings so marks and checkpoints happen in small tests.
SMALL = TimelineLimits(checkpoint_spacing_min=3, replay_spacing_min=2)


def _upserted(outcome: WriteOutcome) -> list[tuple[str, int]]:
    return [(line.kind, line.sequence) for line in outcome.upserted]


# -- SPEC Example 4 --------------------------------------------------------------------------


def test_spec_example_4() -> None:
    run = Run(window=10)
    first = run.write(GrantWrite(50, 10, 100))
    assert first is not None
    assert first.line == GrantLine(1, 10, 1, 50, 0, 0, 1, 50, 100, None, 0, 50)

    consumed = run.write(ConsumeWrite(80, 20))
    assert consumed is not None
    assert consumed.debt == 30
    assert isinstance(consumed.line, ConsumptionLine)
    assert consumed.line.allocation == (Allocation(1, 100, 50),)
    assert (consumed.line.consumed, consumed.line.debt_added) == (50, 30)
    assert (consumed.clock, consumed.watermark) == (20, 10)

    # Late grant 2: effective before the consumption, but it expires unused at 18.
    late = run.write(GrantWrite(40, 15, 18))
    assert late is not None
    assert late.restated == 0
    assert isinstance(late.line, GrantLine)
    assert (late.line.grant_id, late.line.settled_debt, late.line.retained) == (2, 0, 40)
    assert (late.line.available, late.line.debt) == (90, 0)  # at its position
    assert (late.available, late.debt) == (0, 30)  # totals at C = 20
    assert late.removed == ()
    expiration = late.upserted[-1]
    assert expiration == ExpirationLine(4, 18, 2 - 2**53, 50, 0, 0, 2, 18, 40, None)
    assert _upserted(late) == [("grant", 3), ("expiration", 4)]  # the consumption: unchanged

    # Late grant 3: the consumption now takes grant 3 first (expiry 60), then 40 of grant 1.
    third = run.write(GrantWrite(40, 12, 60))
    assert third is not None
    assert third.restated == 1
    assert isinstance(third.line, GrantLine)
    assert third.line.grant_id == 3
    assert (third.available, third.debt) == (10, 0)
    restated = [line for line in third.upserted if line.sequence == 2]
    assert restated == [
        ConsumptionLine(
            2, 20, 2, 10, 0, 1, 80, None, 80, 0, (Allocation(3, 60, 40), Allocation(1, 100, 40))
        )
    ]
    # The balance after grant 2 and its expiration changed too: written, not restated.
    assert _upserted(third) == [("grant", 5), ("grant", 3), ("expiration", 4), ("consumption", 2)]
    assert [line.revision for line in third.upserted] == [0, 0, 0, 1]
    assert third.live_upserted == (LiveGrant(1, 100, 10, None, 10),)
    assert third.live_removed == ()

    with pytest.raises(TooLate) as refused:
        run.timeline.write(ConsumeWrite(5, 9))
    assert refused.value.watermark == 10
    assert refused.value.account_timestamp == 20
    assert isinstance(refused.value, TimestampRegression)
    assert "watermark 10" in str(refused.value)


# -- a window of 0 is the plain tracker ---------------------------------------------------------


def _random_in_order(rng: random.Random, count: int) -> list[Write]:
    writes: list[Write] = []
    now = 0
    grants = 0
    for _ in range(count):
        now += rng.randint(0, 3)
        r = rng.random()
        if r < 0.45:
            resources = rng.choice([None, None, ["h100"], ["a100", "h100"]])
            writes.append(GrantWrite(rng.randint(1, 50), now, now + rng.randint(1, 20), resources))
            grants += 1
        elif r < 0.9 or not grants:
            writes.append(ConsumeWrite(rng.randint(1, 60), now, rng.choice([None, "h100", "a100"])))
        else:
            writes.append(VoidWrite(rng.randint(1, grants), now))
    return writes


@pytest.mark.parametrize("seed", range(5), ids=[f"seed-{s}" for s in range(5)])
def test_window_zero_is_the_plain_tracker(seed: int) -> None:
    timeline = AccountTimeline()
    tracker = GPUCreditTracker()
    sequence = 1
    for write in _random_in_order(random.Random(seed), 300):
        before = tracker.available, tracker.debt
        outcome = timeline.write(write)
        result: GrantResult | ConsumeResult | VoidResult
        if isinstance(write, GrantWrite):
            result = tracker.apply_grant(
                write.amount, write.timestamp, write.expiry, resources=write.resources
            )
            assert isinstance(outcome.line, GrantLine)
            assert outcome.line.grant_id == result.grant_id
            assert (outcome.line.settled_debt, outcome.line.retained) == (
                result.settled_debt,
                result.retained,
            )
        elif isinstance(write, ConsumeWrite):
            result = tracker.apply_consume(write.amount, write.timestamp, write.resource)
            assert isinstance(outcome.line, ConsumptionLine)
            assert outcome.line.allocation == result.allocation
            assert outcome.line.debt_added == result.debt_added
        else:
            result = tracker.apply_void(write.grant_id, write.timestamp)
            assert isinstance(outcome.line, VoidLine)
            assert outcome.line.amount == result.removed
        # Expiration lines first, numbered first, with the balance chain of the journal.
        available = before[0]
        for line, expired in zip(outcome.upserted, result.expired, strict=False):
            available -= expired.amount
            assert line == ExpirationLine(
                sequence, expired.expiry, expired.grant_id - 2**53, available, before[1], 0,
                expired.grant_id, expired.expiry, expired.amount, expired.resources,
            )  # fmt: skip
            sequence += 1
        assert len(outcome.upserted) == len(result.expired) + 1
        assert outcome.line.sequence == sequence
        sequence += 1
        assert (outcome.available, outcome.debt) == (result.available, result.debt)
        assert (outcome.line.available, outcome.line.debt) == (result.available, result.debt)
        assert (outcome.restated, outcome.removed, outcome.folded) == (0, (), 1)
        assert outcome.clock == outcome.watermark == write.timestamp
        assert timeline.current is timeline.final
        assert full_state(timeline.current) == full_state(tracker)
    timeline.check_invariants()


def test_window_zero_refuses_any_earlier_write_as_too_late() -> None:
    timeline = AccountTimeline()
    timeline.write(GrantWrite(5, 10, 20))
    before = snapshot(timeline)
    with pytest.raises(TooLate) as refused:
        timeline.write(ConsumeWrite(1, 9))
    assert (refused.value.watermark, refused.value.account_timestamp) == (10, 10)
    assert snapshot(timeline) == before
    timeline.write(ConsumeWrite(1, 10))  # at the clock: in order


def test_window_zero_live_grant_diff_from_the_results() -> None:
    timeline = AccountTimeline()
    first = timeline.write(GrantWrite(10, 1, 50))
    assert first.live_upserted == (LiveGrant(1, 50, 10, None, 1),)
    second = timeline.write(GrantWrite(10, 2, 40, ["h100"]))
    assert live_key(second.live_upserted[0]) == (2, 40, 10, ("h100",), 2)
    drawn = timeline.write(ConsumeWrite(15, 3, "h100"))
    assert drawn.live_removed == (2,)
    assert [live_key(g) for g in drawn.live_upserted] == [(1, 50, 5, None, 1)]
    voided = timeline.write(VoidWrite(1, 4))
    assert (voided.live_upserted, voided.live_removed) == ((), (1,))


# -- effective order -------------------------------------------------------------------------


def test_ties_at_equal_expiry_follow_effective_order() -> None:
    run = Run(window=10)
    run.write(GrantWrite(10, 20, 100))  # grant 1, arrives first, timestamp 20
    run.write(GrantWrite(10, 15, 100))  # grant 2, late, timestamp 15: effective first
    outcome = run.write(ConsumeWrite(15, 21))
    assert outcome is not None
    assert isinstance(outcome.line, ConsumptionLine)
    assert outcome.line.allocation == (Allocation(2, 100, 10), Allocation(1, 100, 5))


def test_ties_at_one_timestamp_follow_arrival() -> None:
    run = Run(window=10)
    run.write(ConsumeWrite(1, 20))
    run.write(GrantWrite(10, 15, 100))  # grant 1
    run.write(GrantWrite(10, 15, 100))  # grant 2, same timestamp, arrived later
    outcome = run.write(ConsumeWrite(12, 15))  # after both: same timestamp, arrived later
    assert outcome is not None
    assert isinstance(outcome.line, ConsumptionLine)
    assert outcome.line.allocation == (Allocation(1, 100, 10), Allocation(2, 100, 2))


def test_late_consumption_restates_later_ones() -> None:
    run = Run(window=10)
    run.write(GrantWrite(30, 10, 100))
    run.write(ConsumeWrite(20, 20))
    late = run.write(ConsumeWrite(25, 15))  # takes 25 first: the one at 20 gets 5
    assert late is not None
    assert late.restated == 1
    assert isinstance(late.line, ConsumptionLine)
    assert late.line.allocation == (Allocation(1, 100, 25),)
    restated = late.upserted[-1]
    assert isinstance(restated, ConsumptionLine)
    assert (restated.consumed, restated.debt_added, restated.revision) == (5, 15, 1)
    assert (late.available, late.debt) == (0, 15)


def test_late_void_restates_later_consumptions() -> None:
    run = Run(window=10)
    run.write(GrantWrite(50, 10, 100))
    run.write(ConsumeWrite(30, 20))
    voided = run.write(VoidWrite(1, 15))
    assert voided is not None
    assert isinstance(voided.line, VoidLine)
    assert voided.line.amount == 50
    assert voided.restated == 1
    consumption = voided.upserted[-1]
    assert isinstance(consumption, ConsumptionLine)
    assert (consumption.consumed, consumption.debt_added, consumption.allocation) == (0, 30, ())
    assert voided.live_removed == (1,)


def test_late_class_scoped_consumption() -> None:
    run = Run(window=10)
    run.write(GrantWrite(20, 10, 100, ["h100"]))
    run.write(GrantWrite(20, 10, 100))
    later = run.write(ConsumeWrite(30, 20, "h100"))  # 20 of h100's, 10 unrestricted
    assert later is not None
    late = run.write(ConsumeWrite(15, 15, "h100"))  # takes 15 of h100's first
    assert late is not None
    assert late.restated == 1
    restated = late.upserted[-1]
    assert isinstance(restated, ConsumptionLine)
    assert restated.allocation == (
        Allocation(1, 100, 5, ("h100",)),
        Allocation(2, 100, 20),
    )
    assert (restated.consumed, restated.debt_added) == (25, 5)
    assert run.timeline.balance_at(20, "h100") == (0, 5)
    assert run.timeline.balance_at(17, "h100") == (25, 0)
    # An a100 consumption, late: only the unrestricted grant pays it.
    run.write(ConsumeWrite(3, 16, "a100"))


def test_late_grant_settles_debt_before_a_later_grant() -> None:
    run = Run(window=10)
    run.write(ConsumeWrite(30, 10))  # debt 30
    run.write(GrantWrite(40, 20, 100))  # settles 30, keeps 10
    late = run.write(GrantWrite(25, 15, 90))  # settles 25 first: the one at 20 settles 5
    assert late is not None
    assert late.restated == 1
    restated = late.upserted[-1]
    assert isinstance(restated, GrantLine)
    assert (restated.settled_debt, restated.retained) == (5, 35)


# -- expiration lines ------------------------------------------------------------------------


def test_expiration_lines_appear_change_vanish_and_come_back_new() -> None:
    run = Run(window=10)
    run.write(GrantWrite(50, 10, 18))  # grant 1
    run.write(GrantWrite(10, 11, 100))  # grant 2
    at_20 = run.write(ConsumeWrite(5, 20))  # grant 1 expires unused at 18
    assert at_20 is not None
    appeared = at_20.upserted[0]
    assert isinstance(appeared, ExpirationLine)
    assert (appeared.grant_id, appeared.amount, appeared.timestamp) == (1, 50, 18)

    changed = run.write(ConsumeWrite(20, 15))  # draws 20 of grant 1 before it expires
    assert changed is not None
    assert changed.restated == 1  # the expiration; the consumption at 20 still takes grant 2
    expiration = [line for line in changed.upserted if isinstance(line, ExpirationLine)]
    assert [(e.sequence, e.amount, e.revision) for e in expiration] == [(appeared.sequence, 30, 1)]

    vanished = run.write(ConsumeWrite(30, 16))  # the rest of grant 1: nothing left to expire
    assert vanished is not None
    assert vanished.removed == (appeared.sequence,)
    assert vanished.restated == 1
    assert not any(isinstance(line, ExpirationLine) for line in run.timeline.lines())

    # A late grant expiring first takes both draws: grant 1 has credits at 18 again. The
    # expiration line is a new one (a new sequence), not the removed one come back.
    back = run.write(GrantWrite(50, 13, 17))
    assert back is not None
    expirations = [line for line in back.upserted if isinstance(line, ExpirationLine)]
    assert [(e.grant_id, e.amount, e.revision) for e in expirations] == [(1, 50, 0)]
    assert expirations[0].sequence > appeared.sequence
    assert back.restated == 2  # the two consumptions now draw grant 3


def test_expiration_lines_of_one_write_by_expiry_then_grant() -> None:
    run = Run(window=10)
    run.write(GrantWrite(5, 10, 30))  # grant 1
    run.write(GrantWrite(6, 5, 30, ["h100"]))  # grant 2, late: effective first
    run.write(GrantWrite(7, 8, 25))  # grant 3, late
    outcome = run.write(ConsumeWrite(1, 30))
    assert outcome is not None
    expirations = [line for line in outcome.upserted if isinstance(line, ExpirationLine)]
    assert [(e.timestamp, e.grant_id, e.available) for e in expirations] == [
        (25, 3, 11),
        (30, 1, 6),
        (30, 2, 0),
    ]


def test_expiration_lines_at_one_expiry_by_arrival_id_after_a_late_grant() -> None:
    run = Run(window=10)
    run.write(GrantWrite(5, 20, 30))  # grant 1
    run.write(GrantWrite(6, 15, 30))  # grant 2, late: before grant 1 in the heap
    outcome = run.write(ConsumeWrite(1, 30))  # in order, on the replayed tracker
    assert outcome is not None
    expirations = [line for line in outcome.upserted if isinstance(line, ExpirationLine)]
    assert [(e.grant_id, e.available) for e in expirations] == [(1, 6), (2, 0)]


# -- the watermark, folding and the bound ----------------------------------------------------


def test_write_at_the_watermark_goes_first_and_folds() -> None:
    run = Run(window=10)
    run.write(GrantWrite(10, 5, 100))
    run.write(ConsumeWrite(4, 20))  # M = 10: the grant at 5 folds
    assert run.timeline.provisional_count == 1
    at_m = run.write(ConsumeWrite(3, 10))  # at M: before the one at 20, folded at once
    assert at_m is not None
    assert at_m.folded == 1
    assert run.timeline.final.clock == 10
    assert run.timeline.provisional_count == 1


def test_the_bound_on_provisional_writes_folds_the_oldest() -> None:
    run = Run(window=100, limits=TimelineLimits(max_provisional=3))
    for timestamp in (1, 2, 3):
        outcome = run.write(GrantWrite(5, timestamp, 1000))
        assert outcome is not None
        assert (outcome.watermark, outcome.folded) == (0, 0)
    fourth = run.write(ConsumeWrite(1, 4))
    assert fourth is not None
    assert (fourth.watermark, fourth.folded) == (1, 1)  # the oldest became final early
    assert run.timeline.provisional_count == 3
    run.write(ConsumeWrite(1, 1))  # at the new watermark: accepted, folds at once
    assert run.write(ConsumeWrite(1, 0)) is None  # before it: TooLate (the Run checks)


def test_the_bound_folds_every_write_at_the_new_watermark() -> None:
    run = Run(window=100, limits=TimelineLimits(max_provisional=2))
    run.write(GrantWrite(5, 1, 1000))
    run.write(GrantWrite(5, 1, 1000))
    outcome = run.write(GrantWrite(5, 2, 1000))
    assert outcome is not None
    assert (outcome.watermark, outcome.folded) == (1, 2)
    assert run.timeline.provisional_count == 1


def test_set_window_lowering_folds_raising_keeps_the_watermark() -> None:
    run = Run(window=10, limits=SMALL)
    for timestamp in range(1, 30, 2):
        run.write(GrantWrite(3, timestamp, 100))
    assert run.timeline.watermark == 19
    run.set_window(4)
    assert run.timeline.watermark == 25
    run.set_window(50)
    assert run.timeline.watermark == 25  # never back
    run.write(ConsumeWrite(1, 26))
    run.set_window(0)
    assert run.timeline.watermark == run.timeline.clock == 29
    assert run.timeline.current is run.timeline.final
    assert run.timeline.provisional_count == 0
    run.write(ConsumeWrite(1, 29))
    run.set_window(3)  # the trackers split again at the next provisional write
    run.write(ConsumeWrite(1, 31))
    run.write(ConsumeWrite(1, 30))


@pytest.mark.parametrize("window", [-1, True, 2**53, "3"], ids=["negative", "bool", "big", "str"])
def test_set_window_refuses_bad_windows(window: object) -> None:
    timeline = AccountTimeline(5)
    with pytest.raises(InvalidInput, match="window"):
        timeline.set_window(window)  # type: ignore[arg-type]
    assert timeline.window == 5


def test_replay_cost_is_zero_in_order_and_none_before_the_watermark() -> None:
    timeline = AccountTimeline(10)
    for t in (10, 20, 30, 40):
        timeline.write(ConsumeWrite(1, t))
    assert timeline.watermark == 30
    at = (29, 30, 35, 39, 40, 41, 10**6)  # 29: refused (too late), 40 on: in order
    costs = [timeline.replay_cost(t) for t in at]
    assert [c is None for c in costs] == [True] + [False] * 6
    assert [(c or 0) > 0 for c in costs] == [False, True, True, True] + [False] * 3
    timeline.write(ConsumeWrite(1, 45))
    assert timeline.watermark == 35
    costs = [timeline.replay_cost(t) for t in (34, 35, 44, 45)]
    assert [(c or 0) > 0 for c in costs] == [False, True, True, False]
    # Behind the watermark nothing replays, not even behind writes to come.
    assert timeline.replay_cost(34, late=True, earlier=5) is None


def test_replay_cost_is_none_without_a_window() -> None:
    """Every write folds at once and one behind the clock is refused: nothing ever replays,
    however the caller's writes to come are ordered."""
    timeline = AccountTimeline(0)
    for t in range(10, 1_000, 10):
        timeline.write(GrantWrite(1, t, 10**6))
    assert timeline.replay_cost(5) is None
    assert timeline.replay_cost(10**6, late=True, earlier=500, grown=500) is None


def test_replay_cost_counts_the_copy_and_the_writes_from_the_mark() -> None:
    """A late write copies its replay base (a mark, or the final tracker) and replays every
    provisional write from there: those before it since the mark, and those after it."""
    limits = TimelineLimits(replay_spacing_min=4)
    timeline = AccountTimeline(1_000, limits=limits)
    for t in range(10, 110, 10):  # 10 grants, all provisional; marks every 4 writes
        timeline.write(GrantWrite(1, t, 10**6))
    assert timeline.provisional_count == 10
    assert [timeline.replay_cost(t) for t in (100, 10**6)] == [0, 0]  # in order
    copy = timeline.current.live_grant_count // REPLAY_SPACING_DIVISOR
    # At 95: one write after it, replayed from the mark after the 8th write (index 8).
    assert timeline.replay_cost(95) == 2 + copy
    # At 15: nine after it, from the final tracker (no mark before index 1).
    assert timeline.replay_cost(15) == 10 + copy
    # A class read at 95 replays from the mark up to its position only.
    assert timeline.replay_cost(95, read=True) == 1 + copy
    many = AccountTimeline(10**9)
    for n in range(400):
        many.write(GrantWrite(1, 2 * n + 2, 10**9))
    # One write after it, but a copy of 400 live grants and the writes since the mark.
    assert (many.replay_cost(799) or 0) >= 1 + 400 // REPLAY_SPACING_DIVISOR
    # In order now, but late behind writes to come (``late``): the copy and the writes
    # since the last mark, those to come being the caller's to count.
    assert many.replay_cost(10**6) == 0
    assert (many.replay_cost(10**6, late=True) or 0) >= 400 // REPLAY_SPACING_DIVISOR


def test_replay_cost_counts_the_copy_of_the_base_not_of_the_clock() -> None:
    """The copy a late write starts from is its replay base's, with the grants live there:
    grants that expired by the clock are live in a base before their expiry, copied and
    expired again by the replay (about as costly again). Before, the copy was counted from
    the state at the clock (none live): 100 late writes behind 10,000 grants expiring in
    the provisional region counted 20-odd writes each and held the loop 1.8 s in one
    batch."""
    timeline = AccountTimeline(1_500)
    for n in range(400):
        timeline.write(GrantWrite(1, n, 1_000 + n))
    for t in range(2_000, 2_010):
        timeline.write(ConsumeWrite(1, t))
    assert timeline.watermark == 509  # the grants folded; the ten consumptions did not
    assert timeline.final.live_grant_count == 400
    assert timeline.current.live_grant_count == 0  # every grant expired by the clock
    copy = 400 // REPLAY_SPACING_DIVISOR
    # Behind the ten consumptions, from the folded state (400 live): copied, and the 400
    # expired again (as much again).
    assert timeline.replay_cost(600) == 10 + 2 * copy
    assert timeline.replay_cost(600, read=True) == 2 * copy
    # In order but late behind writes to come: from the same base, the ten since it.
    assert timeline.replay_cost(3_000, late=True) == 10 + 2 * copy
    # Grants live at the clock too are copied only (expired again: none).
    lasting = AccountTimeline(1_500)
    for n in range(400):
        lasting.write(GrantWrite(100, n, 10**6))
    for t in range(2_000, 2_010):
        lasting.write(ConsumeWrite(1, t))
    assert lasting.replay_cost(600) == 10 + copy


def test_replay_cost_counts_the_callers_writes_before_it_and_its_grants() -> None:
    """Late behind writes to come, a write's base may be a mark among those before it: up
    to a replay spacing of them count (``earlier``); the live grants they add (``grown``)
    count in the copy and the spacing."""
    timeline = AccountTimeline(10**9)  # nothing provisional, no live grant: spacing 64
    assert timeline.replay_cost(10, late=True) == 0
    assert timeline.replay_cost(10, late=True, earlier=20) == 20
    assert timeline.replay_cost(10, late=True, earlier=1_000) == 64
    copy = 2_000 // REPLAY_SPACING_DIVISOR
    assert timeline.replay_cost(10, late=True, earlier=1_000, grown=2_000) == 2 * copy
    assert timeline.replay_cost(10, late=True, earlier=1_000, grown=2_000, read=True) == 2 * copy
    # The copy is of at most the live grants an account may hold.
    capped = AccountTimeline(10**9, limits=TimelineLimits(max_live_grants=80))
    assert capped.replay_cost(10, late=True, grown=2_000) == 10
    # Behind the clock: its own writes after it, and the caller's writes before it.
    for t in range(100, 200):
        timeline.write(ConsumeWrite(1, t))
    assert timeline.replay_cost(150) == 100  # from the final state (mark at 64: index 64)
    assert timeline.replay_cost(170) == 100 - 64
    assert timeline.replay_cost(170, earlier=10) == 100 - 64 + 10
    assert timeline.replay_cost(170, earlier=100) == 29 + 64


# -- refusals change nothing -----------------------------------------------------------------


def test_late_write_that_breaks_a_later_grant_live_limit_is_refused() -> None:
    run = Run(window=10, limits=TimelineLimits(max_live_grants=2))
    run.write(GrantWrite(5, 10, 100))
    run.write(GrantWrite(5, 20, 100))
    # Valid at 15 (two live grants there), but the grant at 20 would make three.
    assert run.write(GrantWrite(5, 15, 100)) is None  # LiveGrantLimit, nothing changed
    with pytest.raises(LiveGrantLimit):
        run.timeline.write(GrantWrite(5, 15, 100))


def test_late_write_that_overflows_a_later_total_is_refused() -> None:
    run = Run(window=10)
    run.write(GrantWrite(MAX_VALUE, 20, 100))
    with pytest.raises(TotalOverflow):
        run.timeline.write(GrantWrite(1, 15, 100))
    assert run.write(GrantWrite(1, 15, 100)) is None


def test_late_write_that_breaks_a_later_class_limit_is_refused() -> None:
    run = Run(window=10, limits=TimelineLimits(max_classes=1))
    run.write(GrantWrite(5, 20, 100, ["h100"]))
    with pytest.raises(ClassLimit):
        run.timeline.write(GrantWrite(5, 15, 100, ["a100"]))
    assert run.write(GrantWrite(5, 15, 100, ["a100"])) is None
    run.write(GrantWrite(5, 15, 100, ["h100"]))  # its own class: fine


@pytest.mark.parametrize(
    "write",
    [
        GrantWrite(0, 15, 100),
        GrantWrite(5, 15, 15),
        GrantWrite(5, 15, 100, ["bad name"]),
        ConsumeWrite(True, 15),
        ConsumeWrite(5, 15, "h100 "),
        ConsumeWrite(5, -1),
        VoidWrite(9, 15),
        VoidWrite(0, 15),
    ],
    ids=[
        "grant-amount",
        "grant-expiry",
        "grant-class",
        "consume-bool",
        "consume-class",
        "negative-timestamp",
        "void-unknown",
        "void-zero",
    ],
)
def test_invalid_late_write_is_refused_and_changes_nothing(write: Write) -> None:
    run = Run(window=10)
    run.write(GrantWrite(5, 10, 100))
    run.write(ConsumeWrite(1, 20))
    before = snapshot(run.timeline)
    with pytest.raises(InvalidInput):
        run.timeline.write(write)
    assert snapshot(run.timeline) == before


def test_invalid_too_late_write_reports_the_input_first() -> None:
    timeline = AccountTimeline()
    timeline.write(GrantWrite(5, 10, 100))
    with pytest.raises(InvalidInput, match="amount"):
        timeline.write(GrantWrite(0, 3, 100))
    with pytest.raises(TooLate):
        timeline.write(GrantWrite(1, 3, 100))


def test_not_a_write_is_refused() -> None:
    with pytest.raises(InvalidInput, match="not a write"):
        AccountTimeline().write(("grant", 1, 2, 3))  # type: ignore[arg-type]


def test_void_before_its_provisional_grant_is_refused() -> None:
    run = Run(window=10)
    run.write(GrantWrite(5, 18, 100))
    run.write(ConsumeWrite(1, 20))
    with pytest.raises(InvalidInput, match="before grant 1"):
        run.timeline.write(VoidWrite(1, 15))
    voided = run.write(VoidWrite(1, 18))  # at the grant's own timestamp: after it
    assert voided is not None
    assert isinstance(voided.line, VoidLine)
    assert voided.line.amount == 5


def test_live_room_counts_the_current_state() -> None:
    run = Run(window=10)
    run.write(GrantWrite(5, 10, 100))
    run.write(ConsumeWrite(5, 20))
    before = snapshot(run.timeline)
    with pytest.raises(NoLiveRoom):
        run.timeline.write(GrantWrite(5, 21, 100), live_room=0)
    # Late: the consumption at 20 takes grant 1 (expiry 100) after the new one (expiry 50)
    # is drawn first, so grant 1 keeps 5 and the new one is used up: still one more live.
    with pytest.raises(NoLiveRoom):
        run.timeline.write(GrantWrite(5, 15, 50), live_room=0)
    assert snapshot(run.timeline) == before
    outcome = run.timeline.write(GrantWrite(5, 15, 50), live_room=1)
    assert outcome.live_upserted == (LiveGrant(1, 100, 5, None, 10),)


# -- reads -----------------------------------------------------------------------------------


def test_balance_at_as_of_and_projection() -> None:
    run = Run(window=10)
    run.write(GrantWrite(50, 10, 100))
    run.write(GrantWrite(40, 12, 16, ["h100"]))
    run.write(ConsumeWrite(80, 20))
    t = run.timeline
    assert t.balance_at(10) == (50, 0)  # at the watermark
    assert t.balance_at(12) == (90, 0)
    assert t.balance_at(12, "h100") == (90, 0)
    assert t.balance_at(12, "a100") == (50, 0)
    assert t.balance_at(16) == (50, 0)  # grant 2 expired at 16: before any write saw it
    assert t.balance_at(19, "h100") == (50, 0)
    assert t.balance_at(20) == (0, 30)
    assert t.balance_at(100) == (0, 30)
    with pytest.raises(TooLate):
        t.balance_at(9)
    with pytest.raises(InvalidInput):
        t.balance_at(-1)
    with pytest.raises(InvalidInput):
        t.balance_at(15, "not a class")


def test_balance_at_window_zero_is_the_projection() -> None:
    timeline = AccountTimeline()
    timeline.write(GrantWrite(5, 1, 10))
    assert timeline.balance_at(9) == (5, 0)
    assert timeline.balance_at(10) == (0, 0)
    with pytest.raises(TooLate):
        timeline.balance_at(0)


# -- checkpoints, replay, restore ------------------------------------------------------------


def test_checkpoints_every_k_folded_writes() -> None:
    timeline = AccountTimeline(limits=TimelineLimits(checkpoint_spacing_min=4))
    emitted = []
    for timestamp in range(10):
        outcome = timeline.write(GrantWrite(1, timestamp, 1000 + timestamp))
        if outcome.checkpoint is not None:
            emitted.append((timestamp, outcome.checkpoint))
    # K = max(4, live grants at the previous checkpoint): 4 at first, 4 again after the
    # first (4 live then), 8 after the second (8 live then).
    assert [t for t, _ in emitted] == [3, 7]
    checkpoint = emitted[0][1]
    assert (checkpoint.sequence, checkpoint.timestamp) == (4, 3)
    assert checkpoint.state.clock == 3
    assert len(checkpoint.state.live_grants) == 4
    assert len(emitted[1][1].state.live_grants) == 8
    assert timeline.folded_since_checkpoint == 2


def test_checkpoints_of_a_large_fold_come_every_k() -> None:
    run = Run(window=100, limits=TimelineLimits(checkpoint_spacing_min=3))
    for timestamp in range(1, 11):
        run.write(ConsumeWrite(1, timestamp))
    outcome = run.timeline.set_window(0)
    assert outcome.folded == 10
    assert [c.sequence for c in outcome.checkpoints] == [3, 6, 9]


def test_replay_from_a_checkpoint_answers_as_of_reads() -> None:
    run = Run(window=5, limits=SMALL)
    rng = random.Random(3)
    for write in _random_in_order(rng, 60):
        run.write(write)
    assert run.store.checkpoints
    for checkpoint in run.store.checkpoints:
        for timestamp in range(checkpoint.timestamp, run.timeline.watermark):
            assert checkpoint_reads(run.store, checkpoint, timestamp) == run.model.balance_at(
                timestamp
            )


def test_replay_refuses_writes_out_of_effective_order() -> None:
    state = empty_state()
    with pytest.raises(InvalidInput, match="effective order"):
        replay(state, [(2, None, ConsumeWrite(1, 5)), (1, None, ConsumeWrite(1, 5))])
    with pytest.raises(InvalidInput, match="effective order"):
        replay(state, [(2, None, ConsumeWrite(1, 5)), (3, None, ConsumeWrite(1, 4))])
    with pytest.raises(InvalidInput, match="grant id"):
        replay(state, [(1, None, GrantWrite(1, 5, 10))])
    with pytest.raises(InvalidInput, match="grant id"):
        replay(state, [(1, 1, ConsumeWrite(1, 5))])
    tracker = replay(state, [(2, 2, GrantWrite(1, 5, 10)), (1, 1, GrantWrite(1, 6, 10))], 5)
    assert [g.grant_id for g in tracker.live_grants()] == [2]


@pytest.mark.parametrize("window", [0, 4], ids=["window-0", "window-4"])
def test_restore_round_trip(window: int) -> None:
    run = Run(window=window, limits=SMALL)
    for write in _random_in_order(random.Random(11), 80):
        run.write(write)
    for rebuild in (restored, restored_from_checkpoint):
        rebuilt = rebuild(run.timeline, run.store, SMALL)
        assert rebuilt is not None
        rebuilt.check_invariants()
        assert snapshot(rebuilt)[:11] == snapshot(run.timeline)[:11]
        run.timeline = rebuilt  # and it carries on exactly as the original would
        clock = rebuilt.clock
        run.write(GrantWrite(7, clock + 1, clock + 9))
        run.write(ConsumeWrite(5, max(rebuilt.watermark, clock - 1), "h100"))
        run.write(GrantWrite(4, max(rebuilt.watermark, clock - 2), clock + 3))


def test_restore_refuses_lines_the_writes_do_not_give() -> None:
    run = Run(window=10)
    run.write(GrantWrite(50, 10, 18))
    run.write(ConsumeWrite(5, 20))
    lines = run.timeline.lines()
    state = run.timeline.final.state()

    def restore(lines: list[Line], watermark: int = 10, next_grant_id: int = 2) -> None:
        rebuilt = AccountTimeline.restore(
            state,
            next_sequence=run.timeline.next_sequence,
            watermark=watermark,
            window=10,
            lines=lines,
            next_grant_id=next_grant_id,
        )
        assert rebuilt.lines() == lines

    restore(lines)
    tampered = [line._replace(available=line.available + 1) for line in lines]
    with pytest.raises(InvalidInput, match="pair assertion"):
        restore(tampered)
    extra = ExpirationLine(1, 19, 5 - 2**53, 0, 0, 0, 5, 19, 1, None)
    with pytest.raises(InvalidInput, match="do not give"):
        restore([*lines[:-1], extra, lines[-1]])
    with pytest.raises(InvalidInput, match="watermark"):
        restore(lines, watermark=25)
    with pytest.raises(InvalidInput, match="ledger order"):
        restore(lines[::-1])
    with pytest.raises(InvalidInput, match="next_grant_id"):
        restore(lines, next_grant_id=7)


@pytest.mark.parametrize("window", [0, 3, 6], ids=lambda w: f"lowered-to-{w}")
def test_restore_with_a_lowered_window_folds_as_set_window_does(window: int) -> None:
    """A window lowered across a restart (the service's, by configuration): the stored
    watermark trails the clock by more than the new window. Restoring folds what the new
    window passes, exactly as ``set_window`` would have, except that it emits no checkpoint
    (nothing is written on a load): the count carries on, and the next fold emits one."""
    run = Run(window=10, limits=SMALL)
    for timestamp in range(0, 40, 2):
        run.write(GrantWrite(3, timestamp, timestamp + 15))
        run.write(ConsumeWrite(2, timestamp + 1, "h100" if timestamp % 4 else None))
    assert run.timeline.provisional_count > 0
    rebuilt = AccountTimeline.restore(
        run.timeline.final.state(),
        next_sequence=run.timeline.next_sequence,
        watermark=run.timeline.watermark,
        window=window,
        lines=[line for line in run.store.listing() if line.timestamp > run.timeline.final.clock],
        next_grant_id=run.timeline.next_grant_id,
        folded_since_checkpoint=run.timeline.folded_since_checkpoint,
        limits=SMALL,
    )
    rebuilt.check_invariants()
    lowered = run.timeline.copy()
    lowered.set_window(window)
    assert rebuilt.watermark == lowered.watermark == max(0, rebuilt.clock - window)
    assert _but_checkpoint_count(rebuilt) == _but_checkpoint_count(lowered)
    assert (rebuilt.current is rebuilt.final) == (window == 0)
    folded = rebuilt.folded_since_checkpoint - run.timeline.folded_since_checkpoint
    assert folded == run.timeline.provisional_count - rebuilt.provisional_count
    # It carries on as the lowered original does; its next fold emits the checkpoint due.
    outcomes = [t.write(ConsumeWrite(1, t.clock + 1)) for t in (rebuilt, lowered)]
    rebuilt.check_invariants()
    assert _but_checkpoint_count(rebuilt) == _but_checkpoint_count(lowered)
    assert outcomes[0].folded == 1
    (due,) = outcomes[0].checkpoints
    assert due.state == rebuilt.final.state() == lowered.final.state()


def _but_checkpoint_count(timeline: AccountTimeline) -> tuple[object, ...]:
    observed = snapshot(timeline)
    return observed[:5] + observed[6:]


def test_from_state_is_one_tracker() -> None:
    timeline = AccountTimeline()
    for write in _random_in_order(random.Random(5), 50):
        timeline.write(write)
    rebuilt = AccountTimeline.from_state(
        timeline.final.state(), next_sequence=timeline.next_sequence, window=7
    )
    assert rebuilt.current is rebuilt.final
    assert (rebuilt.clock, rebuilt.watermark) == (timeline.clock, timeline.clock)
    assert full_state(rebuilt.current) == full_state(timeline.current)
    rebuilt.check_invariants()
    with pytest.raises(InvalidInput, match="next_sequence"):
        AccountTimeline.from_state(timeline.final.state(), next_sequence=0)


# -- replay marks ----------------------------------------------------------------------------


def test_late_writes_between_replay_marks() -> None:
    run = Run(window=1000, limits=TimelineLimits(replay_spacing_min=3))
    run.reads = False
    rng = random.Random(8)
    for timestamp in range(0, 200, 5):
        run.write(GrantWrite(rng.randint(1, 20), timestamp, timestamp + rng.randint(5, 80)))
        run.write(ConsumeWrite(rng.randint(1, 25), timestamp + 1))
    run.reads = True
    for _ in range(15):  # late writes at every depth, each checked against the model
        timestamp = rng.randint(run.timeline.watermark, run.timeline.clock - 1)
        if rng.random() < 0.5:
            run.write(GrantWrite(rng.randint(1, 30), timestamp, timestamp + rng.randint(1, 60)))
        else:
            run.write(ConsumeWrite(rng.randint(1, 30), timestamp))


def test_long_runs_compact_the_folded_writes() -> None:
    # Folded writes leave the provisional list in bulk (amortised O(1)) and the marks follow;
    # late writes after that still give what sort-and-replay gives.
    limits = TimelineLimits(replay_spacing_min=2)
    timeline = AccountTimeline(3, limits=limits)
    model = Model(3, limits)
    rng = random.Random(4)
    for index, write in enumerate(_random_in_order(rng, 1500)):
        if index % 7 == 3 and timeline.clock > timeline.watermark:
            write = ConsumeWrite(1, rng.randint(timeline.watermark, timeline.clock - 1))
        if isinstance(write, VoidWrite) and write.grant_id >= timeline.next_grant_id:
            continue  # a grant the replaced writes never made
        model.accept(write, timeline.write(write).line.sequence)
    timeline.check_invariants()
    replayed = model.replay()
    assert [live_key(g) for g in timeline.current.live_grants()] == model.live_grants()
    assert (timeline.available, timeline.debt) == (
        replayed.tracker.available,
        replayed.tracker.debt,
    )
    provisional = [line for line in replayed.lines if line.timestamp > timeline.final.clock]
    assert without_expiration_sequences(timeline.lines()) == provisional
