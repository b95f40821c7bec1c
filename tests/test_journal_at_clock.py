"""Most writes take the timeline's lean path (``AccountTimeline.grant_at_clock`` and
``consume_at_clock``: in order, final at once, nothing expiring), which makes a grant's or a
consumption's entry, change and receipt from the tracker's result, without the ledger lines
and outcome ``write`` makes. It must be indistinguishable from ``write``: here two copies of
each random account take the same random writes (grants and consumptions with and without
classes, debts, expirations, voids, late writes within a window, live grant limits), one as
the journal makes them and one with the lean path turned off, and every answer, refusal,
change and state after must be the same."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from functools import partial
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain import LedgerError
from app.domain.timeline import AccountTimeline
from app.service import journal
from app.service.errors import ServiceError
from app.service.journal import AccountState, Label, new_account
from app.service.limits import Limits
from app.storage.base import Change, GrantEntry, VoidEntry

CLASSES = ("H100", "A100", "L4")


@contextmanager
def _lean_path_off() -> Iterator[None]:
    with (
        mock.patch.object(AccountTimeline, "grant_at_clock", return_value=None),
        mock.patch.object(AccountTimeline, "consume_at_clock", return_value=None),
    ):
        yield


@contextmanager
def _counting(taken: Counter[bool]) -> Iterator[None]:
    grant_at_clock = AccountTimeline.grant_at_clock
    consume_at_clock = AccountTimeline.consume_at_clock

    def grant(self: AccountTimeline, *args: Any, **kwargs: Any) -> Any:
        answer = grant_at_clock(self, *args, **kwargs)
        taken[answer is not None] += 1
        return answer

    def consume(self: AccountTimeline, *args: Any, **kwargs: Any) -> Any:
        answer = consume_at_clock(self, *args, **kwargs)
        taken[answer is not None] += 1
        return answer

    with (
        mock.patch.object(AccountTimeline, "grant_at_clock", grant),
        mock.patch.object(AccountTimeline, "consume_at_clock", consume),
    ):
        yield


def _plain(change: Change) -> dict[str, Any]:
    """A change's fields, sequences as lists (a path may give a tuple where the other gives a
    list: the same rows)."""
    out: dict[str, Any] = {}
    for f in fields(change):
        value = getattr(change, f.name)
        out[f.name] = list(value) if isinstance(value, tuple | list) else value
    return out


def _state(account: AccountState) -> tuple[Any, ...]:
    timeline = account.timeline
    timeline.check_invariants()
    return (
        timeline.current.state(),
        timeline.final.state(),
        timeline.next_sequence,
        timeline.clock,
        timeline.watermark,
        timeline.folded_since_checkpoint,
        timeline.provisional_count,
        timeline.lines(),
    )


def _grant(account: AccountState, args: tuple[Any, ...]) -> tuple[Change, Any]:
    return journal.grant(account, *args)


def _consume(account: AccountState, args: tuple[Any, ...]) -> tuple[Change, Any]:
    return journal.consume(account, *args)


def _void(account: AccountState, args: tuple[Any, ...]) -> tuple[Change, Any]:
    return journal.void(account, *args)


def _outcome(
    call: Callable[[AccountState], tuple[Change, Any]], account: AccountState
) -> tuple[str, Any]:
    try:
        change, receipt = call(account)
    except (LedgerError, ServiceError) as exc:
        return "refused", (type(exc), str(exc))
    return "applied", (_plain(change), receipt)


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    window=st.sampled_from([0, 0, 0, 5, 40]),
    max_live=st.sampled_from([10_000, 3]),
)
def test_the_lean_path_answers_and_changes_what_write_does(
    seed: int, window: int, max_live: int
) -> None:
    rng = random.Random(seed)
    limits = Limits(lateness_window=window, max_live_grants_per_account=max_live)
    lean = new_account("acct", limits)
    full = new_account("acct", limits)
    grants: dict[int, GrantEntry] = {}
    voids: dict[int, VoidEntry] = {}
    clock = 1
    taken: Counter[bool] = Counter()  # the lean path's calls, by whether it answered
    for step in range(60):
        late = window and lean.tracker.clock > 1 and rng.random() < 0.25
        if late:
            timestamp = rng.randint(max(0, lean.timeline.watermark), lean.tracker.clock)
        else:
            timestamp = clock + rng.choice((0, 0, 1, 3, 20))
        clock = max(clock, timestamp)
        kind = rng.random()
        call: Callable[[AccountState], tuple[Change, Any]]
        if kind < 0.45:
            expiry = timestamp + rng.choice((1, 2, 10, 50, 10**6))
            classes = sorted(rng.sample(CLASSES, rng.randint(1, 2))) if rng.random() < 0.3 else None
            label = Label(f"n{step}", {"k": str(step)}) if rng.random() < 0.3 else Label()
            room = rng.choice((None, None, 0, 1))
            call = partial(
                _grant, args=(rng.randint(1, 400), timestamp, expiry, room, label, classes)
            )
        elif kind < 0.9:
            resource = rng.choice(CLASSES) if rng.random() < 0.3 else None
            call = partial(_consume, args=(rng.randint(1, 300), timestamp, resource))
        else:
            grant_id = rng.randint(1, max(1, lean.tracker.next_grant_id))
            found = (grants.get(grant_id), voids.get(grant_id))
            call = partial(_void, args=(grant_id, timestamp, *found))
        with _lean_path_off():
            expected = _outcome(call, full)
        with _counting(taken):
            got = _outcome(call, lean)
        assert got == expected, f"step {step}"
        assert _state(lean) == _state(full), f"step {step}"
        if got[0] == "applied":
            for entry in got[1][0]["entries"]:
                if isinstance(entry, GrantEntry):
                    grants[entry.grant_id] = entry
                elif isinstance(entry, VoidEntry):
                    voids[entry.grant_id] = entry
    # With a window of 0 the lean path answered (the test would hold nothing if it never
    # did); with another, writes stay provisional for a while and take ``write``.
    assert window > 0 or taken[True] > 0


def test_a_grant_that_expires_another_takes_write() -> None:
    """A write at or past a live grant's expiry makes expiration lines: the lean path leaves
    it to ``write`` (and changes nothing), which makes them."""
    account = new_account("acct", Limits())
    journal.grant(account, 10, 1, 5, None)
    assert account.timeline.grant_at_clock(3, 5, 50, None) is None
    assert account.timeline.consume_at_clock(3, 5) is None
    assert account.next_sequence == 2
    change, receipt = journal.grant(account, 3, 5, 50, None)
    assert [e.kind for e in change.entries] == ["expiration", "grant"]
    assert receipt.available == 3


def test_a_late_write_takes_write() -> None:
    account = new_account("acct", Limits(lateness_window=10))
    journal.grant(account, 10, 20, 100, None)
    assert account.timeline.consume_at_clock(3, 15) is None  # behind the clock
    assert account.timeline.consume_at_clock(3, 20) is None  # provisional: window > 0
    _, receipt = journal.consume(account, 3, 15)
    assert receipt.restated == 1
    assert receipt.watermark == 10
