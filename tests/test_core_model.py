"""Stateful test: GPUCreditTracker against a small, obviously correct list-based model.

The model keeps a plain list of ``[expiry, grant_order, remaining]`` batches, finds the next
batch to draw from by scanning for the smallest ``(expiry, grant_order)``, drops expired
batches by filtering, and works on copies that it only commits when the call is accepted.
Nothing about it is clever, so a disagreement points at the tracker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from app.domain import (
    MAX_VALUE,
    Batch,
    Draw,
    Expiration,
    GPUCreditTracker,
    InvalidInput,
    LedgerError,
    TimestampRegression,
    TotalOverflow,
)

T = TypeVar("T")
M = TypeVar("M")


# -- the model -------------------------------------------------------------------------


class ModelRejected(Exception):
    """The model refuses a call; ``kind`` is "invalid", "regression" or "overflow"."""

    def __init__(self, kind: str, *, evicting: bool = False) -> None:
        super().__init__(kind)
        self.kind = kind
        self.evicting = evicting  # batches would have expired had the call been accepted


def _is_valid(value: object, low: int) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_VALUE


@dataclass
class ModelGrant:
    grant_seq: int
    settled_debt: int
    retained: int
    available: int
    debt: int
    expired: list[tuple[int, int, int]]  # (grant_seq, expiry, amount), sorted


@dataclass
class ModelConsume:
    consumed: int
    debt_added: int
    available: int
    debt: int
    draws: list[tuple[int, int, int]]  # (grant_seq, expiry, amount), in draw order
    expired: list[tuple[int, int, int]]


@dataclass
class ModelBalance:
    available: int
    debt: int
    expired: list[tuple[int, int, int]]


class Model:
    def __init__(self) -> None:
        self.batches: list[list[int]] = []  # [expiry, grant_order, remaining], any order
        self.debt = 0
        self.clock = 0
        self.grants_accepted = 0  # grant_order of the latest accepted grant

    def available(self) -> int:
        return sum(b[2] for b in self.batches)

    def in_consumption_order(self) -> list[list[int]]:
        return sorted(self.batches, key=lambda b: (b[0], b[1]))

    def _check_time(self, timestamp: int) -> None:
        if timestamp < self.clock:
            raise ModelRejected("regression")

    def _split(self, timestamp: int) -> tuple[list[list[int]], list[tuple[int, int, int]]]:
        """Copies of the batches still live at ``timestamp``, and those that expired."""
        live = [list(b) for b in self.batches if timestamp < b[0]]
        expired = sorted((b[1], b[0], b[2]) for b in self.batches if b[0] <= timestamp)
        return live, expired

    def grant(self, amount: object, timestamp: object, expiry: object) -> ModelGrant:
        if not (_is_valid(amount, 1) and _is_valid(timestamp, 0) and _is_valid(expiry, 0)):
            raise ModelRejected("invalid")
        if expiry <= timestamp:
            raise ModelRejected("invalid")
        self._check_time(timestamp)
        live, expired = self._split(timestamp)
        available = sum(b[2] for b in live)
        settled = min(amount, self.debt)
        retained = amount - settled
        if available + retained > MAX_VALUE:
            raise ModelRejected("overflow", evicting=bool(expired))
        # Accepted: commit.
        self.grants_accepted += 1
        if retained > 0:
            live.append([expiry, self.grants_accepted, retained])
        self.batches = live
        self.debt -= settled
        self.clock = timestamp
        return ModelGrant(
            self.grants_accepted, settled, retained, self.available(), self.debt, expired
        )

    def consume(self, amount: object, timestamp: object) -> ModelConsume:
        if not (_is_valid(amount, 1) and _is_valid(timestamp, 0)):
            raise ModelRejected("invalid")
        self._check_time(timestamp)
        live, expired = self._split(timestamp)
        available = sum(b[2] for b in live)
        consumed = min(amount, available)
        debt_added = amount - consumed
        if self.debt + debt_added > MAX_VALUE:
            raise ModelRejected("overflow")
        draws: list[tuple[int, int, int]] = []
        left = consumed
        while left > 0:
            first = min((b for b in live if b[2] > 0), key=lambda b: (b[0], b[1]))
            take = min(left, first[2])
            first[2] -= take
            left -= take
            draws.append((first[1], first[0], take))
        # Accepted: commit.
        self.batches = [b for b in live if b[2] > 0]
        self.debt += debt_added
        self.clock = timestamp
        return ModelConsume(consumed, debt_added, self.available(), self.debt, draws, expired)

    def balance(self, timestamp: object) -> ModelBalance:
        if not _is_valid(timestamp, 0):
            raise ModelRejected("invalid")
        self._check_time(timestamp)
        live, expired = self._split(timestamp)
        self.batches = live
        self.clock = timestamp
        return ModelBalance(self.available(), self.debt, expired)


def _expired(expirations: tuple[Expiration, ...]) -> list[tuple[int, int, int]]:
    return sorted((e.grant_seq, e.expiry, e.amount) for e in expirations)


def _draws(draws: tuple[Draw, ...]) -> list[tuple[int, int, int]]:
    return [(d.grant_seq, d.expiry, d.amount) for d in draws]


# -- the model checked on its own, so a shared mistake is less likely ------------------


def test_model_replays_spec_example_1() -> None:
    m = Model()
    m.grant(100, 0, 10)
    m.grant(50, 2, 5)
    assert m.consume(70, 3).debt == 0
    assert m.balance(4).available == 80
    assert m.consume(90, 8).debt == 10
    assert m.balance(8).debt == 10
    assert m.grant(30, 12, 20).retained == 20
    assert m.balance(12).available == 20


def test_model_rejects() -> None:
    m = Model()
    m.balance(5)
    for call in (
        lambda: m.balance(4),
        lambda: m.grant(True, 5, 6),
        lambda: m.grant(1, 5, 5),
        lambda: m.consume(1.0, 5),
    ):
        with pytest.raises(ModelRejected):
            call()
    m.grant(MAX_VALUE, 5, 6)
    with pytest.raises(ModelRejected, match="overflow"):
        m.grant(1, 5, 6)


# -- drawing arguments -----------------------------------------------------------------

INVALID_VALUES: list[Any] = [True, False, 1.0, "5", None, -1, 2**53]


def _timestamp(data: st.DataObject, clock: int) -> Any:
    kind = data.draw(st.integers(0, 39), label="timestamp kind")
    if kind < 26:  # the usual case: now or a little later
        return clock + data.draw(st.integers(0, 3))
    if kind < 31:  # a jump that lets batches expire
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
    base = timestamp if _is_valid(timestamp, 0) else 0
    if kind < 15:
        return base + data.draw(st.integers(1, 30))
    if kind < 17:  # not after the timestamp
        return base - data.draw(st.integers(0, 2))
    if kind < 18:
        return MAX_VALUE
    return data.draw(st.sampled_from(INVALID_VALUES))


# -- the state machine -----------------------------------------------------------------

_ERRORS: dict[str, type[LedgerError]] = {
    "invalid": InvalidInput,
    "regression": TimestampRegression,
    "overflow": TotalOverflow,
}


class TrackerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tracker = GPUCreditTracker()
        self.model = Model()

    def _call(
        self, tracker_call: Callable[[], T], model_call: Callable[[], M]
    ) -> tuple[T, M] | None:
        """Run both; if the model rejects, the tracker must reject the same way."""
        try:
            expected = model_call()
        except ModelRejected as rejected:
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
            assert got.grant_seq == want.grant_seq
            assert got.settled_debt == want.settled_debt
            assert got.retained == want.retained
            assert got.available == want.available
            assert got.debt == want.debt
            assert _expired(got.expired) == want.expired

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
                assert debt == want_simple.debt
            return
        outcome = self._call(
            lambda: self.tracker.apply_consume(amount, timestamp),
            lambda: self.model.consume(amount, timestamp),
        )
        if outcome is not None:
            got, want = outcome
            assert got.consumed == want.consumed
            assert got.debt_added == want.debt_added
            assert got.available == want.available
            assert got.debt == want.debt
            assert _draws(got.draws) == want.draws
            assert _expired(got.expired) == want.expired

    @rule(data=st.data(), detailed=st.booleans())
    def get_balance(self, data: st.DataObject, detailed: bool) -> None:
        timestamp = _timestamp(data, self.model.clock)
        if not detailed:
            simple = self._call(
                lambda: self.tracker.get_balance(timestamp),
                lambda: self.model.balance(timestamp),
            )
            if simple is not None:
                balance, want_simple = simple
                assert balance == want_simple.available - want_simple.debt
            return
        outcome = self._call(
            lambda: self.tracker.apply_balance(timestamp),
            lambda: self.model.balance(timestamp),
        )
        if outcome is not None:
            got, want = outcome
            assert (got.available, got.debt) == (want.available, want.debt)
            assert _expired(got.expired) == want.expired

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
        want = sum(r for expiry, _, r in self.model.in_consumption_order() if expiry > timestamp)
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
            Batch(grant_seq=order, expiry=expiry, remaining=remaining)
            for expiry, order, remaining in self.model.in_consumption_order()
        ]
        assert self.tracker.batches() == want
        assert self.tracker.first_batch() == (want[0] if want else None)
        assert self.tracker.live_batch_count == len(want)
        assert self.tracker.clock == self.model.clock
        assert self.tracker.debt == self.model.debt
        assert self.tracker.available == self.model.available()
        assert self.tracker.next_grant_seq == self.model.grants_accepted + 1
        # SPEC: whenever debt > 0, the active credits are 0.
        assert self.model.debt == 0 or self.model.available() == 0


TrackerMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTrackerMachine = TrackerMachine.TestCase
