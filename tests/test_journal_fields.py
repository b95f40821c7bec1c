"""The journal builds receipts, entries and changes with positional arguments (keyword
arguments to a class cost a dict per call, on every write of every batch). A swap of two
fields of one type would pass the type checker, so this holds each field to what it must be,
over random writes on random accounts (classes, debts, expirations, late writes within a
window): every field is tied to the write's input, the entry, the account after it, or an
identity of the ledger (a grant's credits settle debt or are retained; a consumption's are
drawn or become debt), so a swap of two fields breaks one of these for most values."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain import LedgerError
from app.service import journal
from app.service.journal import Label, new_account
from app.service.limits import Limits
from app.service.results import ConsumptionReceipt, GrantReceipt
from app.storage.base import Change, ConsumptionEntry, Entry, GrantEntry

CLASSES = ("H100", "A100", "L4")


def _check_change(change: Change, account_id: str, state: journal.AccountState) -> None:
    a = change.account
    assert a.account_id == account_id
    assert a.clock == state.tracker.clock
    assert a.next_sequence == state.next_sequence
    assert a.watermark == state.timeline.watermark
    assert a.lateness_window == state.window
    assert change.idempotency is None
    assert change.event is None
    assert all(isinstance(e, Entry) for e in (*change.entries, *change.restated))
    assert all(type(g).__name__ == "LiveGrant" for g in change.upserted_live_grants)
    assert all(type(i) is int for i in (*change.removed_grant_ids, *change.removed_sequences))
    assert change.checkpoint is None or type(change.checkpoint).__name__ == "Checkpoint"


def _own(change: Change, sequence: int) -> Entry:
    [entry] = [e for e in change.entries if e.sequence == sequence]
    return entry


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), window=st.sampled_from([0, 0, 5, 40]))
def test_every_field_holds_what_it_names(seed: int, window: int) -> None:
    rng = random.Random(seed)
    account_id = f"acct-{seed % 97}"
    state = new_account(account_id, Limits(lateness_window=window))
    clock = 1
    for step in range(40):
        late = window and state.tracker.clock > 1 and rng.random() < 0.3
        timestamp = (
            rng.randint(max(0, state.timeline.watermark), state.tracker.clock)
            if late
            else clock + rng.randint(0, 7)
        )
        clock = max(clock, timestamp)
        resources = sorted(rng.sample(CLASSES, rng.randint(1, 2))) if rng.random() < 0.4 else None
        try:
            if rng.random() < 0.5:
                amount = rng.randint(1, 500)
                expiry = timestamp + rng.randint(1, 60)
                label = Label(f"n{step}", {"k": str(step)}) if rng.random() < 0.5 else Label()
                change, g = journal.grant(state, amount, timestamp, expiry, None, label, resources)
                assert isinstance(g, GrantReceipt)
                entry = _own(change, g.sequence)
                assert isinstance(entry, GrantEntry)
                assert (g.account_id, g.timestamp, g.amount, g.expiry) == (
                    account_id,
                    timestamp,
                    amount,
                    expiry,
                )
                assert (g.name, g.metadata) == (label.name, label.metadata)
                assert g.resources == resources
                assert (entry.timestamp, entry.amount, entry.expiry) == (timestamp, amount, expiry)
                assert entry.resources == (None if resources is None else tuple(resources))
                assert (entry.name, entry.metadata) == (label.name, label.metadata)
                assert g.grant_id == entry.grant_id
                assert g.grant_id < state.tracker.next_grant_id
                assert (g.settled_debt, g.retained) == (entry.settled_debt, entry.retained)
                assert g.settled_debt + g.retained == amount
                receipt: GrantReceipt | ConsumptionReceipt = g
            else:
                amount = rng.randint(1, 300)
                resource = rng.choice(CLASSES) if rng.random() < 0.5 else None
                change, c = journal.consume(state, amount, timestamp, resource)
                assert isinstance(c, ConsumptionReceipt)
                entry = _own(change, c.sequence)
                assert isinstance(entry, ConsumptionEntry)
                assert (c.account_id, c.timestamp, c.amount, c.resource) == (
                    account_id,
                    timestamp,
                    amount,
                    resource,
                )
                assert (entry.timestamp, entry.amount, entry.resource) == (
                    timestamp,
                    amount,
                    resource,
                )
                assert (c.consumed, c.debt_added) == (entry.consumed, entry.debt_added)
                assert c.consumed + c.debt_added == amount
                assert c.allocation == entry.allocation
                assert sum(part.amount for part in c.allocation) == c.consumed
                receipt = c
        except LedgerError:
            continue
        assert receipt.sequence == entry.sequence
        assert receipt.balance == receipt.available - receipt.debt
        assert receipt.watermark == state.timeline.watermark
        # Restated: later entries whose effect the write changed or undid (a changed balance
        # after alone rewrites the row, and does not count).
        assert 0 <= receipt.restated <= len(change.restated) + len(change.removed_sequences)
        if not late:  # in order: the totals after the entry are the account's now
            assert (receipt.available, receipt.debt) == (entry.available, entry.debt)
            assert (receipt.available, receipt.debt) == (
                state.tracker.available,
                state.tracker.debt,
            )
            assert change.entries[-1] is entry
            assert receipt.restated == 0
        assert entry.revision == 0
        _check_change(change, account_id, state)
