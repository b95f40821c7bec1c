"""``app.storage.rows``: the one place a change becomes rows (SQLite and PostgreSQL both write
what ``encode`` returns), and the checks every backend runs before writing a group."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain import Allocation, Debt, LiveGrant, TrackerState
from app.storage import rows
from app.storage.base import (
    AccountRow,
    Change,
    Checkpoint,
    ConsumptionEntry,
    Entry,
    ExpirationEntry,
    GrantEntry,
    VoidEntry,
)
from tests import storage_dataset as data

NOW_S = 1_800_000_000.0


def test_the_dataset_passes_the_checks_as_one_group_and_as_several() -> None:
    groups = data.groups(NOW_S)
    for group in groups:
        rows.check_changes(group)
    rows.check_changes([c for group in groups for c in group])


def test_encode_writes_each_account_once_with_its_newest_row() -> None:
    group = [c for g in data.groups(NOW_S) for c in g]
    encoded = rows.encode(group)
    assert list(encoded.accounts) == ["acme", "team-b:1", "bat"]  # first touched first
    assert encoded.account_values() == [
        ("acme", 15, 0, 4, 6, None, 15, None, 0),
        ("team-b:1", 9, 0, 3, 4, None, 9, None, 0),
        ("bat", 3, 0, 2, 3, None, 3, None, 0),
    ]


def test_encode_keeps_only_the_live_grants_alive_at_the_end_and_deletes_the_rest() -> None:
    encoded = rows.encode([c for g in data.groups(NOW_S) for c in g])
    # acme's grant 2 was upserted twice, then used up: deleted, never written.
    assert sorted(encoded.live_grant_upserts) == [
        ("acme", 3, 40, 15, None, 15),
        ("bat", 1, 6, 3, None, 2),  # upserted twice in the group: the newest remaining
        ("team-b:1", 2, 20, 9, None, 9),
    ]
    assert sorted(encoded.live_grant_deletes) == [("acme", 1), ("acme", 2), ("team-b:1", 1)]


def test_encode_writes_entries_in_order_with_the_grant_id_of_grants() -> None:
    encoded = rows.encode(data.groups(NOW_S)[3])
    assert [(e[0], e[1], e[2], e[6]) for e in encoded.entries] == [
        ("team-b:1", 2, "expiration", None),
        ("team-b:1", 3, "grant", 2),
        ("acme", 5, "grant", 3),
    ]
    for values in encoded.entries:
        entry = rows.entry_of(*values[1:6], values[7])
        assert entry in data.ENTRIES[values[0]]
        assert rows.entry_of(*values[1:6], json.dumps(json.loads(values[7]))) == entry


def test_encode_writes_idempotency_records_by_scope() -> None:
    encoded = rows.encode(data.groups(NOW_S)[4])
    assert [(v[0], v[1], v[3]) for v in encoded.idempotency] == [("/batch", "b-1", 200)]


def test_a_change_without_entries_only_moves_its_row() -> None:
    """A change may carry no entries (only state): its ``next_sequence`` must not move."""
    row = AccountRow("a", clock=0, debt=0, next_grant_id=2, next_sequence=1)
    encoded = rows.encode([Change(row, upserted_live_grants=[LiveGrant(1, 10, 1)])])
    assert encoded.entries == []
    assert encoded.live_grant_upserts == [("a", 1, 10, 1, None, 0)]
    moved = AccountRow("a", clock=0, debt=0, next_grant_id=2, next_sequence=2)
    with pytest.raises(AssertionError, match="where the previous change's ended"):
        rows.check_changes([Change(row), Change(moved)])


def test_clocks_and_entry_times_never_go_back_within_a_group() -> None:
    first, second = data.groups(NOW_S)[0]
    with pytest.raises(AssertionError, match="clock went back"):
        rows.check_changes([second, Change(AccountRow("acme", 0, 0, 3, 3))])
    with pytest.raises(AssertionError):
        rows.check_changes([second, first])


def test_classes_and_the_debt_queue_are_kept_as_json_and_read_back() -> None:
    debts = (Debt("h100", 5), Debt(None, 3))
    row = AccountRow("a", clock=1, debt=8, next_grant_id=2, next_sequence=1, debts=debts)
    live = LiveGrant(1, 10, 4, ("a100", "h100"))
    encoded = rows.encode([Change(row, upserted_live_grants=[live])])
    assert encoded.account_values() == [("a", 1, 8, 2, 1, '[["h100",5],[null,3]]', 0, None, 0)]
    assert encoded.live_grant_upserts == [("a", 1, 10, 4, '["a100","h100"]', 0)]
    assert rows.debts_of(encoded.account_values()[0][5]) == debts
    assert rows.classes_of(encoded.live_grant_upserts[0][4]) == ("a100", "h100")
    assert rows.debts_of(None) == ()
    assert rows.classes_of(None) is None


def test_encode_ends_with_the_last_word_on_each_entry_and_live_grant() -> None:
    """A late write may bring a live grant back, restate an entry appended earlier in the
    group, or undo one: what is written is the end state of the group."""
    first = data.first_grant("a")  # entry 1, live grant 1
    gone = Change(AccountRow("a", 1, 0, 2, 2, watermark=1), removed_grant_ids=[1])
    back = Change(
        AccountRow("a", 1, 0, 2, 2, watermark=1),
        upserted_live_grants=[LiveGrant(1, 10, 3, granted_at=0)],
        restated=[GrantEntry(1, 0, 3, 0, 1, 5, 10, 0, 5, revision=1)],
    )
    encoded = rows.encode([first, gone, back])
    assert encoded.live_grant_upserts == [("a", 1, 10, 3, None, 0)]
    assert encoded.live_grant_deletes == []
    assert [(v[1], v[4], v[9]) for v in encoded.entries] == [(1, 3, 1)]  # still new: inserted
    assert encoded.restated_entries == []
    undone = Change(AccountRow("a", 1, 0, 2, 2, watermark=1), removed_sequences=[1])
    encoded = rows.encode([back, undone])
    assert encoded.entry_deletes == [("a", 1)]
    assert encoded.restated_entries == []


def test_a_checkpoint_is_kept_as_json_and_read_back() -> None:
    state = TrackerState(
        7, 3, 4, (LiveGrant(2, 9, 1, ("h100",), granted_at=5),), (Debt("a100", 3),)
    )
    row = AccountRow("a", 8, 3, 4, 1, (Debt("a100", 3),), watermark=7)
    encoded = rows.encode([Change(row, checkpoint=Checkpoint((7, 3), state))])
    [(account_id, timestamp, rank, text)] = encoded.checkpoints
    assert (account_id, timestamp, rank) == ("a", 7, 3)
    assert rows.checkpoint_of(timestamp, rank, text) == Checkpoint((7, 3), state)


_INTS = st.integers(min_value=0, max_value=2**63 - 1)
_CLASSES = st.none() | st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=3).map(tuple)
_ALLOCATIONS = st.lists(st.builds(Allocation, _INTS, _INTS, _INTS, _CLASSES), max_size=4).map(tuple)
_ENTRIES = st.one_of(
    st.builds(
        GrantEntry,
        _INTS,
        _INTS,
        _INTS,
        _INTS,
        grant_id=_INTS,
        amount=_INTS,
        expiry=_INTS,
        settled_debt=_INTS,
        retained=_INTS,
        name=st.none() | st.text(max_size=8),
        metadata=st.none() | st.dictionaries(st.text(max_size=4), st.text(max_size=4)),
        resources=_CLASSES,
    ),
    st.builds(
        ConsumptionEntry,
        _INTS,
        _INTS,
        _INTS,
        _INTS,
        amount=_INTS,
        consumed=_INTS,
        debt_added=_INTS,
        allocation=_ALLOCATIONS,
        resource=st.none() | st.text(min_size=1, max_size=8),
    ),
    st.builds(VoidEntry, _INTS, _INTS, _INTS, _INTS, _INTS, _INTS),
    st.builds(ExpirationEntry, _INTS, _INTS, _INTS, _INTS, _INTS, _INTS, _INTS, _CLASSES),
)


@given(_ENTRIES)
def test_the_details_column_is_byte_for_byte_the_json_of_the_details(entry: Entry) -> None:
    # The common shapes are formatted directly (the batch path writes one per operation):
    # the text must be exactly what json.dumps makes, as earlier releases wrote it.
    expected = json.dumps(rows._details(entry), separators=(",", ":"))
    assert rows.details_text(entry) == expected
    assert json.loads(rows.details_text(entry)) == rows._details(entry)


def test_the_checks_refuse_a_live_grant_named_twice_in_one_change() -> None:
    row = AccountRow("a", clock=1, debt=0, next_grant_id=3, next_sequence=1)
    live = LiveGrant(1, 10, 4)
    rows.check_changes([Change(row, upserted_live_grants=[live], removed_grant_ids=[2])])
    for named_twice in (
        Change(row, upserted_live_grants=[live, live]),
        Change(row, upserted_live_grants=[live], removed_grant_ids=[1]),
        Change(row, removed_grant_ids=[2, 2]),
    ):
        with pytest.raises(AssertionError, match="twice"):
            rows.check_changes([named_twice])
    with pytest.raises(AssertionError, match="no grant 3"):
        rows.check_changes([Change(row, removed_grant_ids=[3])])


def test_the_checks_refuse_a_lone_entry_naming_a_grant_not_made_and_two_at_one_place() -> None:
    row = AccountRow("a", clock=5, debt=0, next_grant_id=2, next_sequence=2)
    grant = GrantEntry(1, 5, 7, 0, grant_id=1, amount=7, expiry=9, settled_debt=0, retained=7)
    rows.check_changes([Change(row, entries=[grant])])
    unknown = GrantEntry(1, 5, 7, 0, grant_id=2, amount=7, expiry=9, settled_debt=0, retained=7)
    with pytest.raises(AssertionError, match="names grant 2"):
        rows.check_changes([Change(row, entries=[unknown])])
    late = GrantEntry(1, 6, 7, 0, grant_id=1, amount=7, expiry=9, settled_debt=0, retained=7)
    with pytest.raises(AssertionError, match="after the clock"):
        rows.check_changes([Change(row, entries=[late])])
    # Two expirations of one grant at one timestamp would share a position.
    two = AccountRow("a", clock=5, debt=0, next_grant_id=2, next_sequence=3)
    twice: list[Entry] = [
        ExpirationEntry(s, 5, 0, 0, grant_id=1, expiry=5, amount=1) for s in (1, 2)
    ]
    with pytest.raises(AssertionError, match="two entries at"):
        rows.check_changes([Change(two, entries=twice)])
