"""The core's part of SPEC section 6: ties follow effective order, and replays keep ids.

A replay applies an account's writes in effective order (timestamp, arrival) and gives each
grant the id it got at arrival (``apply_grant(..., grant_id=...)``). Grants of equal expiry
and width then tie by (grant's timestamp, grant_id), not by grant_id alone.
"""

from __future__ import annotations

import pytest

from app.domain import (
    Allocation,
    Expiration,
    GPUCreditTracker,
    InvalidInput,
    LiveGrant,
    TimestampRegression,
    TrackerState,
)


def _granted_at(tracker: GPUCreditTracker) -> list[tuple[int, int]]:
    """(grant_id, granted_at) in consumption order: ``LiveGrant ==`` leaves granted_at out."""
    return [(g.grant_id, g.granted_at) for g in tracker.live_grants()]


def test_late_grant_is_drawn_before_an_earlier_arrival_with_a_later_timestamp() -> None:
    # Grant 1 arrived first with timestamp 20; grant 2 arrived later with timestamp 15.
    # Effective order puts grant 2 first, and so does a consumption at equal expiry.
    t = GPUCreditTracker()
    t.apply_grant(10, 15, 100, grant_id=2)
    t.apply_grant(10, 20, 100, grant_id=1)
    assert [g.grant_id for g in t.live_grants()] == [2, 1]
    assert t.first_live_grant() == LiveGrant(2, 100, 10)
    result = t.apply_consume(15, 21)
    assert result.allocation == (Allocation(2, 100, 10), Allocation(1, 100, 5))
    t.check_invariants()


def test_ties_at_one_timestamp_follow_grant_id() -> None:
    t = GPUCreditTracker()
    t.apply_grant(10, 5, 100, grant_id=7)
    t.apply_grant(10, 5, 100, grant_id=3)  # same timestamp: arrival (the id) decides
    assert [g.grant_id for g in t.live_grants()] == [3, 7]
    t.check_invariants()


def test_width_still_comes_before_effective_order() -> None:
    t = GPUCreditTracker()
    t.apply_grant(10, 1, 100, grant_id=2)  # unrestricted, earlier timestamp
    t.apply_grant(10, 2, 100, resources=["h100"], grant_id=1)  # narrower
    result = t.apply_consume(15, 3, "h100")
    assert [a.grant_id for a in result.allocation] == [1, 2]
    t.check_invariants()


def test_in_order_grants_record_their_timestamp() -> None:
    t = GPUCreditTracker()
    t.grant(5, 3, 100)
    t.grant(5, 8, 100, ["a100"])
    assert _granted_at(t) == [(2, 8), (1, 3)]  # the narrower first


def test_state_without_timestamps_keeps_grant_id_order() -> None:
    # A state written before granted_at existed: every live grant reads back at 0, and
    # grant_id order stays the order at equal expiry, before and after new grants.
    state = TrackerState(10, 0, 4, (LiveGrant(1, 100, 5), LiveGrant(3, 100, 5)))
    t = GPUCreditTracker.from_state(state)
    t.grant(5, 10, 100)  # grant 4
    t.apply_grant(5, 10, 100, grant_id=2)  # a replayed id below the next: after 1 and 3 still
    assert [g.grant_id for g in t.live_grants()] == [1, 3, 2, 4]
    result = t.apply_consume(20, 11)
    assert [a.grant_id for a in result.allocation] == [1, 3, 2, 4]
    t.check_invariants()


def test_state_round_trip_keeps_granted_at() -> None:
    t = GPUCreditTracker()
    t.apply_grant(10, 15, 100, grant_id=2)
    t.apply_grant(10, 20, 100, resources=["h100"], grant_id=1)
    state = t.state()
    assert [(g.grant_id, g.granted_at) for g in state.live_grants] == [(1, 20), (2, 15)]
    copy = GPUCreditTracker.from_state(state)
    copy.check_invariants()
    assert _granted_at(copy) == _granted_at(t)
    assert _granted_at(t.copy()) == _granted_at(t)
    assert copy.apply_consume(15, 21) == t.apply_consume(15, 21)


@pytest.mark.parametrize(
    "granted_at", [-1, 11, True, "3"], ids=["negative", "after", "bool", "str"]
)
def test_from_state_refuses_a_bad_granted_at(granted_at: object) -> None:
    live = LiveGrant(1, 100, 5, None, granted_at)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="granted_at"):
        GPUCreditTracker.from_state(TrackerState(10, 0, 2, (live,)))


def test_explicit_grant_id_moves_next_grant_id_up_only() -> None:
    t = GPUCreditTracker()
    assert t.apply_grant(5, 0, 10, grant_id=5).grant_id == 5
    assert t.next_grant_id == 6
    assert t.apply_grant(5, 1, 10, grant_id=2).grant_id == 2
    assert t.next_grant_id == 6
    assert t.apply_grant(5, 2, 10).grant_id == 6
    assert t.next_grant_id == 7
    t.check_invariants()


@pytest.mark.parametrize(
    ("grant_id", "message"),
    [(0, "between 1"), (-3, "between 1"), (True, "integer"), (2**53, "between 1"), (4, "live")],
    ids=["zero", "negative", "bool", "too-big", "live"],
)
def test_explicit_grant_id_refused_changes_nothing(grant_id: object, message: str) -> None:
    t = GPUCreditTracker()
    t.apply_grant(5, 0, 10, grant_id=4)
    t.apply_consume(2, 1)
    before = t.state()
    with pytest.raises(InvalidInput, match=message):
        t.apply_grant(5, 2, 10, grant_id=grant_id)  # type: ignore[arg-type]
    assert t.state() == before
    assert t.clock == 1
    t.check_invariants()


def test_explicit_grant_id_of_a_used_up_grant_is_allowed() -> None:
    # The tracker only knows live grants: a replay may reuse nothing live.
    t = GPUCreditTracker()
    t.apply_grant(5, 0, 10, grant_id=3)
    t.apply_consume(5, 1)
    assert t.apply_grant(5, 2, 10, grant_id=3).grant_id == 3
    t.check_invariants()


def test_regression_checked_before_the_explicit_id() -> None:
    t = GPUCreditTracker()
    t.apply_grant(5, 4, 10, grant_id=4)
    with pytest.raises(TimestampRegression):
        t.apply_grant(5, 3, 10, grant_id=4)


def test_expirations_listed_by_grant_id_when_ids_are_reordered() -> None:
    # Heap order at equal expiry is (granted_at, grant_id): 3 before 1 here; what expires
    # together is still reported in (expiry, grant_id) order, as the ledger lists it.
    t = GPUCreditTracker()
    t.apply_grant(5, 1, 10, grant_id=3)
    t.apply_grant(6, 2, 10, grant_id=1)
    t.apply_grant(7, 2, 10, resources=["h100"], grant_id=2)
    t.apply_grant(8, 3, 9, grant_id=4)
    result = t.apply_consume(1, 10)
    assert result.expired == (
        Expiration(4, 9, 8),
        Expiration(1, 10, 6),
        Expiration(2, 10, 7, ("h100",)),
        Expiration(3, 10, 5),
    )
    t.check_invariants()


def test_reordered_state_reads_back_reordered() -> None:
    t = GPUCreditTracker()
    t.apply_grant(5, 1, 10, grant_id=3)
    t.apply_grant(6, 2, 10, grant_id=1)
    copy = GPUCreditTracker.from_state(t.state())
    copy.check_invariants()
    assert copy.apply_consume(1, 10).expired == (Expiration(1, 10, 6), Expiration(3, 10, 5))
