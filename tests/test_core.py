"""Unit tests for the pure ledger core (SPEC sections 1 and 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.domain import (
    MAX_VALUE,
    Allocation,
    Expiration,
    GPUCreditTracker,
    InvalidInput,
    LedgerError,
    LiveGrant,
    TimestampRegression,
    TotalOverflow,
    TrackerState,
)
from tests.support.spec_examples import EXAMPLE_1, EXAMPLES, Example

REPO_ROOT = Path(__file__).resolve().parents[1]


# -- SPEC examples ---------------------------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_spec_example_positional(example: Example) -> None:
    t = GPUCreditTracker()
    for step in example.steps:
        assert getattr(t, step.core_method)(*step.positional) == step.returns, step


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_spec_example_keyword(example: Example) -> None:
    t = GPUCreditTracker()
    for step in example.steps:
        assert getattr(t, step.core_method)(**step.args) == step.returns, step


def test_spec_example_1_detailed() -> None:
    """The detailed calls give what the HTTP answers are made of: allocations, settled debt,
    what was kept, the totals after."""
    t = GPUCreditTracker()
    for step in EXAMPLE_1.steps:
        want = step.answer
        if step.op == "grant":
            got = t.apply_grant(**step.args)
            assert (got.grant_id, got.settled_debt, got.retained) == (
                want["grant_id"],
                want["settled_debt"],
                want["retained"],
            )
            assert (got.available, got.debt) == (want["available"], want["debt"])
        elif step.op == "consume":
            consumed = t.apply_consume(**step.args)
            assert consumed.allocation == tuple(
                Allocation(grant_id=a["grant_id"], expiry=a["expiry"], amount=a["amount"])
                for a in want["allocation"]
            )
            assert (consumed.consumed, consumed.debt_added) == (
                want["consumed"],
                want["debt_added"],
            )
            assert (consumed.available, consumed.debt) == (want["available"], want["debt"])
        else:
            assert t.get_balance(**step.args) == step.returns
    assert t.live_grants() == [
        LiveGrant(grant_id=g["grant_id"], expiry=g["expiry"], remaining=g["remaining"])
        for g in EXAMPLE_1.live_grants
    ]


# -- priority consumption --------------------------------------------------------------


def test_earliest_expiry_consumed_first_regardless_of_grant_order() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 100)
    t.grant(10, 1, 50)
    t.grant(10, 2, 75)
    result = t.apply_consume(25, 3)
    assert result.allocation == (
        Allocation(2, 50, 10),
        Allocation(3, 75, 10),
        Allocation(1, 100, 5),
    )
    assert t.live_grants() == [LiveGrant(1, 100, 5)]


def test_equal_expiries_consumed_in_grant_order() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 100)  # grant_id 1
    t.grant(20, 1, 100)  # grant_id 2
    t.grant(5, 2, 100)  # grant_id 3
    t.grant(1, 2, 50)  # grant_id 4, earlier expiry
    assert [b.grant_id for b in t.live_grants()] == [4, 1, 2, 3]
    first = t.apply_consume(4, 3)
    assert first.allocation == (Allocation(4, 50, 1), Allocation(1, 100, 3))
    assert t.live_grants() == [LiveGrant(1, 100, 7), LiveGrant(2, 100, 20), LiveGrant(3, 100, 5)]
    second = t.apply_consume(30, 4)
    assert second.allocation == (
        Allocation(1, 100, 7),
        Allocation(2, 100, 20),
        Allocation(3, 100, 3),
    )
    assert t.live_grants() == [LiveGrant(3, 100, 2)]
    assert t.first_live_grant() == LiveGrant(3, 100, 2)
    t.check_invariants()


def test_equal_expiries_grant_order_not_size_order() -> None:
    t = GPUCreditTracker()
    t.grant(50, 0, 10)  # grant_id 1, larger
    t.grant(1, 0, 10)  # grant_id 2, smaller
    result = t.apply_consume(50, 0)
    assert result.allocation == (Allocation(1, 10, 50),)
    assert t.live_grants() == [LiveGrant(2, 10, 1)]


# -- debt and settlement ---------------------------------------------------------------


def test_grant_swallowed_whole_by_debt_adds_no_live_grant() -> None:
    t = GPUCreditTracker()
    assert t.consume(50, 0) == 50
    result = t.apply_grant(30, 1, 10)
    assert (result.settled_debt, result.retained, result.available, result.debt) == (30, 0, 0, 20)
    assert t.live_grants() == []
    assert t.live_grant_count == 0
    assert t.first_live_grant() is None
    assert t.get_balance(2) == -20
    t.check_invariants()


def test_grant_exactly_equal_to_debt_adds_no_live_grant() -> None:
    t = GPUCreditTracker()
    t.consume(20, 0)
    result = t.apply_grant(20, 1, 10)
    assert (result.settled_debt, result.retained, result.debt) == (20, 0, 0)
    assert t.live_grants() == []
    assert t.live_grant_count == 0
    assert t.get_balance(1) == 0
    # No phantom live grant: a later consumption goes straight into debt.
    assert t.consume(1, 2) == 1


def test_partial_settlement_keeps_the_rest_with_the_grant_expiry() -> None:
    t = GPUCreditTracker()
    t.consume(20, 0)
    result = t.apply_grant(50, 1, 9)
    assert (result.settled_debt, result.retained, result.available, result.debt) == (20, 30, 30, 0)
    assert t.live_grants() == [LiveGrant(result.grant_id, 9, 30)]
    assert t.get_balance(8) == 30
    assert t.get_balance(9) == 0  # the retained part expires with the grant


def test_debt_grows_while_balance_is_zero() -> None:
    t = GPUCreditTracker()
    assert t.consume(5, 0) == 5
    assert t.consume(7, 1) == 12  # the total, not the increment
    assert t.get_balance(1) == -12
    result = t.apply_consume(3, 2)
    assert (result.consumed, result.debt_added, result.debt, result.allocation) == (0, 3, 15, ())


def test_consuming_exactly_the_balance_then_more_is_debt() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 100)
    assert t.consume(10, 1) == 0
    assert t.live_grants() == []
    assert t.get_balance(1) == 0
    assert t.consume(3, 2) == 3
    assert t.get_balance(2) == -3


def test_debt_settled_by_several_grants() -> None:
    t = GPUCreditTracker()
    t.consume(100, 0)
    t.grant(30, 1, 10)
    t.grant(30, 2, 10)
    assert t.get_balance(2) == -40
    t.grant(50, 3, 10)
    assert t.get_balance(3) == 10
    assert t.debt == 0


# -- expiration ------------------------------------------------------------------------


def test_timestamp_equal_to_expiry_means_expired() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 5)
    assert t.get_balance(4) == 10
    result = t.apply_balance(5)
    assert (result.available, result.debt) == (0, 0)
    assert result.expired == (Expiration(grant_id=1, expiry=5, amount=10),)
    assert t.live_grants() == []


def test_consume_at_expiry_goes_to_debt() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 5)
    result = t.apply_consume(3, 5)
    assert (result.consumed, result.debt_added, result.debt) == (0, 3, 3)
    assert result.expired == (Expiration(1, 5, 10),)


def test_grant_at_expiry_of_another_does_not_keep_it() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 5)
    result = t.apply_grant(4, 5, 9)
    assert result.expired == (Expiration(1, 5, 10),)
    assert t.live_grants() == [LiveGrant(2, 9, 4)]
    assert t.get_balance(5) == 4


def test_partly_used_live_grant_expires_with_its_rest() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 5)
    t.consume(4, 1)
    result = t.apply_balance(7)
    assert result.expired == (Expiration(1, 5, 6),)


# -- monotonic time --------------------------------------------------------------------


def _tracker_at_clock_10() -> GPUCreditTracker:
    """A tracker whose clock is 10, with two live grants, one expiring at 11."""
    t = GPUCreditTracker()
    t.grant(10, 0, 11)
    t.grant(20, 5, 30)
    t.consume(3, 10)
    return t


OPERATIONS_AT: dict[str, Callable[[GPUCreditTracker, int], object]] = {
    "grant": lambda t, ts: t.grant(5, ts, ts + 100),
    "consume": lambda t, ts: t.consume(5, ts),
    "get_balance": lambda t, ts: t.get_balance(ts),
    "apply_grant": lambda t, ts: t.apply_grant(5, ts, ts + 100),
    "apply_consume": lambda t, ts: t.apply_consume(5, ts),
    "apply_balance": lambda t, ts: t.apply_balance(ts),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS_AT))
@pytest.mark.parametrize("timestamp", [0, 9])
def test_timestamp_regression_is_rejected_and_changes_nothing(
    operation: str, timestamp: int
) -> None:
    t = _tracker_at_clock_10()
    before = t.state()
    with pytest.raises(TimestampRegression) as info:
        OPERATIONS_AT[operation](t, timestamp)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, LedgerError)
    assert info.value.account_timestamp == 10
    assert info.value.timestamp == timestamp
    assert t.state() == before
    t.check_invariants()
    # A later valid call still works, at the same timestamp as the latest.
    assert t.get_balance(10) == 27
    assert t.consume(1, 10) == 0
    assert t.get_balance(10) == 26


@pytest.mark.parametrize("operation", sorted(OPERATIONS_AT))
def test_equal_timestamps_are_allowed(operation: str) -> None:
    t = _tracker_at_clock_10()
    OPERATIONS_AT[operation](t, 10)
    OPERATIONS_AT[operation](t, 10)
    assert t.clock == 10
    t.check_invariants()


def test_many_calls_at_one_timestamp() -> None:
    t = GPUCreditTracker()
    t.grant(5, 3, 4)
    t.grant(5, 3, 4)
    assert t.consume(7, 3) == 0
    assert t.get_balance(3) == 3
    assert t.get_balance(3) == 3
    assert t.get_balance(4) == 0


def test_balance_read_advances_the_clock() -> None:
    t = GPUCreditTracker()
    t.get_balance(7)
    assert t.clock == 7
    with pytest.raises(TimestampRegression):
        t.consume(1, 6)


# -- invalid input ---------------------------------------------------------------------

NOT_INTEGERS: list[Any] = [True, False, 1.0, 5.0, "5", None, b"5", [5]]
OUT_OF_RANGE_AMOUNTS: list[Any] = [0, -1, -(2**53), 2**53, 2**64]
OUT_OF_RANGE_TIMES: list[Any] = [-1, 2**53, 2**64]


def _tracker_with_pending_expiry() -> GPUCreditTracker:
    """Clock 3, one live grant expiring at 5: an accepted call at 7 would evict it."""
    t = GPUCreditTracker()
    t.grant(10, 0, 5)
    t.grant(4, 1, 50)
    t.get_balance(3)
    return t


INVALID_CALLS: list[tuple[str, Callable[[GPUCreditTracker, Any], object], list[Any]]] = [
    ("grant.amount", lambda t, v: t.grant(v, 7, 20), [*NOT_INTEGERS, *OUT_OF_RANGE_AMOUNTS]),
    ("grant.timestamp", lambda t, v: t.grant(1, v, 20), [*NOT_INTEGERS, *OUT_OF_RANGE_TIMES]),
    ("grant.expiry", lambda t, v: t.grant(1, 7, v), [*NOT_INTEGERS, 2**53, 7, 6, 0, -1]),
    ("consume.amount", lambda t, v: t.consume(v, 7), [*NOT_INTEGERS, *OUT_OF_RANGE_AMOUNTS]),
    ("consume.timestamp", lambda t, v: t.consume(1, v), [*NOT_INTEGERS, *OUT_OF_RANGE_TIMES]),
    ("get_balance.timestamp", lambda t, v: t.get_balance(v), [*NOT_INTEGERS, *OUT_OF_RANGE_TIMES]),
    ("apply_grant.amount", lambda t, v: t.apply_grant(v, 7, 20), [*NOT_INTEGERS, 0, 2**53]),
    ("apply_consume.amount", lambda t, v: t.apply_consume(v, 7), [*NOT_INTEGERS, 0, 2**53]),
    ("apply_balance.timestamp", lambda t, v: t.apply_balance(v), [*NOT_INTEGERS, 2**53]),
]


@pytest.mark.parametrize(
    ("call", "value"),
    [
        pytest.param(call, value, id=f"{name}={value!r}")
        for name, call, values in INVALID_CALLS
        for value in values
    ],
)
def test_invalid_input_is_rejected_and_changes_nothing(
    call: Callable[[GPUCreditTracker, Any], object], value: Any
) -> None:
    t = _tracker_with_pending_expiry()
    before = t.state()
    with pytest.raises(InvalidInput) as info:
        call(t, value)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, LedgerError)
    assert t.state() == before
    t.check_invariants()
    # Nothing was evicted and the clock did not move: an earlier call still sees the grant.
    assert t.get_balance(4) == 14


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.grant(True, 0, 5),
        lambda t: t.grant(1, True, 5),
        lambda t: t.grant(1, 0, True),
        lambda t: t.grant(1, 1, 1),
        lambda t: t.grant(1, 2, 1),
        lambda t: t.grant(1, MAX_VALUE, 2**53),
        lambda t: t.consume(False, 0),
        lambda t: t.consume(1.5, 0),
        lambda t: t.get_balance("0"),
        lambda t: t.get_balance(None),
        lambda t: t.get_balance(0.0),
    ],
)
def test_invalid_input_on_a_fresh_tracker(call: Callable[[GPUCreditTracker], object]) -> None:
    t = GPUCreditTracker()
    before = t.state()
    with pytest.raises(InvalidInput):
        call(t)
    assert t.state() == before
    assert t.get_balance(0) == 0


def test_invalid_input_error_names_the_field() -> None:
    t = GPUCreditTracker()
    with pytest.raises(InvalidInput) as info:
        t.grant(1, 0, 0)
    assert info.value.field == "expiry"
    with pytest.raises(InvalidInput) as info:
        t.consume(0, 0)
    assert info.value.field == "amount"
    with pytest.raises(InvalidInput) as info:
        t.get_balance(-1)
    assert info.value.field == "timestamp"


def test_keyword_arguments_are_named_exactly() -> None:
    t = GPUCreditTracker()
    bad_kwargs: dict[str, Any] = {"amount": 1, "ts": 0, "expiry": 5}
    with pytest.raises(TypeError):
        t.grant(**bad_kwargs)
    assert t.state() == GPUCreditTracker().state()


# -- the 2^53-1 bounds -----------------------------------------------------------------


def test_max_value_is_2_pow_53_minus_1() -> None:
    assert MAX_VALUE == 2**53 - 1


def test_amounts_and_times_of_exactly_max_value_are_accepted() -> None:
    t = GPUCreditTracker()
    t.grant(MAX_VALUE, 0, MAX_VALUE)
    assert t.get_balance(0) == MAX_VALUE
    assert t.consume(MAX_VALUE, MAX_VALUE - 1) == 0
    t.grant(MAX_VALUE, MAX_VALUE - 1, MAX_VALUE)
    assert t.get_balance(MAX_VALUE) == 0  # expired exactly at the last timestamp
    assert t.consume(MAX_VALUE, MAX_VALUE) == MAX_VALUE
    assert t.get_balance(MAX_VALUE) == -MAX_VALUE
    t.check_invariants()


def test_available_total_of_exactly_max_value_is_accepted() -> None:
    t = GPUCreditTracker()
    t.grant(MAX_VALUE - 1, 0, 10)
    t.grant(1, 0, 20)
    assert t.get_balance(0) == MAX_VALUE


def test_available_total_past_max_value_is_rejected() -> None:
    t = GPUCreditTracker()
    t.grant(MAX_VALUE, 0, 10)
    before = t.state()
    with pytest.raises(TotalOverflow) as info:
        t.grant(1, 1, 20)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, LedgerError)
    assert t.state() == before
    assert t.clock == 0
    assert t.next_grant_id == before.next_grant_id
    with pytest.raises(TotalOverflow):
        t.apply_grant(MAX_VALUE, 0, 20)
    assert t.state() == before
    t.check_invariants()
    # Still usable afterwards.
    t.consume(1, 1)
    t.grant(1, 1, 20)
    assert t.get_balance(1) == MAX_VALUE


def test_rejected_overflow_does_not_evict_expired_live_grants() -> None:
    t = GPUCreditTracker()
    t.grant(5, 0, 3)  # expires at 3
    t.grant(MAX_VALUE - 5, 0, 100)
    assert t.get_balance(0) == MAX_VALUE
    before = t.state()
    # At t=5 the first grant is gone (available MAX-5); +6 would be MAX+1.
    with pytest.raises(TotalOverflow):
        t.grant(6, 5, 200)
    assert t.state() == before
    t.check_invariants()
    assert t.live_grant_count == 2
    # The clock did not move to 5: an earlier call is accepted and still sees the grant.
    assert t.get_balance(2) == MAX_VALUE
    assert t.live_grants()[0] == LiveGrant(1, 3, 5)
    # And the same grant, with eviction actually happening, is within bounds for 5.
    t.grant(5, 5, 200)
    assert t.get_balance(5) == MAX_VALUE
    t.check_invariants()


def test_rejected_detailed_overflow_does_not_evict_expired_live_grants() -> None:
    t = GPUCreditTracker()
    t.grant(5, 0, 3)
    t.grant(7, 0, 4)
    t.grant(MAX_VALUE - 12, 0, 100)
    before = t.state()
    with pytest.raises(TotalOverflow):
        t.apply_grant(13, 10, 200)
    assert t.state() == before
    assert t.apply_balance(1).expired == ()
    assert t.get_balance(1) == MAX_VALUE


def test_debt_of_exactly_max_value_is_accepted() -> None:
    t = GPUCreditTracker()
    assert t.consume(MAX_VALUE - 1, 0) == MAX_VALUE - 1
    assert t.consume(1, 1) == MAX_VALUE
    assert t.get_balance(1) == -MAX_VALUE


def test_debt_past_max_value_is_rejected() -> None:
    t = GPUCreditTracker()
    t.consume(MAX_VALUE - 3, 0)
    before = t.state()
    with pytest.raises(TotalOverflow) as info:
        t.consume(4, 1)
    assert isinstance(info.value, ValueError)
    assert t.state() == before
    with pytest.raises(TotalOverflow):
        t.apply_consume(MAX_VALUE, 2)
    assert t.state() == before
    assert t.clock == 0
    assert t.get_balance(0) == -(MAX_VALUE - 3)
    assert t.consume(3, 1) == MAX_VALUE


def test_debt_overflow_counts_only_the_uncovered_part() -> None:
    t = GPUCreditTracker()
    t.consume(MAX_VALUE, 0)
    t.grant(10, 1, 50)  # settles 10 of the debt, keeps nothing
    assert t.debt == MAX_VALUE - 10
    assert t.consume(10, 2) == MAX_VALUE
    with pytest.raises(TotalOverflow):
        t.consume(1, 3)


def test_huge_grant_settles_max_debt() -> None:
    t = GPUCreditTracker()
    t.consume(MAX_VALUE, 0)
    result = t.apply_grant(MAX_VALUE, 1, 2)
    assert (result.settled_debt, result.retained, result.debt) == (MAX_VALUE, 0, 0)
    assert t.live_grants() == []


# -- persistence -----------------------------------------------------------------------


def _busy_tracker() -> GPUCreditTracker:
    t = GPUCreditTracker()
    t.grant(10, 0, 30)
    t.grant(20, 1, 15)
    t.grant(5, 2, 15)
    t.grant(7, 2, 4)
    t.consume(12, 3)
    t.get_balance(5)
    return t


def test_state_round_trip() -> None:
    original = _busy_tracker()
    state = original.state()
    assert state.clock == 5
    assert state.debt == 0
    assert state.next_grant_id == 5
    assert state.live_grants == (LiveGrant(2, 15, 15), LiveGrant(3, 15, 5), LiveGrant(1, 30, 10))
    copy = GPUCreditTracker.from_state(state)
    copy.check_invariants()
    assert copy.state() == state
    assert copy.live_grants() == original.live_grants()
    assert (copy.available, copy.debt, copy.clock) == (30, 0, 5)
    # Both behave the same from here on.
    for t in (original, copy):
        with pytest.raises(TimestampRegression):
            t.get_balance(4)
    assert original.apply_consume(9, 6) == copy.apply_consume(9, 6)
    assert original.apply_grant(3, 7, 15) == copy.apply_grant(3, 7, 15)
    assert original.apply_balance(15) == copy.apply_balance(15)
    assert original.state() == copy.state()


def test_state_round_trip_with_debt_and_fresh() -> None:
    t = GPUCreditTracker()
    assert GPUCreditTracker.from_state(t.state()).state() == t.state()
    t.consume(40, 3)
    t.grant(10, 4, 9)
    state = t.state()
    assert state == TrackerState(clock=4, debt=30, next_grant_id=2, live_grants=())
    copy = GPUCreditTracker.from_state(state)
    assert copy.state() == state
    assert copy.get_balance(4) == -30
    assert copy.apply_grant(5, 5, 9).grant_id == 2


def test_from_state_live_grants_in_any_order() -> None:
    state = _busy_tracker().state()
    shuffled = TrackerState(
        state.clock, state.debt, state.next_grant_id, tuple(reversed(state.live_grants))
    )
    assert GPUCreditTracker.from_state(shuffled).state() == state


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(TrackerState(0, 5, 2, (LiveGrant(1, 10, 3),)), id="debt-with-live-credits"),
        pytest.param(TrackerState(10, 0, 2, (LiveGrant(1, 10, 3),)), id="expiry-equal-to-clock"),
        pytest.param(TrackerState(10, 0, 2, (LiveGrant(1, 9, 3),)), id="expiry-before-clock"),
        pytest.param(
            TrackerState(0, 0, 3, (LiveGrant(1, 10, 3), LiveGrant(1, 20, 3))),
            id="duplicate-grant-id",
        ),
        pytest.param(
            TrackerState(0, 0, 3, (LiveGrant(1, 10, 3), LiveGrant(1, 10, 4))),
            id="duplicate-live-grant-key",
        ),
        pytest.param(TrackerState(0, 0, 2, (LiveGrant(2, 10, 3),)), id="grant-id-not-issued-yet"),
        pytest.param(TrackerState(0, 0, 2, (LiveGrant(0, 10, 3),)), id="grant-id-zero"),
        pytest.param(TrackerState(0, 0, 2, (LiveGrant(1, 10, 0),)), id="empty-live-grant"),
        pytest.param(TrackerState(0, 0, 2, (LiveGrant(1, 10, -1),)), id="negative-live-grant"),
        pytest.param(
            TrackerState(0, 0, 3, (LiveGrant(1, 10, MAX_VALUE), LiveGrant(2, 10, 1))),
            id="available-past-max",
        ),
        pytest.param(TrackerState(0, 0, 2, (LiveGrant(1, 2**53, 1),)), id="expiry-past-max"),
        pytest.param(TrackerState(-1, 0, 1, ()), id="negative-clock"),
        pytest.param(TrackerState(2**53, 0, 1, ()), id="clock-past-max"),
        pytest.param(TrackerState(0, -1, 1, ()), id="negative-debt"),
        pytest.param(TrackerState(0, 2**53, 1, ()), id="debt-past-max"),
        pytest.param(TrackerState(0, 0, 0, ()), id="next-grant-id-zero"),
        pytest.param(TrackerState(True, 0, 1, ()), id="bool-clock"),
    ],
)
def test_from_state_rejects_impossible_states(state: TrackerState) -> None:
    with pytest.raises(InvalidInput):
        GPUCreditTracker.from_state(state)


def test_from_state_accepts_the_limits() -> None:
    state = TrackerState(
        MAX_VALUE - 1, 0, MAX_VALUE, (LiveGrant(MAX_VALUE - 1, MAX_VALUE, MAX_VALUE),)
    )
    t = GPUCreditTracker.from_state(state)
    assert t.state() == state
    assert t.get_balance(MAX_VALUE) == 0
    debt_state = TrackerState(MAX_VALUE, MAX_VALUE, 1, ())
    assert GPUCreditTracker.from_state(debt_state).get_balance(MAX_VALUE) == -MAX_VALUE


# -- packaging -------------------------------------------------------------------------


def test_domain_imports_only_the_standard_library() -> None:
    code = (
        "import sys\n"
        "import app.domain\n"
        "from app.domain import GPUCreditTracker\n"
        "banned = {'fastapi', 'pydantic', 'pydantic_core', 'starlette', 'sqlite3',\n"
        "          '_sqlite3', 'asyncio', 'uvicorn', 'anyio'}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in banned)\n"
        "print(' '.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    # Not measured by coverage (``pytest --cov``): coverage itself imports sqlite3.
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"stdout={proc.stdout!r} stderr={proc.stderr!r}"


def test_available_at_projects_without_changing_anything() -> None:
    t = GPUCreditTracker()
    for i, expiry in enumerate([5, 9, 7, 20, 6, 5, 30, 11]):
        t.grant(10 + i, 1, expiry)
    before = t.state()
    assert t.available_at(1) == t.available
    assert t.available_at(5) == t.available - 10 - 15  # both expiry-5 grants are gone at 5
    assert t.available_at(8) == 11 + 13 + 16 + 17  # expiries 9, 20, 30 and 11 remain
    assert t.available_at(MAX_VALUE) == 0
    assert t.state() == before  # nothing moved, the clock included
    t.grant(1, 1, 2)  # so a write at the old clock is still accepted
    with pytest.raises(TimestampRegression):
        t.available_at(0)
    with pytest.raises(InvalidInput):
        t.available_at(-1)
