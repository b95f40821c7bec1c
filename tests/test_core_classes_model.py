"""Stateful test: GPUCreditTracker with GPU classes (SPEC section 5) and voids (section 7)
against ``ClassModel``, a model written as plainly as possible:

- live grants are a list of ``Held`` in no order; the expired ones are found by filtering,
  the eligible ones for a consumption by filtering, the next one to draw by sorting;
- the debt queue is a list of ``[resource, amount]`` items in the order incurred; a grant
  settles by scanning it from the front; after every change, empty items are dropped and
  neighbours of one class joined (the queue's items are its runs of one class);
- a limit is checked on the state the call would leave (a copy is changed and looked at);
- nothing changes before a call is known to be accepted.

Every answer is compared, and after every step: the state (live grants in consumption order,
the debt queue), per-class balances and live grants, the classes in use, and the tracker's
own invariants. Small limits (3 classes, 10 live grants) and four class names make the
limits and the interplay of classes common.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from app.domain import (
    MAX_VALUE,
    Allocation,
    ClassLimit,
    Debt,
    Expiration,
    GPUCreditTracker,
    InvalidInput,
    LedgerError,
    LiveGrant,
    LiveGrantLimit,
    TimestampRegression,
    TotalOverflow,
    TrackerState,
)

T = TypeVar("T")
Kind = Literal["invalid", "regression", "overflow", "live-limit", "class-limit"]
CLASSES = ["a", "b", "c", "E"]
MAX_CLASSES = 3
MAX_LIVE = 10
NAME_FIRST = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
NAME_REST = NAME_FIRST | set("._-")


class Rejected(Exception):
    def __init__(self, kind: Kind) -> None:
        super().__init__(kind)
        self.kind: Kind = kind


def _int(value: object, low: int) -> int:
    if type(value) is not int or not low <= value <= MAX_VALUE:
        raise Rejected("invalid")
    return value


def _name(value: object) -> str:
    if type(value) is not str or not 1 <= len(value) <= 32:
        raise Rejected("invalid")
    if value[0] not in NAME_FIRST or any(ch not in NAME_REST for ch in value):
        raise Rejected("invalid")
    return value


def _classes(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple | set | frozenset):
        raise Rejected("invalid")
    names = [_name(v) for v in value]
    if not 1 <= len(names) <= 16 or len(set(names)) != len(names):
        raise Rejected("invalid")
    return tuple(sorted(names))


@dataclass
class Held:
    grant_id: int
    expiry: int
    remaining: int
    resources: tuple[str, ...] | None

    @property
    def order(self) -> tuple[int, int, int]:
        width = 17 if self.resources is None else len(self.resources)
        return (self.expiry, width, self.grant_id)

    def pays(self, resource: str | None) -> bool:
        return self.resources is None or (resource is not None and resource in self.resources)


@dataclass
class ClassModel:
    clock: int = 0
    next_grant_id: int = 1
    held: list[Held] = field(default_factory=list)
    debts: list[list[Any]] = field(default_factory=list)  # [resource, amount], in order
    expired: list[Expiration] = field(default_factory=list)  # by the latest accepted call

    # -- views -----------------------------------------------------------------------------

    @property
    def debt(self) -> int:
        return sum(amount for _, amount in self.debts)

    @property
    def available(self) -> int:
        return sum(h.remaining for h in self.held)

    def eligible(self, resource: str | None) -> list[Held]:
        return sorted((h for h in self.held if h.pays(resource)), key=lambda h: h.order)

    def class_view(self, resource: str) -> tuple[int, int]:
        available = sum(h.remaining for h in self.eligible(resource))
        return available, sum(a for r, a in self.debts if r == resource)

    def in_use(self) -> set[str]:
        used = {c for h in self.held for c in h.resources or ()}
        return used | {r for r, _ in self.debts if r is not None}

    def live_grants(self, resource: str | None = None) -> list[LiveGrant]:
        chosen = self.held if resource is None else self.eligible(resource)
        return [
            LiveGrant(h.grant_id, h.expiry, h.remaining, h.resources)
            for h in sorted(chosen, key=lambda h: h.order)
        ]

    def state(self) -> TrackerState:
        debts = tuple(Debt(r, a) for r, a in self.debts)
        if len(debts) == 1 and debts[0].resource is None:
            debts = ()
        return TrackerState(
            self.clock, self.debt, self.next_grant_id, tuple(self.live_grants()), debts
        )

    def projected(self, timestamp: int, resource: str | None) -> int:
        chosen = self.held if resource is None else self.eligible(resource)
        return sum(h.remaining for h in chosen if h.expiry > timestamp)

    # -- calls: each works on a copy and keeps it only when accepted ------------------------

    def grant(self, amount: object, timestamp: object, expiry: object, resources: object) -> Any:
        amount = _int(amount, 1)
        timestamp = _int(timestamp, 0)
        expiry = _int(expiry, 0)
        if expiry <= timestamp:
            raise Rejected("invalid")
        key = _classes(resources)
        after = self._moved(timestamp)
        left = amount
        settled: list[Debt] = []
        for item in after.debts:
            if left and (key is None or item[0] in key):
                take = min(left, item[1])
                item[1] -= take
                left -= take
                settled.append(Debt(item[0], take))
        after._normalise()
        if left:
            if after.available + left > MAX_VALUE:
                raise Rejected("overflow")
            if len(after.held) >= MAX_LIVE:
                raise Rejected("live-limit")
            after.held.append(Held(after.next_grant_id, expiry, left, key))
            after._check_classes(self)
        after.next_grant_id += 1
        self.__dict__.update(after.__dict__)
        return amount - left, left, key, tuple(settled)

    def consume(self, amount: object, timestamp: object, resource: object) -> Any:
        amount = _int(amount, 1)
        timestamp = _int(timestamp, 0)
        if resource is not None:
            resource = _name(resource)
        after = self._moved(timestamp)
        left = amount
        allocation: list[Allocation] = []
        remaining: list[int] = []
        for h in after.eligible(resource):
            if left:
                take = min(left, h.remaining)
                h.remaining -= take
                left -= take
                allocation.append(Allocation(h.grant_id, h.expiry, take, h.resources))
                remaining.append(h.remaining)
        after.held = [h for h in after.held if h.remaining]
        if after.debt + left > MAX_VALUE:
            raise Rejected("overflow")
        if left:
            after.debts.append([resource, left])
            after._normalise()
            after._check_classes(self)
        self.__dict__.update(after.__dict__)
        return amount - left, left, tuple(allocation), tuple(remaining)

    def balance(self, timestamp: object, resource: object) -> tuple[int, int]:
        timestamp = _int(timestamp, 0)
        if resource is not None:
            resource = _name(resource)
        after = self._moved(timestamp)
        self.__dict__.update(after.__dict__)
        if resource is None:
            return self.available, self.debt
        return self.class_view(resource)

    def void(self, grant_id: object, timestamp: object) -> int:
        if type(grant_id) is not int or not 1 <= grant_id < self.next_grant_id:
            raise Rejected("invalid")
        timestamp = _int(timestamp, 0)
        after = self._moved(timestamp)
        removed = sum(h.remaining for h in after.held if h.grant_id == grant_id)
        after.held = [h for h in after.held if h.grant_id != grant_id]
        self.__dict__.update(after.__dict__)
        return removed

    # -- the parts -------------------------------------------------------------------------

    def _moved(self, timestamp: int) -> ClassModel:
        """A copy with the clock at ``timestamp`` and what expired by then evicted."""
        if timestamp < self.clock:
            raise Rejected("regression")
        after = copy.deepcopy(self)
        gone = sorted((h for h in after.held if h.expiry <= timestamp), key=lambda h: h.order)
        gone.sort(key=lambda h: (h.expiry, h.grant_id))
        after.expired = [Expiration(h.grant_id, h.expiry, h.remaining, h.resources) for h in gone]
        after.held = [h for h in after.held if h.expiry > timestamp]
        after.clock = timestamp
        return after

    def _normalise(self) -> None:
        joined: list[list[Any]] = []
        for resource, amount in self.debts:
            if not amount:
                continue
            if joined and joined[-1][0] == resource:
                joined[-1][1] += amount
            else:
                joined.append([resource, amount])
        self.debts = joined

    def _check_classes(self, before: ClassModel) -> None:
        # Refused when the call would leave more classes in use than the limit (the state
        # before was within it: this model starts empty and never exceeds it).
        if len(self.in_use()) > MAX_CLASSES:
            raise Rejected("class-limit")
        assert len(before.in_use()) <= MAX_CLASSES


# -- drawing arguments -----------------------------------------------------------------

INVALID_INTS: list[Any] = [True, False, 1.0, "5", None, -1, 2**53]
INVALID_RESOURCES: list[Any] = [
    "a",
    [],
    ["a", "a"],
    ["-a"],
    [""],
    ["a b"],
    ["x" * 33],
    ["é"],
    [1],
    [None],
    [f"k{i}" for i in range(17)],
    {"a": 1},
    7,
]
INVALID_RESOURCE: list[Any] = ["", "-a", "x" * 33, "a\n", 5, True, ["a"]]


def _timestamp(data: st.DataObject, clock: int) -> Any:
    kind = data.draw(st.integers(0, 39), label="timestamp kind")
    if kind < 31:  # now or a little later
        return clock + data.draw(st.integers(0, 2))
    if kind < 34:  # a jump that lets live grants expire
        return clock + data.draw(st.integers(3, 60))
    if kind < 37:
        return clock - data.draw(st.integers(1, 5))
    if kind < 38:
        return data.draw(st.integers(MAX_VALUE - 30, MAX_VALUE + 1))
    return data.draw(st.sampled_from(INVALID_INTS))


def _amount(data: st.DataObject, usual: int, huge: int) -> Any:
    """1 in ``huge`` is huge (it pushes totals to the 2^53-1 limit); 1 in 40 is invalid."""
    kind = data.draw(st.integers(0, 39 * huge), label="amount kind")
    if kind < huge:
        return data.draw(st.integers(MAX_VALUE - 40, MAX_VALUE))
    if kind < 39 * huge:
        return data.draw(st.integers(1, usual))
    return data.draw(st.sampled_from([*INVALID_INTS, 0]))


def _expiry(data: st.DataObject, timestamp: Any, held: list[Held]) -> Any:
    kind = data.draw(st.integers(0, 39), label="expiry kind")
    base = timestamp if type(timestamp) is int and 0 <= timestamp <= MAX_VALUE else 0
    later = sorted({h.expiry for h in held if h.expiry > base})
    if kind < 16 and later:  # the expiry of a live grant: ties decide the order
        return data.draw(st.sampled_from(later))
    if kind < 36:
        return base + data.draw(st.integers(1, 80))
    if kind < 37:
        return base - data.draw(st.integers(0, 2))
    if kind < 39:
        return MAX_VALUE
    return data.draw(st.sampled_from(INVALID_INTS))


def _resources(data: st.DataObject) -> Any:
    kind = data.draw(st.integers(0, 19), label="resources kind")
    if kind < 7:
        return None
    if kind < 19:
        size = data.draw(st.sampled_from([1, 1, 1, 2, 2, 3]))
        names = data.draw(
            st.lists(st.sampled_from(CLASSES), min_size=size, max_size=size, unique=True)
        )
        container = data.draw(st.sampled_from([list, tuple, set, frozenset]))
        return container(names)
    return data.draw(st.sampled_from(INVALID_RESOURCES))


def _resource(data: st.DataObject) -> Any:
    kind = data.draw(st.integers(0, 19), label="resource kind")
    if kind < 6:
        return None
    if kind < 19:
        return data.draw(st.sampled_from(CLASSES))
    return data.draw(st.sampled_from(INVALID_RESOURCE))


# -- the state machine -----------------------------------------------------------------

_ERRORS: dict[Kind, type[LedgerError]] = {
    "invalid": InvalidInput,
    "regression": TimestampRegression,
    "overflow": TotalOverflow,
    "live-limit": LiveGrantLimit,
    "class-limit": ClassLimit,
}


def _sorted_expired(expired: tuple[Expiration, ...] | list[Expiration]) -> list[Expiration]:
    return list(expired)  # both sides give (expiry, grant_id) order: compare as is


class ClassMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tracker = GPUCreditTracker(max_live_grants=MAX_LIVE, max_classes=MAX_CLASSES)
        self.model = ClassModel()
        self.steps = 0
        self.most_live = 0

    def teardown(self) -> None:
        event(f"steps: {self.steps // 10 * 10}+")
        event(f"most live grants: {min(self.most_live, 5)}")

    def _call(self, tracker_call: Callable[[], T], model_call: Callable[[], Any]) -> Any:
        self.steps += 1
        self.most_live = max(self.most_live, len(self.model.held))
        """Run both. If the model rejects, the tracker must reject the same way and change
        nothing (not even the clock)."""
        before = self.tracker.state()
        try:
            expected = model_call()
        except Rejected as rejected:
            event(f"rejected: {rejected.kind}")
            with pytest.raises(_ERRORS[rejected.kind]):
                tracker_call()
            assert self.tracker.state() == before
            return None
        return tracker_call(), expected

    # Grants and consumptions are two rules each: twice as likely as the other rules.
    @rule(data=st.data(), detailed=st.booleans())
    def grant(self, data: st.DataObject, detailed: bool) -> None:
        self._grant(data, detailed)

    @rule(data=st.data(), detailed=st.booleans())
    def grant_more(self, data: st.DataObject, detailed: bool) -> None:
        self._grant(data, detailed)

    @rule(data=st.data(), detailed=st.booleans())
    def consume(self, data: st.DataObject, detailed: bool) -> None:
        self._consume(data, detailed)

    @rule(data=st.data(), detailed=st.booleans())
    def consume_more(self, data: st.DataObject, detailed: bool) -> None:
        self._consume(data, detailed)

    def _grant(self, data: st.DataObject, detailed: bool) -> None:
        amount = _amount(data, 30, 40)
        timestamp = _timestamp(data, self.model.clock)
        expiry = _expiry(data, timestamp, self.model.held)
        resources = _resources(data)

        def model() -> Any:
            return self.model.grant(amount, timestamp, expiry, resources)

        if not detailed:
            self._call(lambda: self.tracker.grant(amount, timestamp, expiry, resources), model)
            return
        outcome = self._call(
            lambda: self.tracker.apply_grant(amount, timestamp, expiry, resources=resources), model
        )
        if outcome is not None:
            got, (settled, retained, key, parts) = outcome
            assert (got.settled_debt, got.retained, got.resources) == (settled, retained, key)
            assert got.settled == parts
            assert got.grant_id == self.model.next_grant_id - 1
            assert (got.available, got.debt) == (self.model.available, self.model.debt)
            assert _sorted_expired(got.expired) == self.model.expired
            event(f"grant settled {len(parts)} items")

    def _consume(self, data: st.DataObject, detailed: bool) -> None:
        amount = _amount(data, 15, 120)
        timestamp = _timestamp(data, self.model.clock)
        resource = _resource(data)

        def model() -> Any:
            return self.model.consume(amount, timestamp, resource)

        if not detailed:
            simple = self._call(lambda: self.tracker.consume(amount, timestamp, resource), model)
            if simple is not None:
                assert simple[0] == self.model.debt
            return
        outcome = self._call(lambda: self.tracker.apply_consume(amount, timestamp, resource), model)
        if outcome is not None:
            got, (consumed, debt_added, allocation, remaining) = outcome
            assert (got.consumed, got.debt_added) == (consumed, debt_added)
            assert got.allocation == allocation
            assert got.remaining == remaining
            assert got.resource == resource
            assert (got.available, got.debt) == (self.model.available, self.model.debt)
            assert _sorted_expired(got.expired) == self.model.expired
            event(f"consumption drew {len(allocation)} grants")

    @rule(data=st.data(), detailed=st.booleans())
    def balance(self, data: st.DataObject, detailed: bool) -> None:
        timestamp = _timestamp(data, self.model.clock)
        resource = _resource(data)

        def model() -> Any:
            return self.model.balance(timestamp, resource)

        if not detailed:
            simple = self._call(lambda: self.tracker.get_balance(timestamp, resource), model)
            if simple is not None:
                got, (available, debt) = simple
                assert got == available - debt
            return
        outcome = self._call(lambda: self.tracker.apply_balance(timestamp, resource), model)
        if outcome is not None:
            got, (available, debt) = outcome
            assert (got.available, got.debt, got.resource) == (available, debt, resource)
            assert _sorted_expired(got.expired) == self.model.expired

    @rule(data=st.data())
    def void(self, data: st.DataObject) -> None:
        kind = data.draw(st.integers(0, 9), label="grant id kind")
        grant_id: Any
        if kind < 8 and self.model.next_grant_id > 1:
            grant_id = data.draw(st.integers(1, self.model.next_grant_id - 1))
        else:
            grant_id = data.draw(
                st.sampled_from([0, -1, self.model.next_grant_id, True, 1.0, "1", None])
            )
        timestamp = _timestamp(data, self.model.clock)
        outcome = self._call(
            lambda: self.tracker.apply_void(grant_id, timestamp),
            lambda: self.model.void(grant_id, timestamp),
        )
        if outcome is not None:
            got, removed = outcome
            assert (got.grant_id, got.removed) == (grant_id, removed)
            assert (got.available, got.debt) == (self.model.available, self.model.debt)
            assert _sorted_expired(got.expired) == self.model.expired
            event("void removed credits" if removed else "void removed nothing")

    @rule(data=st.data())
    def project(self, data: st.DataObject) -> None:
        timestamp = _timestamp(data, self.model.clock)
        resource = _resource(data)
        try:
            _int(timestamp, 0)
            if resource is not None:
                _name(resource)
        except Rejected:
            with pytest.raises(InvalidInput):
                self.tracker.available_at(timestamp, resource)
            return
        if timestamp < self.model.clock:
            with pytest.raises(TimestampRegression):
                self.tracker.available_at(timestamp, resource)
            return
        want = self.model.projected(timestamp, resource)
        assert self.tracker.available_at(timestamp, resource) == want

    @rule(use_copy=st.booleans())
    def persist_and_restore(self, use_copy: bool) -> None:
        state = self.tracker.state()
        if use_copy:
            self.tracker = self.tracker.copy()
        else:
            self.tracker = GPUCreditTracker.from_state(
                state, max_live_grants=MAX_LIVE, max_classes=MAX_CLASSES
            )
        assert self.tracker.state() == state

    @invariant()
    def same_state(self) -> None:
        t = self.tracker
        m = self.model
        t.check_invariants()
        assert t.state() == m.state()
        assert t.live_grants() == m.live_grants()
        assert t.live_grant_count == len(m.held)
        assert t.debts() == tuple(Debt(r, a) for r, a in m.debts)
        if not t.debt_may_name_a_class:  # the journal then skips making the queue
            assert all(r is None for r, _ in m.debts)
        assert set(t.classes_in_use) == m.in_use()
        free = m.live_grants(None)
        first_free = [g for g in free if g.resources is None]
        assert t.first_live_grant() == (first_free[0] if first_free else None)
        for resource in CLASSES:
            assert (t.available_at(t.clock, resource), t.debt_of(resource)) == m.class_view(
                resource
            )
            assert t.live_grants(resource) == m.live_grants(resource)
            eligible = m.live_grants(resource)
            assert t.first_live_grant(resource) == (eligible[0] if eligible else None)
            # SPEC section 5: per class, debt and eligible credits never coexist.
            view = m.class_view(resource)
            assert view[0] == 0 or view[1] == 0
        for grant_id in range(1, m.next_grant_id):
            held = [g for g in m.live_grants() if g.grant_id == grant_id]
            assert t.live_grant(grant_id) == (held[0] if held else None)


ClassMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestClassMachine = ClassMachine.TestCase
