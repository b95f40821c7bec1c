"""Stateful test: GPUCreditTracker against the reference model (``tests/support/model.py``):
a plain list of ``[expiry, grant_id, remaining]`` live grants, sorted to find the next one
to draw from, filtered to drop the expired ones, and changed only once a call is accepted.
Nothing about it is clever, so a disagreement points at the tracker. The core class's
``get_balance`` moves the clock: the model's ``get_balance`` does too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

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
)
from tests.support.model import JSON, Account, Rejected, RejectionKind, is_valid

T = TypeVar("T")


def _expired(expirations: tuple[Expiration, ...]) -> list[tuple[int, int, int]]:
    return sorted((e.grant_id, e.expiry, e.amount) for e in expirations)


def _allocated(allocation: tuple[Allocation, ...]) -> list[tuple[int, int, int]]:
    return [(d.grant_id, d.expiry, d.amount) for d in allocation]


def _allocation(answer: JSON) -> list[tuple[int, int, int]]:
    return [(a["grant_id"], a["expiry"], a["amount"]) for a in answer["allocation"]]


# -- drawing arguments -----------------------------------------------------------------

INVALID_VALUES: list[Any] = [True, False, 1.0, "5", None, -1, 2**53]


def _timestamp(data: st.DataObject, clock: int) -> Any:
    kind = data.draw(st.integers(0, 39), label="timestamp kind")
    if kind < 26:  # the usual case: now or a little later
        return clock + data.draw(st.integers(0, 3))
    if kind < 31:  # a jump that lets live grants expire
        return clock + data.draw(st.integers(4, 40))
    if kind < 36:  # a regression (or -1 on a fresh clock, which is invalid)
        return clock - data.draw(st.integers(1, 5))
    if kind < 37:  # near the end of time
        return data.draw(st.integers(MAX_VALUE - 30, MAX_VALUE + 1))
    return data.draw(st.sampled_from(INVALID_VALUES))


def _amount(data: st.DataObject) -> Any:
    kind = data.draw(st.integers(0, 19), label="amount kind")
    if kind < 13:
        return data.draw(st.integers(1, 30))
    if kind < 17:  # huge: pushes totals to the 2^53-1 limit
        return data.draw(st.integers(MAX_VALUE - 40, MAX_VALUE))
    if kind < 18:
        return data.draw(st.integers(MAX_VALUE // 2 - 20, MAX_VALUE // 2 + 20))
    return data.draw(st.sampled_from([*INVALID_VALUES, 0]))


def _expiry(data: st.DataObject, timestamp: Any) -> Any:
    kind = data.draw(st.integers(0, 19), label="expiry kind")
    base = timestamp if is_valid(timestamp, 0) else 0
    if kind < 15:
        return base + data.draw(st.integers(1, 30))
    if kind < 17:  # not after the timestamp
        return base - data.draw(st.integers(0, 2))
    if kind < 18:
        return MAX_VALUE
    return data.draw(st.sampled_from(INVALID_VALUES))


# -- the state machine -----------------------------------------------------------------

_ERRORS: dict[RejectionKind, type[LedgerError]] = {
    "invalid": InvalidInput,
    "regression": TimestampRegression,
    "overflow": TotalOverflow,
}


class TrackerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tracker = GPUCreditTracker()
        self.model = Account("core")

    def _call(
        self, tracker_call: Callable[[], T], model_call: Callable[[], JSON]
    ) -> tuple[T, JSON] | None:
        """Run both; if the model rejects, the tracker must reject the same way."""
        try:
            expected = model_call()
        except Rejected as rejected:
            event(f"rejected: {rejected.kind}" + (" after eviction" if rejected.evicting else ""))
            with pytest.raises(_ERRORS[rejected.kind]) as info:
                tracker_call()
            assert isinstance(info.value, ValueError)
            if isinstance(info.value, TimestampRegression):
                assert info.value.account_timestamp == self.model.clock
            return None
        return tracker_call(), expected

    @rule(data=st.data(), detailed=st.booleans())
    def grant(self, data: st.DataObject, detailed: bool) -> None:
        amount = _amount(data)
        timestamp = _timestamp(data, self.model.clock)
        expiry = _expiry(data, timestamp)
        if not detailed:
            self._call(
                lambda: self.tracker.grant(amount, timestamp, expiry),
                lambda: self.model.grant(amount, timestamp, expiry),
            )
            return
        outcome = self._call(
            lambda: self.tracker.apply_grant(amount, timestamp, expiry),
            lambda: self.model.grant(amount, timestamp, expiry),
        )
        if outcome is not None:
            got, want = outcome
            assert got.grant_id == want["grant_id"]
            assert got.settled_debt == want["settled_debt"]
            assert got.retained == want["retained"]
            assert got.available == want["available"]
            assert got.debt == want["debt"]
            assert _expired(got.expired) == sorted(self.model.expired)

    @rule(data=st.data(), detailed=st.booleans())
    def consume(self, data: st.DataObject, detailed: bool) -> None:
        amount = _amount(data)
        timestamp = _timestamp(data, self.model.clock)
        if not detailed:
            simple = self._call(
                lambda: self.tracker.consume(amount, timestamp),
                lambda: self.model.consume(amount, timestamp),
            )
            if simple is not None:
                debt, want_simple = simple
                assert debt == want_simple["debt"]
            return
        outcome = self._call(
            lambda: self.tracker.apply_consume(amount, timestamp),
            lambda: self.model.consume(amount, timestamp),
        )
        if outcome is not None:
            got, want = outcome
            assert got.consumed == want["consumed"]
            assert got.debt_added == want["debt_added"]
            assert got.available == want["available"]
            assert got.debt == want["debt"]
            assert _allocated(got.allocation) == _allocation(want)
            assert _expired(got.expired) == sorted(self.model.expired)

    @rule(data=st.data(), detailed=st.booleans())
    def get_balance(self, data: st.DataObject, detailed: bool) -> None:
        timestamp = _timestamp(data, self.model.clock)
        if not detailed:
            simple = self._call(
                lambda: self.tracker.get_balance(timestamp),
                lambda: self.model.get_balance(timestamp),
            )
            if simple is not None:
                balance, want_simple = simple
                assert balance == want_simple["available"] - want_simple["debt"]
            return
        outcome = self._call(
            lambda: self.tracker.apply_balance(timestamp),
            lambda: self.model.get_balance(timestamp),
        )
        if outcome is not None:
            got, want = outcome
            assert (got.available, got.debt) == (want["available"], want["debt"])
            assert _expired(got.expired) == sorted(self.model.expired)

    @rule(data=st.data())
    def project(self, data: st.DataObject) -> None:
        """available_at is a pure projection: the credits live at a later time, and the
        tracker (clock included; the invariant checks it) is unchanged."""
        timestamp = _timestamp(data, self.model.clock)
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_VALUE:
            with pytest.raises(InvalidInput):
                self.tracker.available_at(timestamp)
            return
        if timestamp < self.model.clock:
            with pytest.raises(TimestampRegression):
                self.tracker.available_at(timestamp)
            return
        want = self.model.read_balance(timestamp)["available"]  # a projection: changes nothing
        assert self.tracker.available_at(timestamp) == want

    @rule()
    def persist_and_restore(self) -> None:
        state = self.tracker.state()
        self.tracker = GPUCreditTracker.from_state(state)
        assert self.tracker.state() == state

    @invariant()
    def same_state(self) -> None:
        self.tracker.check_invariants()
        want = [
            LiveGrant(grant_id=grant_id, expiry=expiry, remaining=remaining)
            for expiry, grant_id, remaining in self.model.in_consumption_order()
        ]
        assert self.tracker.live_grants() == want
        assert self.tracker.first_live_grant() == (want[0] if want else None)
        assert self.tracker.live_grant_count == len(want)
        assert self.tracker.clock == self.model.clock
        assert self.tracker.debt == self.model.debt
        assert self.tracker.available == self.model.available
        assert self.tracker.next_grant_id == self.model.next_grant_id
        # SPEC: whenever debt > 0, the active credits are 0.
        assert self.model.debt == 0 or self.model.available == 0


TrackerMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTrackerMachine = TrackerMachine.TestCase
