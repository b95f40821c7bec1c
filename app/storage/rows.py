"""Changes to rows, once for every backend that has rows (sqlite, postgres); and the checks
every backend runs on a change before it writes anything.

The schema is one schema: both databases have the tables and columns below, with the same
names and meanings (each in its own types: ``details`` is TEXT in SQLite and jsonb in
PostgreSQL). What only one backend needs is listed in ``BACKEND_ONLY_COLUMNS`` with why.

Live grants of a group are written as every surviving upsert, then every delete, whatever
order the changes made them in. That is the end state of applying the changes one by one,
because ``encode`` keeps only the last change to each live grant (a late write can bring a
removed one back: then its upsert is what survives). So a live grant upserted several times
is written once with its newest ``remaining``, and one upserted and then removed within the
group is only deleted.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from app.domain import MAX_VALUE, Allocation, Debt, LiveGrant, TrackerState
from app.storage.base import (
    AccountRow,
    Change,
    Checkpoint,
    ConsumptionEntry,
    Entry,
    ExpirationEntry,
    GrantEntry,
    VoidEntry,
    position_of,
    rank_of,
)

ACCOUNT_COLUMNS: Final = (
    "account_id",
    "clock",
    "debt",
    "next_grant_id",
    "next_sequence",
    "debts",  # JSON [[class or null, amount], ...]; NULL: none, or all of no class
    "watermark",  # SPEC section 6: writes at or before it are final
    "lateness_window",  # the account's own window; NULL: the service's setting
    "folded_since_checkpoint",
)
LIVE_GRANT_COLUMNS: Final = (
    "account_id",
    "grant_id",
    "expiry",
    "remaining",
    "resources",  # JSON list of classes; NULL: unrestricted
    "granted_at",  # the grant's timestamp: ties at one expiry are drawn in effective order
)
ENTRY_COLUMNS: Final = (
    "account_id",
    "sequence",
    "kind",
    "timestamp",
    "available",
    "debt",
    # The grant's id on grant and void entries (indexed for each kind: a grant and whether
    # it was voided are looked up by it).
    "grant_id",
    "details",
    "rank",  # effective order is (timestamp, rank): see app.storage.base.RANK_OF_EXPIRATIONS
    "revision",  # +1 each time a late write restates the entry
)
CHECKPOINT_COLUMNS: Final = (
    "account_id",
    "timestamp",  # the position of the last write the checkpoint includes
    "rank",
    "state",  # JSON, see state_text
)
IDEMPOTENCY_COLUMNS: Final = (
    "scope",
    "key",
    "fingerprint",
    "status_code",
    "body",
    "created_at_s",
)
# Usage-stream lines applied (POST /v1/events), by client id per account: see EventRecord.
EVENT_ID_COLUMNS: Final = (
    "account_id",
    "event_id",
    "fingerprint",
    "sequence",  # the ledger entry the line made
    "grant_id",  # the grant it made or voided; NULL for a consumption
    "created_at_s",
)
MIGRATION_COLUMNS: Final = ("version", "applied_at")

# Every shared table and its columns, in order.
SHARED_TABLES: Final[dict[str, tuple[str, ...]]] = {
    "accounts": ACCOUNT_COLUMNS,
    "live_grants": LIVE_GRANT_COLUMNS[1:],  # and its account: see BACKEND_ONLY_COLUMNS
    "entries": ENTRY_COLUMNS[1:],  # and its account: see BACKEND_ONLY_COLUMNS
    "checkpoints": CHECKPOINT_COLUMNS,
    "idempotency": IDEMPOTENCY_COLUMNS,
    "event_ids": EVENT_ID_COLUMNS,
    "schema_migrations": MIGRATION_COLUMNS,
}
# What one backend has and the other does not, and why.
BACKEND_ONLY_COLUMNS: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    "postgres": {
        # Several processes share the database: ``version`` tells a process its cached
        # tracker is stale; ``available`` answers a balance read from the row alone.
        "accounts": ("available", "version"),
        "entries": ("account_id",),
        "live_grants": ("account_id",),
        # The account limit, counted in the database (creation is serialised on this row).
        "account_count": ("only_row", "n"),
    },
    "sqlite": {
        # ``schema_version`` as the release before versioned migrations wrote it, kept equal
        # to the newest migration: that release refuses a file whose value is not 1, rather
        # than writing into a schema it does not know.
        "meta": ("key", "value"),
        # Entries and live grants name their account by a number the account's row holds
        # (given once, never changed): an integer key is cheaper than text for SQLite to
        # compare and store in the tables and indexes every write extends (migration 7).
        "accounts": ("number",),
        "entries": ("account",),
        "live_grants": ("account",),
    },
}

ENTRY_KINDS: Final = frozenset({"grant", "consumption", "expiration", "void"})

EntryValues = tuple[str, int, str, int, int, int, int | None, str, int, int]
LiveGrantValues = tuple[str, int, int, int, str | None, int]
CheckpointValues = tuple[str, int, int, str]
AccountValues = tuple[str, int, int, int, int, str | None, int, int | None, int]
IdempotencyValues = tuple[str, str, str, int, bytes, float]
EventIdValues = tuple[str, str, str, int, int | None, float]

# json.dumps(..., separators=...) builds an encoder per call: one, shared (it keeps no state).
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"))


@dataclass(slots=True)
class Rows:
    """The rows a group of changes writes, in ``*_COLUMNS`` order."""

    # The newest row of each account the group touched, in the order first touched.
    accounts: dict[str, AccountRow] = field(default_factory=dict)
    entries: list[EntryValues] = field(default_factory=list)  # new: inserted
    # Written over any entry of the same (account_id, sequence): restated by a late write.
    restated_entries: list[EntryValues] = field(default_factory=list)
    entry_deletes: list[tuple[str, int]] = field(default_factory=list)
    live_grant_upserts: list[LiveGrantValues] = field(default_factory=list)
    live_grant_deletes: list[tuple[str, int]] = field(default_factory=list)
    idempotency: list[IdempotencyValues] = field(default_factory=list)
    event_ids: list[EventIdValues] = field(default_factory=list)
    checkpoints: list[CheckpointValues] = field(default_factory=list)

    def account_values(self) -> list[AccountValues]:
        return [account_values(a) for a in self.accounts.values()]


def account_row(
    account_id: str,
    clock: int,
    debt: int,
    next_grant_id: int,
    next_sequence: int,
    debts: str | None,
    watermark: int,
    lateness_window: int | None,
    folded_since_checkpoint: int,
) -> AccountRow:
    """An account row from its values, in ``ACCOUNT_COLUMNS`` order."""
    return AccountRow(
        account_id,
        clock,
        debt,
        next_grant_id,
        next_sequence,
        debts_of(debts),
        watermark,
        lateness_window,
        folded_since_checkpoint,
    )


def account_values(a: AccountRow) -> AccountValues:
    return (
        a.account_id,
        a.clock,
        a.debt,
        a.next_grant_id,
        a.next_sequence,
        debts_text(a.debts),
        a.watermark,
        a.lateness_window,
        a.folded_since_checkpoint,
    )


def encode(changes: Sequence[Change]) -> Rows:
    """Check ``changes`` (see ``check_changes``) and turn them into rows."""
    check_changes(changes)
    rows = Rows()
    # The end state of each live grant and entry the group touches (the last change to one
    # wins): None is a delete. A late write can bring a live grant back (a consumption now
    # paid by an earlier grant leaves another one credits) and restate an entry twice.
    live: dict[tuple[str, int], LiveGrantValues | None] = {}
    # (is new, entry) or None for a delete. Only a group with late writes needs it: new
    # entries alone are distinct (checked above) and are appended as they come.
    entries: dict[tuple[str, int], tuple[bool, Entry] | None] = {}
    in_order = not any(c.restated or c.removed_sequences for c in changes)
    accounts = rows.accounts
    append_entry = rows.entries.append
    # This runs once per change of every group: what only late writes have (restated and
    # removed entries) is looked at only in a group that has some.
    for change in changes:
        account = change.account
        account_id = account.account_id
        accounts[account_id] = account
        if in_order:
            for e in change.entries:
                append_entry(_entry_values(account_id, e))
        else:
            for e in change.entries:
                entries[(account_id, e.sequence)] = (True, e)
            for e in change.restated:
                earlier = entries.get((account_id, e.sequence))
                is_new = earlier is not None and earlier[0]  # appended earlier in the group
                if is_new:
                    assert earlier is not None  # for the type checker
                    e = _with_label_of(earlier[1], e)
                entries[(account_id, e.sequence)] = (is_new, e)
            for sequence in change.removed_sequences:
                entries[(account_id, sequence)] = None
        for b in change.upserted_live_grants:
            resources = b.resources
            live[(account_id, b.grant_id)] = (
                account_id,
                b.grant_id,
                b.expiry,
                b.remaining,
                None if resources is None else classes_text(resources),
                b.granted_at,
            )
        if change.removed_grant_ids:
            for grant_id in change.removed_grant_ids:
                live[(account_id, grant_id)] = None
        if change.checkpoint is not None:
            timestamp, rank = change.checkpoint.position
            rows.checkpoints.append(
                (account_id, timestamp, rank, state_text(change.checkpoint.state))
            )
        r = change.idempotency
        if r is not None:
            assert r.body is not None  # checked; for the type checker
            rows.idempotency.append(
                (r.scope, r.key, r.fingerprint, r.status_code, r.body, r.created_at_s)
            )
        ev = change.event
        if ev is not None:
            rows.event_ids.append(
                (
                    ev.account_id,
                    ev.event_id,
                    ev.fingerprint,
                    ev.sequence,
                    ev.grant_id,
                    ev.created_at_s,
                )
            )
    for key, values in live.items():
        if values is None:
            rows.live_grant_deletes.append(key)
        else:
            rows.live_grant_upserts.append(values)
    for key, entry in entries.items():
        if entry is None:
            rows.entry_deletes.append(key)
        elif entry[0]:
            rows.entries.append(_entry_values(key[0], entry[1]))
        else:
            rows.restated_entries.append(_entry_values(key[0], entry[1]))
    return rows


def _with_label_of(new: Entry, restated: Entry) -> Entry:
    """A restatement of a grant entry new in the same group, with the new entry's label: a
    restatement carries a grant's effect, never its label (SPEC section 7), and here it is
    written as the entry's insert, with no stored row for the label to survive in (a
    restatement of a stored row merges into it: ``details`` keeps what it does not name)."""
    if (
        type(new) is GrantEntry
        and type(restated) is GrantEntry
        and restated.name is None
        and restated.metadata is None
    ):
        return dataclasses.replace(restated, name=new.name, metadata=new.metadata)
    return restated


def _entry_values(account_id: str, e: Entry) -> EntryValues:
    return (
        account_id,
        e.sequence,
        e.kind,
        e.timestamp,
        e.available,
        e.debt,
        e.grant_id if type(e) is GrantEntry or type(e) is VoidEntry else None,  # final classes
        details_text(e),
        rank_of(e),
        e.revision,
    )


def check_changes(changes: Sequence[Change]) -> None:
    """Assert what must hold of a group of changes before any of it is written (the other
    half of the checks ``GPUCreditTracker.from_state`` makes of what it reads back).

    Per change: the account row is in range (watermark <= clock); its new entries are
    contiguous and end just before its ``next_sequence``, its restated and removed ones come
    before them; no two entries share a position; none passes its clock; each upserted live
    grant belongs to a grant already made, has credits left and expires after the clock; no
    live grant is both upserted and removed, or named twice; a checkpoint lies at or before
    the watermark; an idempotency record carries its body; an event record names one of the
    change's new entries. Across the group, per account, in
    order: the new entries go on where the previous change's ended, and the clock, the
    watermark and the next grant id never go back.
    """
    newest: dict[str, AccountRow] = {}
    for change in changes:
        a = change.account
        account_id = a.account_id
        assert account_id, "a change names its account"
        assert 0 <= a.clock <= MAX_VALUE, f"{account_id}: clock {a.clock} off range"
        assert 0 <= a.debt <= MAX_VALUE, f"{account_id}: debt {a.debt} off range"
        assert a.next_grant_id >= 1, f"{account_id}: grant ids start at 1"
        assert a.next_sequence >= 1, f"{account_id}: entry sequences start at 1"
        assert 0 <= a.watermark <= a.clock, f"{account_id}: watermark {a.watermark} off the clock"
        assert a.lateness_window is None or a.lateness_window >= 0, f"{account_id}: window < 0"
        assert a.folded_since_checkpoint >= 0, f"{account_id}: folded writes < 0"
        before = newest.get(account_id)
        if before is not None:
            assert a.clock >= before.clock, f"{account_id}: the clock went back"
            assert a.watermark >= before.watermark, f"{account_id}: the watermark went back"
            assert a.next_grant_id >= before.next_grant_id, f"{account_id}: next grant id went back"
            assert a.next_sequence == before.next_sequence + len(change.entries), (
                f"{account_id}: entries do not go on where the previous change's ended"
            )
        newest[account_id] = a
        _check_entries(change)
        _check_live_grants(change)
        checkpoint = change.checkpoint
        if checkpoint is not None:
            timestamp = checkpoint.position[0]
            assert checkpoint.state.clock <= timestamp <= a.watermark, (
                f"{account_id}: checkpoint at {timestamp} is not final (watermark {a.watermark})"
            )
        r = change.idempotency
        if r is not None:
            assert r.scope, "an idempotency record has a scope"
            assert r.key, "an idempotency record has a key"
            assert r.body is not None, "an idempotency record is written with its body"
            assert 100 <= r.status_code <= 599, f"status {r.status_code} is not HTTP"
        ev = change.event
        if ev is not None:
            assert ev.account_id == account_id, "an event record is its change's account's"
            assert ev.event_id, "an event record has an id"
            assert any(e.sequence == ev.sequence for e in change.entries), (
                f"{account_id}: event {ev.event_id!r} names entry {ev.sequence}, not its own"
            )


def _check_entries(change: Change) -> None:
    a = change.account
    account_id = a.account_id
    entries = change.entries
    first_new = a.next_sequence - len(entries)
    assert first_new >= 1, f"{account_id}: entries end after next_sequence {a.next_sequence}"
    for i, e in enumerate(entries):
        assert e.sequence == first_new + i, f"{account_id}: entry {e.sequence} is not contiguous"
    if len(entries) == 1 and not change.restated:
        # The common change (one write in order that expired nothing): no position to share.
        _check_entry(a, entries[0])
    else:
        positions: set[tuple[int, int]] = set()
        for e in (*entries, *change.restated):
            position = position_of(e)
            # Ledger pages and as-of reads go by position: no two entries share one.
            assert position not in positions, f"{account_id}: two entries at {position}"
            positions.add(position)
            _check_entry(a, e)
    restated: set[int] = set()
    for e in change.restated:
        assert 1 <= e.sequence < first_new, f"{account_id}: restated entry {e.sequence} is new"
        assert e.sequence not in restated, f"{account_id}: entry {e.sequence} restated twice"
        restated.add(e.sequence)
    for sequence in change.removed_sequences:
        assert sequence not in restated, f"{account_id}: entry {sequence} restated and removed"
        assert 1 <= sequence < first_new, f"{account_id}: no entry {sequence} to remove"


def _check_entry(a: AccountRow, e: Entry) -> None:
    account_id = a.account_id
    assert e.kind in ENTRY_KINDS, f"{account_id}: unknown entry kind {e.kind!r}"
    assert e.timestamp <= a.clock, f"{account_id}: entry {e.sequence} is after the clock"
    # In range: a value past 2^63 would reach SQLite as a REAL, not fail.
    assert 0 <= e.available <= MAX_VALUE, f"{account_id}: entry {e.sequence} available off range"
    assert 0 <= e.debt <= MAX_VALUE, f"{account_id}: entry {e.sequence} debt off range"
    assert e.revision >= 0, f"{account_id}: entry {e.sequence} revision < 0"
    if not isinstance(e, ConsumptionEntry):  # the others name a grant
        assert 1 <= e.grant_id < a.next_grant_id, (
            f"{account_id}: {e.kind} entry {e.sequence} names grant {e.grant_id}"
        )


def _check_live_grants(change: Change) -> None:
    a = change.account
    account_id = a.account_id
    upserted = change.upserted_live_grants
    removed = change.removed_grant_ids
    for b in upserted:
        assert 1 <= b.grant_id < a.next_grant_id, f"{account_id}: no grant {b.grant_id}"
        assert b.remaining > 0, f"{account_id}: live grant {b.grant_id} has nothing left"
        assert b.expiry > a.clock, f"{account_id}: live grant {b.grant_id} expired at {b.expiry}"
    for grant_id in removed:
        assert 1 <= grant_id < a.next_grant_id, f"{account_id}: no grant {grant_id}"
    if len(upserted) + len(removed) > 1:  # most changes name one live grant or none
        named = [b.grant_id for b in upserted]
        named.extend(removed)
        assert len(set(named)) == len(named), (
            f"{account_id}: a live grant upserted or removed twice, or both: {sorted(named)}"
        )


# The common shapes of ``details`` (see details_text).
_GRANT_DETAILS: Final = '{"grant_id":%s,"amount":%s,"expiry":%s,"settled_debt":%s,"retained":%s}'
_ALLOCATION_DETAILS: Final = '{"grant_id":%s,"expiry":%s,"amount":%s}'
_CONSUMPTION_DETAILS: Final = '{"amount":%s,"consumed":%s,"debt_added":%s,"allocation":[%s]}'


def details_text(e: Entry) -> str:
    """The ``details`` column of an entry: ``_details`` as compact JSON. The common shapes
    (no label, no classes: only integers) are formatted directly, byte for byte what
    ``json.dumps`` makes of them (tests/test_storage_rows.py holds the two together); this
    runs once per entry written, on the batch path. ``%`` formatting, not an f-string's
    ``:d`` (half the time); ``%s``, not ``%d``, which would write a float cut to an integer
    without a word (none can come: the tracker's values are integers)."""
    if isinstance(e, GrantEntry):  # final classes: isinstance is an exact test
        if e.name is None and e.metadata is None and e.resources is None:
            return _GRANT_DETAILS % (e.grant_id, e.amount, e.expiry, e.settled_debt, e.retained)
    elif isinstance(e, ConsumptionEntry) and e.resource is None:
        parts = []
        for a in e.allocation:
            if a.resources is not None:
                break
            parts.append(_ALLOCATION_DETAILS % (a.grant_id, a.expiry, a.amount))
        else:
            return _CONSUMPTION_DETAILS % (e.amount, e.consumed, e.debt_added, ",".join(parts))
    return _COMPACT.encode(_details(e))


def _details(e: Entry) -> dict[str, Any]:
    """The kind-specific members of an entry, as the ``details`` column keeps them."""
    if isinstance(e, GrantEntry):
        details: dict[str, Any] = {
            "grant_id": e.grant_id,
            "amount": e.amount,
            "expiry": e.expiry,
            "settled_debt": e.settled_debt,
            "retained": e.retained,
        }
        # Only when given: an unlabelled grant's row is byte for byte what earlier releases
        # wrote, and their rows read back as unlabelled.
        if e.name is not None:
            details["name"] = e.name
        if e.metadata is not None:
            details["metadata"] = e.metadata
        if e.resources is not None:
            details["resources"] = list(e.resources)
        return details
    if isinstance(e, ConsumptionEntry):
        consumption: dict[str, Any] = {
            "amount": e.amount,
            "consumed": e.consumed,
            "debt_added": e.debt_added,
            "allocation": [_allocation(d) for d in e.allocation],
        }
        if e.resource is not None:
            consumption["resource"] = e.resource
        return consumption
    if isinstance(e, VoidEntry):
        return {"grant_id": e.grant_id, "amount": e.amount}
    expiration: dict[str, Any] = {"grant_id": e.grant_id, "expiry": e.expiry, "amount": e.amount}
    if e.resources is not None:
        expiration["resources"] = list(e.resources)
    return expiration


def _allocation(a: Allocation) -> dict[str, Any]:
    # Classes only when the grant had some: rows of unrestricted grants read as before.
    part: dict[str, Any] = {"grant_id": a.grant_id, "expiry": a.expiry, "amount": a.amount}
    if a.resources is not None:
        part["resources"] = list(a.resources)
    return part


def classes_text(resources: tuple[str, ...] | None) -> str | None:
    """A class list as its column keeps it (JSON; NULL: unrestricted)."""
    return None if resources is None else _COMPACT.encode(list(resources))


def classes_of(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(json.loads(text))


def debts_text(debts: tuple[Debt, ...]) -> str | None:
    """The debt queue as its column keeps it (JSON; NULL: none, or all of no class)."""
    if not debts:
        return None
    return _COMPACT.encode([[d.resource, d.amount] for d in debts])


def debts_of(text: str | None) -> tuple[Debt, ...]:
    return () if text is None else tuple(Debt(r, a) for r, a in json.loads(text))


def state_text(state: TrackerState) -> str:
    """A checkpoint's tracker state as its column keeps it (JSON)."""
    return json.dumps(
        {
            "clock": state.clock,
            "debt": state.debt,
            "next_grant_id": state.next_grant_id,
            "live_grants": [
                [g.grant_id, g.expiry, g.remaining, _listed(g.resources), g.granted_at]
                for g in state.live_grants
            ],
            "debts": [[d.resource, d.amount] for d in state.debts],
        },
        separators=(",", ":"),
    )


def state_of(text: str) -> TrackerState:
    d = json.loads(text)
    return TrackerState(
        d["clock"],
        d["debt"],
        d["next_grant_id"],
        tuple(
            LiveGrant(g, expiry, remaining, None if r is None else tuple(r), granted_at)
            for g, expiry, remaining, r, granted_at in d["live_grants"]
        ),
        tuple(Debt(r, a) for r, a in d["debts"]),
    )


def checkpoint_of(timestamp: int, rank: int, state: str) -> Checkpoint:
    return Checkpoint((timestamp, rank), state_of(state))


def _listed(resources: tuple[str, ...] | None) -> list[str] | None:
    return None if resources is None else list(resources)


def _classes(d: dict[str, Any], member: str) -> tuple[str, ...] | None:
    found = d.get(member)
    return None if found is None else tuple(found)


def entry_of(
    sequence: int,
    kind: str,
    timestamp: int,
    available: int,
    debt: int,
    details: str,
    revision: int = 0,
) -> Entry:
    """An entry from its row (``ENTRY_COLUMNS`` without account_id, grant_id and rank)."""
    d = json.loads(details)
    if kind == "grant":
        return GrantEntry(
            sequence,
            timestamp,
            available,
            debt,
            d["grant_id"],
            d["amount"],
            d["expiry"],
            d["settled_debt"],
            d["retained"],
            d.get("name"),
            d.get("metadata"),
            _classes(d, "resources"),
            revision,
        )
    if kind == "consumption":
        allocation = tuple(
            Allocation(a["grant_id"], a["expiry"], a["amount"], _classes(a, "resources"))
            for a in d["allocation"]
        )
        return ConsumptionEntry(
            sequence,
            timestamp,
            available,
            debt,
            d["amount"],
            d["consumed"],
            d["debt_added"],
            allocation,
            d.get("resource"),
            revision,
        )
    if kind == "void":
        return VoidEntry(sequence, timestamp, available, debt, d["grant_id"], d["amount"], revision)
    assert kind == "expiration", f"unknown entry kind {kind!r}"
    return ExpirationEntry(
        sequence,
        timestamp,
        available,
        debt,
        d["grant_id"],
        d["expiry"],
        d["amount"],
        _classes(d, "resources"),
        revision,
    )


def columns(names: Sequence[str]) -> str:
    """A column list for SQL text."""
    return ", ".join(names)
