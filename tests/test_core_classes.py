"""Unit tests for the core's GPU classes (SPEC section 5) and voiding a grant (section 7)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from app.domain import (
    MAX_CLASSES,
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
    NoLiveRoom,
    TimestampRegression,
    TotalOverflow,
    TrackerState,
    VoidResult,
)

# -- SPEC Example 3 --------------------------------------------------------------------


def test_spec_example_3_every_line() -> None:
    t = GPUCreditTracker()
    t.grant(100, timestamp=0, expiry=50, resources=["h100"])
    t.grant(40, timestamp=0, expiry=30)  # unrestricted
    # Only the unrestricted grant is eligible for a100: 10 left of it.
    assert t.consume(30, timestamp=1, resource="a100") == 0
    assert t.live_grants() == [LiveGrant(2, 30, 10), LiveGrant(1, 50, 100, ("h100",))]
    # 10 from expiry 30, 100 from expiry 50, 10 of h100 debt.
    assert t.consume(120, timestamp=2, resource="h100") == 10
    assert t.get_balance(3) == -10
    assert t.get_balance(3, resource="a100") == 0
    # Cannot settle h100 debt: 25 kept.
    t.grant(25, timestamp=4, expiry=60, resources=["a100"])
    assert t.get_balance(5) == 15  # 25 available - 10 debt
    assert t.get_balance(5, resource="h100") == -10
    # Unrestricted: settles the 10 of h100 debt, keeps 5.
    t.grant(15, timestamp=6, expiry=70)
    assert t.get_balance(6, resource="h100") == 5
    assert t.get_balance(6, resource="a100") == 30
    assert t.get_balance(6) == 30
    t.check_invariants()


def test_spec_example_3_detailed() -> None:
    """The same, through the detailed calls: what the ledger of each step is made of."""
    t = GPUCreditTracker()
    first = t.apply_grant(100, 0, 50, resources=["h100"])
    assert (first.grant_id, first.settled_debt, first.retained, first.resources) == (
        1,
        0,
        100,
        ("h100",),
    )
    assert first.settled == ()
    second = t.apply_grant(40, 0, 30)
    assert (second.grant_id, second.resources) == (2, None)
    a100 = t.apply_consume(30, 1, "a100")
    assert a100.allocation == (Allocation(2, 30, 30),)
    assert (a100.consumed, a100.debt_added, a100.available, a100.debt) == (30, 0, 110, 0)
    assert (a100.resource, a100.remaining) == ("a100", (10,))
    h100 = t.apply_consume(120, 2, "h100")
    assert h100.allocation == (Allocation(2, 30, 10), Allocation(1, 50, 100, ("h100",)))
    assert h100.remaining == (0, 0)
    assert (h100.consumed, h100.debt_added, h100.available, h100.debt) == (110, 10, 0, 10)
    assert t.debts() == (Debt("h100", 10),)
    balance = t.apply_balance(3, "a100")
    assert (balance.available, balance.debt, balance.resource) == (0, 0, "a100")
    kept = t.apply_grant(25, 4, 60, resources=["a100"])
    assert (kept.settled_debt, kept.retained, kept.settled, kept.debt) == (0, 25, (), 10)
    settles = t.apply_grant(15, 6, 70)
    assert (settles.settled_debt, settles.retained) == (10, 5)
    assert settles.settled == (Debt("h100", 10),)
    assert (settles.available, settles.debt) == (30, 0)
    assert t.state() == TrackerState(
        6, 0, 5, (LiveGrant(3, 60, 25, ("a100",)), LiveGrant(4, 70, 5)), ()
    )


# -- eligibility and order -------------------------------------------------------------


def test_equal_expiry_narrower_first_unrestricted_last_then_grant_order() -> None:
    t = GPUCreditTracker()
    t.grant(1, 0, 10)  # 1: unrestricted
    t.grant(1, 0, 10, resources=["h100", "a100"])  # 2: two classes
    t.grant(1, 0, 10, resources=["h100"])  # 3: one class
    t.grant(1, 0, 10, resources=["h100", "a100", "l4"])  # 4: three classes
    t.grant(1, 0, 10, resources=["h100"])  # 5: one class, granted later
    t.grant(1, 0, 10, resources=["a100", "h100"])  # 6: two classes, granted later
    want = [3, 5, 2, 6, 4, 1]
    assert [g.grant_id for g in t.live_grants()] == want
    assert [g.grant_id for g in t.live_grants("h100")] == want
    result = t.apply_consume(6, 1, "h100")
    assert [a.grant_id for a in result.allocation] == want
    assert result.allocation[2].resources == ("a100", "h100")  # normalised: sorted


def test_earlier_expiry_beats_narrower_class_set() -> None:
    t = GPUCreditTracker()
    t.grant(5, 0, 20, resources=["h100"])  # 1
    t.grant(5, 0, 10)  # 2: unrestricted but earlier
    t.grant(5, 0, 15, resources=["a100", "h100"])  # 3
    assert [a.grant_id for a in t.apply_consume(12, 1, "h100").allocation] == [2, 3, 1]
    assert t.live_grants() == [LiveGrant(1, 20, 3, ("h100",))]


def test_consumption_without_class_is_paid_by_unrestricted_grants_only() -> None:
    t = GPUCreditTracker()
    t.grant(50, 0, 10, resources=["h100"])
    t.grant(20, 0, 20)
    result = t.apply_consume(30, 1)
    assert result.allocation == (Allocation(2, 20, 20),)
    assert (result.consumed, result.debt_added, result.debt, result.resource) == (20, 10, 10, None)
    assert t.debts() == (Debt(None, 10),)
    # Debt of no class and h100 credits coexist (SPEC section 5: totals can be both).
    assert (t.available, t.debt) == (50, 10)
    assert t.get_balance(1) == 40
    assert t.get_balance(1, "h100") == 50
    t.check_invariants()


def test_consumption_of_a_class_never_draws_other_classes() -> None:
    t = GPUCreditTracker()
    t.grant(50, 0, 10, resources=["a100"])
    t.grant(50, 0, 10, resources=["a100", "l4"])
    assert t.consume(5, 1, "h100") == 5
    assert t.available == 100
    assert t.get_balance(1, "h100") == -5
    assert t.get_balance(1, "l4") == 50
    assert t.get_balance(1, "a100") == 100
    assert t.get_balance(1) == 95


def test_class_names_are_case_sensitive() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 10, resources=["H100"])
    assert t.consume(4, 1, "h100") == 4
    assert t.get_balance(1, "H100") == 10
    assert list(t.classes_in_use) == ["H100", "h100"]


def test_resources_are_normalised_whatever_the_container() -> None:
    t = GPUCreditTracker()
    for resources in (["b", "a"], ("a", "b"), {"b", "a"}, frozenset({"a", "b"})):
        assert t.apply_grant(1, 0, 10, resources=resources).resources == ("a", "b")
    assert {g.resources for g in t.live_grants()} == {("a", "b")}
    assert t.live_grant_count == 4


# -- debt ------------------------------------------------------------------------------


def _indebted() -> GPUCreditTracker:
    """Debt queue h100:10, a100:20, (no class):5, h100:7, l4:3 (order incurred)."""
    t = GPUCreditTracker()
    assert t.consume(10, 0, "h100") == 10
    assert t.consume(20, 1, "a100") == 30
    assert t.consume(5, 2) == 35
    assert t.consume(7, 3, "h100") == 42
    assert t.consume(3, 4, "l4") == 45
    return t


def test_debt_is_a_queue_in_the_order_incurred() -> None:
    t = _indebted()
    want = (Debt("h100", 10), Debt("a100", 20), Debt(None, 5), Debt("h100", 7), Debt("l4", 3))
    assert t.debts() == want
    assert t.state().debts == want
    assert [t.debt_of(c) for c in ("h100", "a100", "l4", "v100")] == [17, 20, 3, 0]
    assert t.debt_of() == t.debt == 45
    assert t.get_balance(4, "h100") == -17
    t.check_invariants()


def test_consecutive_debt_of_one_class_is_one_item() -> None:
    t = GPUCreditTracker()
    t.consume(1, 0, "h100")
    t.consume(2, 1, "h100")
    t.consume(3, 2)
    t.consume(4, 3)
    assert t.debts() == (Debt("h100", 3), Debt(None, 7))


def test_unrestricted_grant_settles_in_queue_order() -> None:
    t = _indebted()
    result = t.apply_grant(38, 5, 100)
    assert result.settled == (Debt("h100", 10), Debt("a100", 20), Debt(None, 5), Debt("h100", 3))
    assert (result.settled_debt, result.retained, result.debt) == (38, 0, 7)
    assert t.debts() == (Debt("h100", 4), Debt("l4", 3))
    assert t.live_grants() == []
    t.check_invariants()


def test_unrestricted_grant_settles_everything_then_keeps_the_rest() -> None:
    t = _indebted()
    result = t.apply_grant(50, 5, 100)
    assert (result.settled_debt, result.retained, result.available, result.debt) == (45, 5, 5, 0)
    assert len(result.settled) == 5
    assert t.debts() == ()
    assert t.state().debts == ()
    assert list(t.classes_in_use) == []


def test_restricted_grant_settles_only_its_classes_debt_in_queue_order() -> None:
    t = _indebted()
    result = t.apply_grant(12, 5, 100, resources=["h100"])
    assert result.settled == (Debt("h100", 10), Debt("h100", 2))
    assert (result.settled_debt, result.retained) == (12, 0)
    assert t.debts() == (Debt("a100", 20), Debt(None, 5), Debt("h100", 5), Debt("l4", 3))
    both = t.apply_grant(30, 6, 100, resources=["l4", "h100"])
    assert both.settled == (Debt("h100", 5), Debt("l4", 3))
    assert (both.settled_debt, both.retained) == (8, 22)
    assert t.live_grants() == [LiveGrant(2, 100, 22, ("h100", "l4"))]
    # a100 debt and debt of no class are untouched; h100 and l4 are settled.
    assert t.debts() == (Debt("a100", 20), Debt(None, 5))
    assert t.get_balance(6, "h100") == 22
    assert t.get_balance(6, "a100") == -20
    assert t.get_balance(6) == 22 - 25
    t.check_invariants()


def test_restricted_grant_never_settles_debt_of_no_class() -> None:
    t = GPUCreditTracker()
    t.consume(10, 0)
    result = t.apply_grant(4, 1, 10, resources=["h100"])
    assert (result.settled_debt, result.retained, result.settled) == (0, 4, ())
    assert (t.available, t.debt) == (4, 10)
    # The h100 credits do not pay a consumption of no class either.
    assert t.consume(1, 2) == 11
    assert t.get_balance(2, "h100") == 4
    t.check_invariants()


def test_restricted_grant_not_settling_other_classes_debt() -> None:
    t = GPUCreditTracker()
    t.consume(10, 0, "h100")
    result = t.apply_grant(6, 1, 10, resources=["a100", "l4"])
    assert (result.settled_debt, result.retained) == (0, 6)
    assert t.debts() == (Debt("h100", 10),)


def test_settling_a_middle_item_merges_its_neighbours() -> None:
    t = GPUCreditTracker()
    t.consume(5, 0, "h100")
    t.consume(6, 0, "a100")
    t.consume(7, 0, "h100")
    t.consume(8, 0, "l4")
    t.apply_grant(6, 1, 10, resources=["a100"])
    assert t.debts() == (Debt("h100", 12), Debt("l4", 8))
    t.check_invariants()
    t.apply_grant(8, 1, 10, resources=["l4"])
    assert t.debts() == (Debt("h100", 12),)
    # One item again: a new h100 debt joins it, and a grant settles it as one.
    t.consume(1, 2, "h100")
    assert t.debts() == (Debt("h100", 13),)
    assert t.apply_grant(20, 3, 10).settled == (Debt("h100", 13),)


def test_debt_of_a_class_keeps_credits_for_it_at_zero() -> None:
    """SPEC section 5 invariant, per class: with h100 debt, nothing is eligible for h100."""
    t = GPUCreditTracker()
    t.grant(10, 0, 100, resources=["a100", "h100"])
    t.grant(10, 0, 100, resources=["a100"])
    t.grant(10, 0, 100)
    assert t.consume(25, 1, "h100") == 5
    assert t.get_balance(1, "h100") == -5
    assert t.available_at(1, "h100") == 0
    assert t.get_balance(1, "a100") == 10
    # An a100 grant does not settle h100 debt and is not eligible for h100.
    t.grant(10, 2, 100, resources=["a100"])
    assert t.get_balance(2, "h100") == -5
    # A grant listing h100 settles it first.
    assert t.apply_grant(8, 3, 100, resources=["a100", "h100"]).settled == (Debt("h100", 5),)
    assert t.get_balance(3, "h100") == 3
    t.check_invariants()


def test_debt_total_overflow_counts_all_classes() -> None:
    t = GPUCreditTracker()
    t.consume(MAX_VALUE - 1, 0, "h100")
    before = t.state()
    with pytest.raises(TotalOverflow):
        t.consume(2, 1, "a100")
    assert t.state() == before
    assert t.consume(1, 1, "a100") == MAX_VALUE


def test_available_total_overflow_counts_all_classes() -> None:
    t = GPUCreditTracker()
    t.grant(MAX_VALUE - 1, 0, 10, resources=["h100"])
    before = t.state()
    with pytest.raises(TotalOverflow):
        t.grant(2, 1, 10, resources=["a100"])
    with pytest.raises(TotalOverflow):
        t.grant(2, 1, 10)
    assert t.state() == before
    t.grant(1, 1, 10, resources=["a100"])
    assert t.get_balance(1) == MAX_VALUE


# -- expiration ------------------------------------------------------------------------


def test_expirations_across_classes_in_expiry_then_grant_order() -> None:
    t = GPUCreditTracker()
    t.grant(1, 0, 7, resources=["h100"])  # 1
    t.grant(2, 0, 5)  # 2
    t.grant(3, 0, 5, resources=["a100"])  # 3
    t.grant(4, 0, 9, resources=["a100", "h100"])  # 4
    t.grant(5, 0, 30, resources=["h100"])  # 5
    result = t.apply_balance(10, "h100")
    assert result.expired == (
        Expiration(2, 5, 2),
        Expiration(3, 5, 3, ("a100",)),
        Expiration(1, 7, 1, ("h100",)),
        Expiration(4, 9, 4, ("a100", "h100")),
    )
    assert (result.available, result.debt) == (5, 0)
    assert list(t.classes_in_use) == [
        "h100",
    ]
    t.check_invariants()


def test_available_at_per_class_projects_without_changing_anything() -> None:
    t = GPUCreditTracker()
    t.grant(1, 0, 5, resources=["h100"])
    t.grant(2, 0, 8, resources=["a100", "h100"])
    t.grant(4, 0, 6)
    t.grant(8, 0, 20, resources=["a100"])
    before = t.state()
    assert t.available_at(0) == 15
    assert [t.available_at(0, c) for c in ("h100", "a100", "l4")] == [7, 14, 4]
    assert [t.available_at(6, c) for c in ("h100", "a100", "l4")] == [2, 10, 0]
    assert t.available_at(8, "a100") == 8
    assert t.available_at(6) == 10
    assert t.state() == before
    with pytest.raises(InvalidInput):
        t.available_at(6, "-")


# -- the class limit -------------------------------------------------------------------


def _classes(n: int, prefix: str = "c") -> list[str]:
    return [f"{prefix}{i:02d}" for i in range(n)]


def test_class_limit_is_64_by_default() -> None:
    assert MAX_CLASSES == 64
    t = GPUCreditTracker()
    names = _classes(64)
    for i in range(0, 64, 16):
        t.grant(1, 0, 100, resources=names[i : i + 16])
    assert len(t.classes_in_use) == 64
    t.grant(1, 0, 100, resources=names[:3])  # classes in use already: fine
    before = t.state()
    with pytest.raises(ClassLimit) as info:
        t.grant(1, 1, 100, resources=["z", names[0]])
    assert isinstance(info.value, LedgerError)
    assert isinstance(info.value, ValueError)
    assert (info.value.limit, info.value.resources) == (64, ("z",))
    assert t.state() == before
    assert t.clock == 0
    with pytest.raises(ClassLimit):
        t.consume(1, 1, "z")  # no credits for z: it would add z's debt
    assert t.state() == before
    t.check_invariants()


def test_class_limit_counts_classes_in_use_not_every_class_ever_seen() -> None:
    t = GPUCreditTracker(max_classes=2)
    t.grant(5, 0, 10, resources=["a", "b"])
    with pytest.raises(ClassLimit):
        t.grant(5, 0, 20, resources=["c"])
    # Used up: a and b are free again.
    assert t.consume(5, 1, "a") == 0
    assert list(t.classes_in_use) == []
    t.grant(5, 1, 20, resources=["c", "d"])
    with pytest.raises(ClassLimit):
        t.grant(5, 2, 30, resources=["a"])
    # Expired at the grant's own timestamp: room again in the same call.
    assert t.apply_grant(5, 20, 30, resources=["a", "b"]).expired == (
        Expiration(2, 20, 5, ("c", "d")),
    )
    assert list(t.classes_in_use) == ["a", "b"]


def test_class_limit_counts_classes_with_debt() -> None:
    t = GPUCreditTracker(max_classes=2)
    assert t.consume(3, 0, "a") == 3
    assert t.consume(3, 0, "b") == 6
    assert list(t.classes_in_use) == ["a", "b"]
    with pytest.raises(ClassLimit):
        t.consume(1, 0, "c")
    with pytest.raises(ClassLimit):
        t.grant(5, 0, 20, resources=["c"])
    # A grant that debt swallows whole keeps nothing and adds no class.
    result = t.apply_grant(3, 1, 20, resources=["a", "c"])
    assert (result.settled, result.retained) == ((Debt("a", 3),), 0)
    assert list(t.classes_in_use) == [
        "b",
    ]
    # Keeping credits for a class whose debt it settles does not add it twice.
    t.grant(5, 1, 20, resources=["b", "c"])
    assert list(t.classes_in_use) == ["b", "c"]


def test_consumption_of_a_new_class_paid_in_full_adds_no_class() -> None:
    t = GPUCreditTracker(max_classes=1)
    t.grant(10, 0, 20, resources=["a"])
    t.grant(10, 0, 20)
    assert t.consume(4, 1, "b") == 0  # unrestricted credits pay it: no debt, no class
    assert list(t.classes_in_use) == [
        "a",
    ]
    before = t.state()
    with pytest.raises(ClassLimit):
        t.consume(7, 2, "b")  # 6 left unrestricted: 1 would be b's debt
    assert t.state() == before
    assert t.consume(6, 2, "b") == 0


def test_rejected_class_limit_restores_what_eviction_popped() -> None:
    t = GPUCreditTracker(max_classes=2)
    t.grant(5, 0, 5, resources=["h"])
    t.grant(5, 0, 100, resources=["a"])
    before = t.state()
    # At 6, h has expired (one class freed), but b and c would make three.
    with pytest.raises(ClassLimit):
        t.grant(1, 6, 100, resources=["b", "c"])
    assert t.state() == before
    t.check_invariants()
    assert list(t.classes_in_use) == ["a", "h"]
    assert t.consume(2, 4, "h") == 0  # the clock did not move and h is still live
    t.check_invariants()


def test_state_over_the_class_limit_is_kept_whole() -> None:
    t = GPUCreditTracker()
    t.grant(1, 0, 10, resources=["a", "b", "c"])
    state = t.state()
    lowered = GPUCreditTracker.from_state(state, max_classes=2)
    assert lowered.state() == state
    lowered.grant(1, 1, 10, resources=["a"])  # no new class: fine
    with pytest.raises(ClassLimit):
        lowered.grant(1, 1, 10, resources=["d"])


# -- void ------------------------------------------------------------------------------


def test_void_removes_the_live_remainder() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 50)  # 1
    t.grant(20, 0, 40)  # 2
    t.grant(30, 0, 60, resources=["h100"])  # 3
    t.consume(5, 1)  # from grant 2 (earliest expiry)
    result = t.apply_void(2, 2)
    assert result == VoidResult(grant_id=2, removed=15, available=40, debt=0, expired=())
    assert t.live_grants() == [LiveGrant(1, 50, 10), LiveGrant(3, 60, 30, ("h100",))]
    assert t.live_grant_count == 2
    assert t.clock == 2
    # The next consumption skips the voided grant.
    assert t.apply_consume(3, 3).allocation == (Allocation(1, 50, 3),)
    assert t.apply_void(3, 3).removed == 30
    assert list(t.classes_in_use) == []
    assert (t.available, t.live_grant_count) == (7, 1)
    t.check_invariants()


def test_void_of_a_grant_deep_in_the_heap() -> None:
    t = GPUCreditTracker()
    for i in range(1, 101):
        t.grant(i, 0, 1000 + i)
    for grant_id in (50, 2, 99, 77, 1):
        t.apply_void(grant_id, 1)
        t.check_invariants()
    assert t.live_grant_count == 95
    assert t.available == sum(range(1, 101)) - (50 + 2 + 99 + 77 + 1)
    result = t.apply_consume(3 + 4 + 5, 2)
    assert [a.grant_id for a in result.allocation] == [3, 4, 5]
    assert t.first_live_grant() == LiveGrant(6, 1006, 6)
    assert t.available_at(1050) == sum(range(50, 101)) - 50 - 99 - 77
    t.check_invariants()


def test_void_of_a_used_up_expired_or_voided_grant_removes_nothing() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 5)  # 1
    t.grant(10, 0, 50)  # 2
    t.grant(10, 0, 50)  # 3
    t.consume(20, 1)  # grants 1 and 2 used up
    assert t.apply_void(1, 1).removed == 0
    assert t.apply_void(2, 1).removed == 0
    assert t.apply_void(3, 2).removed == 10
    assert t.apply_void(3, 2).removed == 0
    t.grant(10, 2, 8)  # 4
    result = t.apply_void(4, 8)  # expires at 8: evicted first, reported as an expiration
    assert result == VoidResult(4, 0, 0, 0, (Expiration(4, 8, 10),))
    t.check_invariants()


def test_void_keeps_what_the_grant_already_settled_and_paid() -> None:
    t = GPUCreditTracker()
    t.consume(10, 0, "h100")
    t.grant(30, 1, 50, resources=["h100"])  # settles 10, keeps 20
    t.consume(5, 2, "h100")
    result = t.apply_void(1, 3)
    assert (result.removed, result.available, result.debt) == (15, 0, 0)
    assert t.get_balance(3, "h100") == 0
    # A grant swallowed whole by debt has nothing live to remove.
    t.consume(10, 4)
    t.grant(4, 5, 50)
    assert t.apply_void(2, 6).removed == 0
    assert t.debt == 6


def test_void_rejects_unknown_grants_and_changes_nothing() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 5)
    t.grant(10, 1, 50)
    t.get_balance(3)
    before = t.state()
    bad: list[Any] = [0, 3, -1, True, 1.0, "1", None]
    for grant_id in bad:
        with pytest.raises(InvalidInput) as info:
            t.apply_void(grant_id, 10)
        assert info.value.field == "grant_id"
        assert t.state() == before
    bad_times: list[Any] = [-1, 2**53, 1.5, None]
    for timestamp in bad_times:
        with pytest.raises(InvalidInput):
            t.apply_void(2, timestamp)
    with pytest.raises(TimestampRegression):
        t.apply_void(2, 2)
    assert t.state() == before
    assert t.get_balance(4) == 20  # nothing was evicted, the clock did not move


def test_void_then_persist_and_copy() -> None:
    t = GPUCreditTracker()
    for i in range(1, 9):
        t.grant(i, 0, 10 + i, resources=None if i % 2 else ["h100"])
    t.apply_void(3, 1)
    t.apply_void(4, 1)
    state = t.state()
    assert [g.grant_id for g in state.live_grants] == [1, 2, 5, 6, 7, 8]
    for twin in (GPUCreditTracker.from_state(state), t.copy()):
        twin.check_invariants()
        assert twin.state() == state
        reference = t.copy()
        assert twin.apply_consume(10, 2, "h100") == reference.apply_consume(10, 2, "h100")
        assert twin.apply_void(5, 3) == reference.apply_void(5, 3)
        assert twin.apply_void(6, 3) == reference.apply_void(6, 3)
        assert twin.state() == reference.state()
        twin.check_invariants()


def test_live_grant_lookup() -> None:
    t = GPUCreditTracker()
    t.grant(10, 0, 50, resources=["h100"])
    t.grant(10, 0, 50)
    assert t.live_grant(1) == LiveGrant(1, 50, 10, ("h100",))
    t.apply_void(2, 1)  # builds the index
    assert t.live_grant(1) == LiveGrant(1, 50, 10, ("h100",))
    assert t.live_grant(2) is None
    assert t.live_grant(3) is None


# -- views -----------------------------------------------------------------------------


def test_first_live_grant_per_class() -> None:
    t = GPUCreditTracker()
    t.grant(5, 0, 30)  # 1
    t.grant(5, 0, 10, resources=["h100"])  # 2
    t.grant(5, 0, 20, resources=["a100"])  # 3
    assert t.first_live_grant() == LiveGrant(1, 30, 5)  # a consumption of no class
    assert t.first_live_grant("h100") == LiveGrant(2, 10, 5, ("h100",))
    assert t.first_live_grant("a100") == LiveGrant(3, 20, 5, ("a100",))
    assert t.first_live_grant("l4") == LiveGrant(1, 30, 5)
    assert [g.grant_id for g in t.live_grants("a100")] == [3, 1]
    assert [g.grant_id for g in t.live_grants()] == [2, 3, 1]


def test_consume_result_remaining_says_what_each_grant_has_left() -> None:
    t = GPUCreditTracker()
    t.grant(5, 0, 10, resources=["h100"])
    t.grant(5, 0, 20)
    t.grant(5, 0, 30, resources=["h100", "a100"])
    result = t.apply_consume(12, 1, "h100")
    assert [(a.grant_id, a.amount) for a in result.allocation] == [(1, 5), (2, 5), (3, 2)]
    assert result.remaining == (0, 0, 3)
    assert t.live_grants() == [LiveGrant(3, 30, 3, ("a100", "h100"))]


# -- validation ------------------------------------------------------------------------

BAD_RESOURCES: list[Any] = [
    "h100",  # a string is not a list of classes
    b"h100",
    {"h100": 1},
    5,
    True,
    iter(["h100"]),
    [],
    ["h100", "h100"],
    ("a", "b", "a"),
    [f"c{i}" for i in range(17)],
    [""],
    ["-h100"],
    [".h100"],
    ["_h100"],
    ["h100 "],
    ["h 100"],
    ["h100\n"],
    ["h100/1"],
    ["x" * 33],
    ["é"],
    ["h100", 5],
    [None],
    [True],
    [b"h100"],
]
BAD_RESOURCE: list[Any] = ["", "-h100", "x" * 33, "h100\n", "é", 5, True, b"h100", ["h100"]]


def _pending_expiry() -> GPUCreditTracker:
    """Clock 3, a grant expiring at 5, classes in use: a call at 7 would evict."""
    t = GPUCreditTracker()
    t.grant(10, 0, 5, resources=["h100"])
    t.grant(4, 1, 50)
    t.consume(2, 2, "a100")
    t.get_balance(3)
    return t


GRANT_CALLS: list[Callable[[GPUCreditTracker, Any], object]] = [
    lambda t, r: t.grant(1, 7, 20, r),
    lambda t, r: t.apply_grant(1, 7, 20, resources=r),
]


def _stable_id(value: Any) -> str:
    """A test id that is the same in every process (pytest-xdist compares them)."""
    return type(value).__name__ if isinstance(value, Iterator) else repr(value)


@pytest.mark.parametrize("resources", BAD_RESOURCES, ids=_stable_id)
@pytest.mark.parametrize("call", GRANT_CALLS, ids=["grant", "apply_grant"])
def test_invalid_resources_are_rejected_and_change_nothing(
    call: Callable[[GPUCreditTracker, Any], object], resources: Any
) -> None:
    t = _pending_expiry()
    before = t.state()
    with pytest.raises(InvalidInput) as info:
        call(t, resources)
    assert info.value.field == "resources"
    assert isinstance(info.value, ValueError)
    assert t.state() == before
    assert t.get_balance(4, "h100") == 12


RESOURCE_CALLS: list[tuple[str, Callable[[GPUCreditTracker, Any], object]]] = [
    ("consume", lambda t, r: t.consume(1, 7, r)),
    ("consume-keyword", lambda t, r: t.consume(amount=1, timestamp=7, resource=r)),
    ("apply_consume", lambda t, r: t.apply_consume(1, 7, r)),
    ("get_balance", lambda t, r: t.get_balance(7, r)),
    ("apply_balance", lambda t, r: t.apply_balance(7, r)),
    ("available_at", lambda t, r: t.available_at(7, r)),
    ("live_grants", lambda t, r: t.live_grants(r)),
    ("first_live_grant", lambda t, r: t.first_live_grant(r)),
]


@pytest.mark.parametrize("resource", BAD_RESOURCE, ids=_stable_id)
@pytest.mark.parametrize("call", [c for _, c in RESOURCE_CALLS], ids=[n for n, _ in RESOURCE_CALLS])
def test_invalid_resource_is_rejected_and_changes_nothing(
    call: Callable[[GPUCreditTracker, Any], object], resource: Any
) -> None:
    t = _pending_expiry()
    before = t.state()
    with pytest.raises(InvalidInput) as info:
        call(t, resource)
    assert info.value.field == "resource"
    assert t.state() == before
    assert t.get_balance(4, "h100") == 12


def test_class_names_at_the_limits_are_accepted() -> None:
    t = GPUCreditTracker()
    longest = "a" + "0._-" * 7 + "z9b"
    assert len(longest) == 32
    sixteen = [f"k{i}" for i in range(16)]
    t.grant(2, 0, 10, resources=[longest, "0", "Z", "9.x"])
    t.grant(2, 0, 10, resources=sixteen)
    assert t.consume(1, 1, longest) == 0
    assert t.consume(1, 1, "k15") == 0
    assert set(t.classes_in_use) == {"0", "9.x", "Z", longest, *sixteen}


def test_keyword_arguments_are_named_exactly() -> None:
    t = GPUCreditTracker()
    t.grant(amount=10, timestamp=0, expiry=5, resources=["h100"])
    assert t.consume(amount=3, timestamp=1, resource="h100") == 0
    assert t.get_balance(timestamp=1, resource="h100") == 7
    bad: dict[str, Any] = {"amount": 1, "timestamp": 0, "expiry": 5, "resource": ["h100"]}
    with pytest.raises(TypeError):
        t.grant(**bad)
    with pytest.raises(TypeError):
        t.consume(1, 1, resources="h100")  # type: ignore[call-arg]


# -- persistence -----------------------------------------------------------------------


def test_state_round_trip_with_classes_and_debt_queue() -> None:
    t = GPUCreditTracker()
    t.consume(4, 0)
    t.consume(6, 0, "h100")
    t.consume(8, 0, "a100")
    t.grant(10, 1, 30, resources=["l4"])
    t.grant(3, 1, 20, resources=["l4", "v100"])
    state = t.state()
    assert state.debts == (Debt(None, 4), Debt("h100", 6), Debt("a100", 8))
    assert state.debt == 18
    assert state.live_grants == (
        LiveGrant(2, 20, 3, ("l4", "v100")),
        LiveGrant(1, 30, 10, ("l4",)),
    )
    copy = GPUCreditTracker.from_state(state)
    copy.check_invariants()
    assert copy.state() == state
    assert copy.classes_in_use == t.classes_in_use == ("a100", "h100", "l4", "v100")
    for other in (t, copy):
        assert other.apply_grant(9, 2, 40).settled == (Debt(None, 4), Debt("h100", 5))
    assert t.state() == copy.state()


def test_state_without_debt_queue_is_one_debt_of_no_class() -> None:
    """States stored by the release before classes load unchanged."""
    legacy = TrackerState(clock=4, debt=30, next_grant_id=2, live_grants=())
    t = GPUCreditTracker.from_state(legacy)
    assert t.debts() == (Debt(None, 30),)
    assert t.state() == legacy
    # An explicit single item of no class means the same and is written as ().
    explicit = TrackerState(4, 30, 2, (), (Debt(None, 30),))
    assert GPUCreditTracker.from_state(explicit).state() == legacy
    # Scoped credits may coexist with debt of no class.
    scoped = TrackerState(4, 30, 2, (LiveGrant(1, 10, 5, ("h100",)),))
    assert GPUCreditTracker.from_state(scoped).state() == scoped


@pytest.mark.parametrize(
    "state",
    [
        pytest.param(TrackerState(0, 5, 2, (LiveGrant(1, 10, 3),)), id="no-class-debt-and-free"),
        pytest.param(
            TrackerState(0, 5, 2, (LiveGrant(1, 10, 3, ("h100",)),), (Debt("h100", 5),)),
            id="class-debt-and-its-credits",
        ),
        pytest.param(
            TrackerState(0, 5, 2, (LiveGrant(1, 10, 3),), (Debt("h100", 5),)),
            id="class-debt-and-unrestricted-credits",
        ),
        pytest.param(
            TrackerState(0, 5, 1, (), (Debt("h100", 2), Debt("h100", 3))),
            id="unmerged-neighbours",
        ),
        pytest.param(TrackerState(0, 5, 1, (), (Debt("h100", 4),)), id="queue-sum-differs"),
        pytest.param(TrackerState(0, 0, 1, (), (Debt("h100", 0),)), id="empty-debt-item"),
        pytest.param(TrackerState(0, 5, 1, (), (Debt("-h", 5),)), id="bad-class-in-debt"),
        pytest.param(TrackerState(0, 5, 1, (), ((None, 5),)), id="debt-not-a-Debt"),  # type: ignore[arg-type]
        pytest.param(
            TrackerState(0, 0, 2, (LiveGrant(1, 10, 3, ("b", "a")),)), id="unsorted-classes"
        ),
        pytest.param(
            TrackerState(0, 0, 2, (LiveGrant(1, 10, 3, ("a", "a")),)), id="duplicate-classes"
        ),
        pytest.param(TrackerState(0, 0, 2, (LiveGrant(1, 10, 3, ()),)), id="no-classes"),
        pytest.param(
            TrackerState(0, 0, 2, (LiveGrant(1, 10, 3, ["a"]),)),  # type: ignore[arg-type]
            id="classes-as-list",
        ),
        pytest.param(TrackerState(0, 0, 2, (LiveGrant(1, 10, 3, ("a b",)),)), id="bad-class"),
        pytest.param(TrackerState(0, 0, 2, ((1, 10, 3),)), id="not-a-LiveGrant"),  # type: ignore[arg-type]
    ],
)
def test_from_state_rejects_impossible_states(state: TrackerState) -> None:
    with pytest.raises(InvalidInput):
        GPUCreditTracker.from_state(state)


def test_live_grant_limit_counts_every_class() -> None:
    t = GPUCreditTracker(max_live_grants=2)
    t.grant(1, 0, 10, resources=["h100"])
    t.grant(1, 0, 10)
    before = t.state()
    with pytest.raises(LiveGrantLimit):
        t.grant(1, 0, 10, resources=["a100"])
    assert t.state() == before
    t.apply_void(1, 1)
    t.grant(1, 1, 10, resources=["a100"])
    assert t.live_grant_count == 2


# -- grants listing several classes (one entry in several class heaps) ------------------


def test_grant_used_up_through_one_class_is_gone_for_the_others() -> None:
    t = GPUCreditTracker()
    t.grant(5, 0, 500, resources=["b"])  # 1: first in b's heap, so the dead pile up below
    for i in range(200):
        t.grant(1, 0, 1000 + i, resources=["a", "b"])  # 2 to 201
    for taken in range(1, 151):  # one at a time: 150 two-class grants used up through a
        assert t.consume(1, 1, "a") == 0
        t.check_invariants()  # dead entries in b's heap stay bounded by the live ones
        assert t.get_balance(1, "b") == 5 + 200 - taken
    result = t.apply_consume(52, 2, "b")
    assert [a.grant_id for a in result.allocation] == [1, *range(152, 199)]
    assert result.remaining == (0,) * 48
    assert t.live_grants() == [LiveGrant(g, 1000 + g - 2, 1, ("a", "b")) for g in (199, 200, 201)]
    assert t.available_at(2) == t.available_at(2, "b") == t.available_at(2, "a") == 3
    assert t.classes_in_use == ("a", "b")
    t.check_invariants()


def test_grant_listing_two_classes_expires_once() -> None:
    t = GPUCreditTracker()
    t.grant(4, 0, 10, resources=["a", "b"])
    t.grant(6, 0, 10, resources=["b", "c"])
    t.grant(1, 0, 20, resources=["c"])
    assert t.available_at(10) == 1
    assert t.available_at(10, "b") == 0
    result = t.apply_balance(10)
    assert result.expired == (Expiration(1, 10, 4, ("a", "b")), Expiration(2, 10, 6, ("b", "c")))
    assert (result.available, t.classes_in_use) == (1, ("c",))
    t.check_invariants()


def test_rejected_call_restores_grants_listing_several_classes() -> None:
    t = GPUCreditTracker(max_classes=3)
    t.grant(4, 0, 10, resources=["a", "b"])
    t.grant(6, 0, 20, resources=["b", "c"])
    t.consume(2, 1, "b")  # from grant 1: both stay live
    before = t.state()
    with pytest.raises(ClassLimit):
        t.grant(1, 10, 30, resources=["d", "e"])  # a frees at 10; d and e would be 4
    assert t.state() == before
    t.check_invariants()
    assert [g.grant_id for g in t.live_grants("a")] == [1]
    assert [g.grant_id for g in t.live_grants("b")] == [1, 2]
    assert t.consume(3, 9, "a") == 1  # grant 1 still has 2, for a as for b
    t.check_invariants()


def test_void_of_a_grant_listing_several_classes() -> None:
    t = GPUCreditTracker()
    t.grant(4, 0, 10, resources=["a", "b"])
    t.grant(6, 0, 20, resources=["b"])
    assert t.apply_void(1, 1).removed == 4
    assert [t.available_at(1, c) for c in ("a", "b")] == [0, 6]
    assert t.classes_in_use == ("b",)
    assert t.apply_consume(2, 2, "b").allocation == (Allocation(2, 20, 2, ("b",)),)
    t.check_invariants()


def test_dead_unrestricted_grants_are_skipped_by_draws_and_eviction() -> None:
    t = GPUCreditTracker()
    t.grant(3, 0, 10)  # 1
    t.grant(3, 0, 12)  # 2: voided below, while not first
    t.grant(3, 0, 14)  # 3
    t.grant(3, 0, 30, resources=["h100"])  # 4
    t.grant(3, 0, 16)  # 5: voided below
    t.apply_void(2, 1)
    t.apply_void(5, 1)
    t.check_invariants()
    # A consumption of h100 draws unrestricted grants around the dead one.
    result = t.apply_consume(4, 2, "h100")
    assert [(a.grant_id, a.amount) for a in result.allocation] == [(1, 3), (3, 1)]
    t.check_invariants()
    # Eviction passes over the dead grant 5 and reports the live ones only.
    assert t.apply_balance(20).expired == (Expiration(3, 14, 2),)
    assert t.live_grants() == [LiveGrant(4, 30, 3, ("h100",))]
    t.check_invariants()
    assert t.consume(3, 21, "h100") == 0  # a scoped grant used up, with the index kept
    assert (t.live_grant_count, t.live_grant(4)) == (0, None)
    t.check_invariants()


def test_live_room_counts_what_the_grant_expires() -> None:
    t = GPUCreditTracker()
    t.grant(3, 0, 5, resources=["h100"])
    with pytest.raises(NoLiveRoom):
        t.apply_grant(1, 1, 10, 0, resources=["h100"])
    assert t.apply_grant(1, 5, 10, 0, resources=["h100"]).retained == 1  # grant 1 expired
    t.consume(5, 6, "h100")  # 4 of h100 debt
    assert t.apply_grant(4, 7, 10, 0, resources=["h100"]).retained == 0  # keeps nothing
    t.check_invariants()


def test_settling_a_middle_item_at_the_end_merges_into_the_last() -> None:
    t = GPUCreditTracker()
    t.consume(5, 0, "h100")
    t.consume(6, 0, "a100")
    t.consume(7, 0, "h100")
    t.grant(6, 1, 10, resources=["a100"])
    assert t.debts() == (Debt("h100", 12),)
    t.consume(1, 2, "h100")
    assert t.debts() == (Debt("h100", 13),)
    t.check_invariants()


def test_rejected_call_after_a_void_restores_the_index() -> None:
    t = GPUCreditTracker()
    t.grant(2, 0, 5, resources=["h100"])  # 1
    t.grant(3, 0, 5)  # 2
    t.grant(MAX_VALUE - 10, 0, 50)  # 3
    t.apply_void(3, 1)  # builds the index
    t.grant(MAX_VALUE - 5, 1, 50)  # 4
    before = t.state()
    with pytest.raises(TotalOverflow):
        t.grant(6, 5, 50)  # 1 and 2 expire at 5, yet MAX - 5 + 6 is too much
    assert t.state() == before
    t.check_invariants()
    assert t.apply_void(1, 2).removed == 2
    assert t.apply_void(2, 2).removed == 3
    t.check_invariants()
