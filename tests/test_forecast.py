"""The forecast of a constant burn (``app.domain.forecast``) against a brute-force simulation:
a consumption of ``burn_rate`` at every integer time from the clock, posted one by one to a
copy of the tracker, until one is not covered in full. Same run-out time, same draws per
grant, same expirations, on random accounts with GPU classes, debt and voids."""

from __future__ import annotations

from dataclasses import dataclass

import hypothesis.strategies as st
import pytest
from hypothesis import event, given, settings

from app.domain import (
    MAX_VALUE,
    Forecast,
    GPUCreditTracker,
    GrantForecast,
    InvalidInput,
    LedgerError,
    LiveGrant,
    drawable,
    forecast,
)

CLASSES = ("a", "b", "c")


@dataclass(frozen=True)
class Simulated:
    run_out_at: int
    consumed: dict[int, int]  # grant -> drawn by the burn
    expired: dict[int, int]  # grant -> expired unused
    used_up_at: dict[int, int]  # grant -> the step that drew its last credit


def simulate(tracker: GPUCreditTracker, burn_rate: int, resource: str | None) -> Simulated:
    """The burn, step by step, through the tracker's own consumption on a copy."""
    sim = tracker.copy()
    eligible = {g.grant_id for g in drawable(tracker.live_grants(resource), resource)}
    consumed = dict.fromkeys(eligible, 0)
    expired = dict.fromkeys(eligible, 0)
    used_up_at: dict[int, int] = {}
    t = tracker.clock
    while True:
        step = sim.apply_consume(burn_rate, t, resource)
        for e in step.expired:
            if e.grant_id in eligible:
                expired[e.grant_id] += e.amount
        for drawn, left in zip(step.allocation, step.remaining, strict=True):
            consumed[drawn.grant_id] += drawn.amount
            if left == 0:
                used_up_at[drawn.grant_id] = t
        if step.debt_added:
            break
        t += 1
    # The step that ran short drew everything it could: nothing drawable is left to expire.
    assert not drawable(sim.live_grants(resource), resource)
    return Simulated(t, consumed, expired, used_up_at)


def assert_agrees(tracker: GPUCreditTracker, burn_rate: int, resource: str | None) -> Forecast:
    live = tracker.live_grants(resource)
    got = forecast(live, tracker.clock, burn_rate, resource)
    want = simulate(tracker, burn_rate, resource)
    assert got.run_out_at == want.run_out_at
    assert [g.grant_id for g in got.grants] == [g.grant_id for g in drawable(live, resource)]
    for g in got.grants:
        assert g.consumed == want.consumed[g.grant_id], g
        assert g.expiring_unused == want.expired[g.grant_id], g
        assert g.used_up_at == want.used_up_at.get(g.grant_id), g
        assert g.consumed + g.expiring_unused == g.remaining
    assert got.available == sum(g.remaining for g in got.grants)
    assert got.consumed == sum(want.consumed.values())
    assert got.expiring_unused == sum(want.expired.values())
    assert got.available == got.consumed + got.expiring_unused
    # Every step before the run-out is covered in full, the one at it is not.
    partial = got.consumed - burn_rate * (got.run_out_at - got.start)
    assert 0 <= partial < burn_rate
    # The list of every live grant gives the same answer (the ones not drawable are left out).
    assert forecast(tracker.live_grants(), tracker.clock, burn_rate, resource) == got
    return got


# -- random accounts ------------------------------------------------------------------------

_classes = st.one_of(
    st.none(), st.none(), st.lists(st.sampled_from(CLASSES), min_size=1, max_size=3, unique=True)
)


@dataclass(frozen=True)
class Grant:
    amount: int
    step: int  # how far the clock moves first
    lifetime: int
    resources: list[str] | None


@dataclass(frozen=True)
class Consume:
    amount: int
    step: int
    resource: str | None


@dataclass(frozen=True)
class Void:
    grant_id: int
    step: int


Operation = Grant | Consume | Void
_grant: st.SearchStrategy[Operation] = st.builds(
    Grant, st.integers(1, 60), st.integers(0, 3), st.integers(1, 60), _classes
)
_consume: st.SearchStrategy[Operation] = st.builds(
    Consume, st.integers(1, 40), st.integers(0, 3), st.none() | st.sampled_from(CLASSES)
)
_void: st.SearchStrategy[Operation] = st.builds(Void, st.integers(1, 12), st.integers(0, 3))
_BY_KIND = {"g": _grant, "c": _consume, "v": _void}
# Mostly grants (a strategy listed twice in one_of is drawn no more often: weigh by kind).
_operation = st.sampled_from("ggggccv").flatmap(_BY_KIND.__getitem__)
_operations = st.lists(_operation, min_size=1, max_size=16)


def build(operations: list[Operation]) -> GPUCreditTracker:
    tracker = GPUCreditTracker()
    t = 0
    for op in operations:
        t += op.step
        try:
            if isinstance(op, Grant):
                tracker.apply_grant(op.amount, t, t + op.lifetime, resources=op.resources)
            elif isinstance(op, Consume):
                tracker.apply_consume(op.amount, t, op.resource)
            else:
                tracker.apply_void(op.grant_id, t)
        except LedgerError:
            pass  # a refused call changes nothing; the account goes on
    return tracker


@settings(max_examples=400, deadline=None)
@given(
    operations=_operations,
    burn_rate=st.integers(1, 30),
    resource=st.none() | st.sampled_from(CLASSES),
)
def test_forecast_is_the_burn_posted_step_by_step(
    operations: list[Operation], burn_rate: int, resource: str | None
) -> None:
    tracker = build(operations)
    describe(assert_agrees(tracker, burn_rate, resource))


@settings(max_examples=200, deadline=None)
@given(
    grants=st.lists(
        st.tuples(st.integers(1, 50), st.integers(1, 30), _classes), min_size=1, max_size=12
    ),
    start=st.integers(0, 5),
    burn_rate=st.integers(1, 60),
    resource=st.none() | st.sampled_from(CLASSES),
)
def test_many_grants_at_one_time(
    grants: list[tuple[int, int, list[str] | None]],
    start: int,
    burn_rate: int,
    resource: str | None,
) -> None:
    """Grants all made at the clock, many sharing an expiry: ties go narrower class set
    first, then grant order."""
    tracker = GPUCreditTracker()
    for amount, lifetime, resources in grants:
        tracker.apply_grant(amount, start, start + lifetime, resources=resources)
    describe(assert_agrees(tracker, burn_rate, resource))


def describe(got: Forecast) -> None:
    """What the example exercised (``--hypothesis-show-statistics``)."""
    event(f"grants drawable: {min(len(got.grants), 3)}{'+' if len(got.grants) >= 3 else ''}")
    event(f"some expire unused: {got.expiring_unused > 0}")
    event(f"a grant used up: {any(g.used_up_at is not None for g in got.grants)}")
    full_steps = got.burn_rate * (got.run_out_at - got.start)
    event(f"the run-out step drew some: {got.consumed > full_steps}")


# -- worked examples (the README's) ------------------------------------------------------------


def test_one_grant_lasts_amount_over_rate() -> None:
    tracker = GPUCreditTracker()
    tracker.apply_grant(100, 0, 1000)
    got = assert_agrees(tracker, 10, None)
    # Steps at 0..9 take 10 each; the step at 10 finds nothing.
    assert got.run_out_at == 10
    assert got.grants == (GrantForecast(1, 1000, 100, None, 100, 0, 9),)


def test_a_grant_expires_before_the_burn_uses_it_up() -> None:
    tracker = GPUCreditTracker()
    tracker.apply_grant(100, 0, 5)  # 5 steps of 10: 50 expire unused at 5
    tracker.apply_grant(30, 0, 20)
    got = assert_agrees(tracker, 10, None)
    assert [(g.grant_id, g.consumed, g.expiring_unused, g.used_up_at) for g in got.grants] == [
        (1, 50, 50, None),
        (2, 30, 0, 7),
    ]
    assert (got.run_out_at, got.consumed, got.expiring_unused) == (8, 80, 50)


def test_a_step_drawn_from_two_grants() -> None:
    tracker = GPUCreditTracker()
    tracker.apply_grant(25, 3, 50)
    tracker.apply_grant(7, 3, 60)
    got = assert_agrees(tracker, 10, None)
    # 3, 4: 10 each from grant 1; 5: its last 5, then 5 of grant 2; 6: grant 2's last 2.
    assert [(g.consumed, g.used_up_at) for g in got.grants] == [(25, 5), (7, 6)]
    assert got.run_out_at == 6
    assert got.consumed - 10 * (got.run_out_at - got.start) == 2  # drawn at the run-out step


def test_classes_draw_only_what_they_may() -> None:
    tracker = GPUCreditTracker()
    tracker.apply_grant(40, 0, 30, resources=["h100"])
    tracker.apply_grant(20, 0, 10)
    tracker.apply_grant(50, 0, 20, resources=["a100"])
    h100 = assert_agrees(tracker, 5, "h100")
    assert [(g.grant_id, g.consumed, g.expiring_unused) for g in h100.grants] == [
        (2, 20, 0),  # expiry 10 first: steps 0..3
        (1, 40, 0),  # then steps 4..11
    ]
    assert h100.run_out_at == 12
    # No class: the unrestricted grant alone.
    plain = assert_agrees(tracker, 5, None)
    assert [g.grant_id for g in plain.grants] == [2]
    assert plain.run_out_at == 4


def test_debt_means_nothing_to_draw() -> None:
    tracker = GPUCreditTracker()
    tracker.apply_grant(10, 0, 50, resources=["a100"])
    tracker.apply_consume(30, 2, "h100")  # h100 debt: 30
    got = assert_agrees(tracker, 4, "h100")
    assert (got.run_out_at, got.available, got.grants) == (2, 0, ())
    a100 = assert_agrees(tracker, 4, "a100")
    assert a100.run_out_at == 4  # the clock is 2: steps 2 and 3 take 4 each, step 4 the last 2


def test_nothing_live_runs_out_at_the_clock() -> None:
    tracker = GPUCreditTracker()
    tracker.apply_consume(5, 7)
    got = assert_agrees(tracker, 3, None)
    assert (got.run_out_at, got.available, got.consumed, got.expiring_unused) == (7, 0, 0, 0)


def test_huge_figures_are_exact_and_walk_no_steps() -> None:
    """A step-by-step walk would take 2^53 steps here; the forecast takes one per grant."""
    tracker = GPUCreditTracker()
    tracker.apply_grant(MAX_VALUE - 1, 0, MAX_VALUE)
    got = forecast(tracker.live_grants(), tracker.clock, 1)
    assert got.run_out_at == MAX_VALUE - 1
    assert got.grants[0].used_up_at == MAX_VALUE - 2
    got = forecast(tracker.live_grants(), tracker.clock, MAX_VALUE)
    assert (got.run_out_at, got.consumed) == (0, MAX_VALUE - 1)  # all at step 0, which runs short
    tracker = GPUCreditTracker()
    tracker.apply_grant(MAX_VALUE, 0, MAX_VALUE)
    got = forecast(tracker.live_grants(), 0, 3)
    assert MAX_VALUE % 3 == 1
    # Steps 0 .. (MAX-1)/3 - 1 take 3 each (MAX - 1 credits), the next one the last credit.
    assert got.run_out_at == (MAX_VALUE - 1) // 3
    assert (got.consumed, got.expiring_unused) == (MAX_VALUE, 0)
    assert got.grants[0].used_up_at == got.run_out_at


@pytest.mark.parametrize("burn_rate", [0, -1, MAX_VALUE + 1, True, 1.0, "5"])
def test_burn_rate_is_a_positive_integer(burn_rate: object) -> None:
    with pytest.raises(InvalidInput) as raised:
        forecast([], 0, burn_rate)  # type: ignore[arg-type]
    assert raised.value.field == "burn_rate"


def test_grants_must_be_live_and_in_order() -> None:
    late = LiveGrant(1, 5, 10)
    with pytest.raises(InvalidInput):
        forecast([late], 5, 1)  # expires at the start: not live
    with pytest.raises(InvalidInput):
        forecast([LiveGrant(1, 9, 10), LiveGrant(2, 8, 10)], 0, 1)  # out of order
    with pytest.raises(InvalidInput):
        forecast([LiveGrant(1, 9, 0)], 0, 1)  # nothing left
