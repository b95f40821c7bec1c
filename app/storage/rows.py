"""Changes to rows, once for every backend that has rows (sqlite, postgres); and the checks
every backend runs on a change before it writes anything.

The schema is one schema: both databases have the tables and columns below, with the same
names and meanings (each in its own types: ``details`` is TEXT in SQLite and jsonb in
PostgreSQL). What only one backend needs is listed in ``BACKEND_ONLY_COLUMNS`` with why.

Live grants of a group are written as every surviving upsert, then every delete, whatever
order the changes made them in. That is the end state of applying the changes one by one,
because a live grant, once removed (used up or expired), never comes back: ``check_changes``
asserts it. So a live grant upserted several times is written once with its newest
``remaining``, and one upserted and then removed within the group is only deleted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from app.domain import Allocation, Debt
from app.storage.base import (
    AccountRow,
    Change,
    ConsumptionEntry,
    Entry,
    ExpirationEntry,
    GrantEntry,
    VoidEntry,
)

ACCOUNT_COLUMNS: Final = (
    "account_id",
    "clock",
    "debt",
    "next_grant_id",
    "next_sequence",
    "debts",  # JSON [[class or null, amount], ...]; NULL: none, or all of no class
)
LIVE_GRANT_COLUMNS: Final = (
    "account_id",
    "grant_id",
    "expiry",
    "remaining",
    "resources",  # JSON list of classes; NULL: unrestricted
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
)
IDEMPOTENCY_COLUMNS: Final = (
    "scope",
    "key",
    "fingerprint",
    "status_code",
    "body",
    "created_at_s",
)
MIGRATION_COLUMNS: Final = ("version", "applied_at")

# Every shared table and its columns, in order.
SHARED_TABLES: Final[dict[str, tuple[str, ...]]] = {
    "accounts": ACCOUNT_COLUMNS,
    "live_grants": LIVE_GRANT_COLUMNS,
    "entries": ENTRY_COLUMNS,
    "idempotency": IDEMPOTENCY_COLUMNS,
    "schema_migrations": MIGRATION_COLUMNS,
}
# What one backend has and the other does not, and why.
BACKEND_ONLY_COLUMNS: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    "postgres": {
        # Several processes share the database: ``version`` tells a process its cached
        # tracker is stale; ``available`` answers a balance read from the row alone.
        "accounts": ("available", "version"),
        # The account limit, counted in the database (creation is serialised on this row).
        "account_count": ("only_row", "n"),
    },
    "sqlite": {
        # ``schema_version`` as the release before versioned migrations wrote it, kept equal
        # to the newest migration: that release refuses a file whose value is not 1, rather
        # than writing into a schema it does not know.
        "meta": ("key", "value"),
    },
}

ENTRY_KINDS: Final = frozenset({"grant", "consumption", "expiration", "void"})

EntryValues = tuple[str, int, str, int, int, int, int | None, str]
LiveGrantValues = tuple[str, int, int, int, str | None]
IdempotencyValues = tuple[str, str, str, int, bytes, float]


@dataclass(slots=True)
class Rows:
    """The rows a group of changes writes, in ``*_COLUMNS`` order."""

    # The newest row of each account the group touched, in the order first touched.
    accounts: dict[str, AccountRow] = field(default_factory=dict)
    entries: list[EntryValues] = field(default_factory=list)
    live_grant_upserts: list[LiveGrantValues] = field(default_factory=list)
    live_grant_deletes: list[tuple[str, int]] = field(default_factory=list)
    idempotency: list[IdempotencyValues] = field(default_factory=list)

    def account_values(self) -> list[tuple[str, int, int, int, int, str | None]]:
        return [
            (a.account_id, a.clock, a.debt, a.next_grant_id, a.next_sequence, debts_text(a.debts))
            for a in self.accounts.values()
        ]


def encode(changes: Sequence[Change]) -> Rows:
    """Check ``changes`` (see ``check_changes``) and turn them into rows."""
    check_changes(changes)
    rows = Rows()
    upserts: dict[tuple[str, int], LiveGrantValues] = {}
    dumps = json.dumps
    for change in changes:
        account = change.account
        account_id = account.account_id
        rows.accounts[account_id] = account
        for e in change.entries:
            rows.entries.append(
                (
                    account_id,
                    e.sequence,
                    e.kind,
                    e.timestamp,
                    e.available,
                    e.debt,
                    e.grant_id if isinstance(e, GrantEntry | VoidEntry) else None,
                    dumps(_details(e), separators=(",", ":")),
                )
            )
        for b in change.upserted_live_grants:
            upserts[(account_id, b.grant_id)] = (
                account_id,
                b.grant_id,
                b.expiry,
                b.remaining,
                classes_text(b.resources),
            )
        for grant_id in change.removed_grant_ids:
            upserts.pop((account_id, grant_id), None)
            rows.live_grant_deletes.append((account_id, grant_id))
        r = change.idempotency
        if r is not None:
            assert r.body is not None  # checked; for the type checker
            rows.idempotency.append(
                (r.scope, r.key, r.fingerprint, r.status_code, r.body, r.created_at_s)
            )
    rows.live_grant_upserts = list(upserts.values())
    return rows


def check_changes(changes: Sequence[Change]) -> None:
    """Assert what must hold of a group of changes before any of it is written (the other
    half of the checks ``GPUCreditTracker.from_state`` makes of what it reads back).

    Per change: the account row is in range; its entries are contiguous, end just before
    its ``next_sequence``, have known kinds, and timestamps that never decrease and never
    pass its clock; each upserted live grant belongs to a grant already made, has credits
    left and expires after the clock; no live grant is both upserted and removed, or named
    twice; an idempotency record carries its body. Across the group, per account, in order:
    the entries go on where the previous change's ended, the clock never goes back, and a
    removed live grant is never upserted again.
    """
    newest: dict[str, AccountRow] = {}
    last_timestamp: dict[str, int] = {}
    removed: set[tuple[str, int]] = set()
    for change in changes:
        a = change.account
        account_id = a.account_id
        assert account_id, "a change names its account"
        assert a.clock >= 0, f"{account_id}: clock {a.clock} < 0"
        assert a.debt >= 0, f"{account_id}: debt {a.debt} < 0"
        assert a.next_grant_id >= 1, f"{account_id}: grant ids start at 1"
        assert a.next_sequence >= 1, f"{account_id}: entry sequences start at 1"
        before = newest.get(account_id)
        if before is not None:
            assert a.clock >= before.clock, f"{account_id}: the clock went back"
            assert a.next_grant_id >= before.next_grant_id, f"{account_id}: next grant id went back"
            assert a.next_sequence == before.next_sequence + len(change.entries), (
                f"{account_id}: entries do not go on where the previous change's ended"
            )
        newest[account_id] = a
        _check_entries(change, last_timestamp)
        upserted = _check_live_grants(change, removed)
        for grant_id in change.removed_grant_ids:
            key = (account_id, grant_id)
            assert 1 <= grant_id < a.next_grant_id, f"{account_id}: no grant {grant_id}"
            assert grant_id not in upserted, f"{account_id}: live grant {grant_id} kept and removed"
            assert key not in removed, f"{account_id}: live grant {grant_id} removed twice"
            removed.add(key)
        r = change.idempotency
        if r is not None:
            assert r.scope, "an idempotency record has a scope"
            assert r.key, "an idempotency record has a key"
            assert r.body is not None, "an idempotency record is written with its body"
            assert 100 <= r.status_code <= 599, f"status {r.status_code} is not HTTP"


def _check_entries(change: Change, last_timestamp: dict[str, int]) -> None:
    a = change.account
    entries = change.entries
    if not entries:
        return
    account_id = a.account_id
    first = entries[0].sequence
    assert first >= 1, f"{account_id}: entry sequences start at 1"
    assert entries[-1].sequence == a.next_sequence - 1, (
        f"{account_id}: entries end at {entries[-1].sequence}, next_sequence is {a.next_sequence}"
    )
    previous = last_timestamp.get(account_id, 0)
    for i, e in enumerate(entries):
        assert e.sequence == first + i, f"{account_id}: entry {e.sequence} is not contiguous"
        assert e.kind in ENTRY_KINDS, f"{account_id}: unknown entry kind {e.kind!r}"
        # read_totals_at searches by timestamp: it must not decrease along the ledger.
        assert previous <= e.timestamp <= a.clock, (
            f"{account_id}: entry {e.sequence} at {e.timestamp} is out of order (clock {a.clock})"
        )
        assert e.available >= 0, f"{account_id}: entry {e.sequence} available < 0"
        assert e.debt >= 0, f"{account_id}: entry {e.sequence} debt < 0"
        if isinstance(e, GrantEntry | VoidEntry):
            assert 1 <= e.grant_id < a.next_grant_id, (
                f"{account_id}: {e.kind} entry {e.sequence} names grant {e.grant_id}"
            )
        previous = e.timestamp
    last_timestamp[account_id] = previous


def _check_live_grants(change: Change, removed: set[tuple[str, int]]) -> set[int]:
    a = change.account
    account_id = a.account_id
    upserted: set[int] = set()
    for b in change.upserted_live_grants:
        assert 1 <= b.grant_id < a.next_grant_id, f"{account_id}: no grant {b.grant_id}"
        assert b.remaining > 0, f"{account_id}: live grant {b.grant_id} has nothing left"
        assert b.expiry > a.clock, f"{account_id}: live grant {b.grant_id} expired at {b.expiry}"
        assert b.grant_id not in upserted, f"{account_id}: live grant {b.grant_id} upserted twice"
        assert (account_id, b.grant_id) not in removed, (
            f"{account_id}: live grant {b.grant_id} upserted after it was removed"
        )
        upserted.add(b.grant_id)
    return upserted


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
    return None if resources is None else json.dumps(list(resources), separators=(",", ":"))


def classes_of(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(json.loads(text))


def debts_text(debts: tuple[Debt, ...]) -> str | None:
    """The debt queue as its column keeps it (JSON; NULL: none, or all of no class)."""
    if not debts:
        return None
    return json.dumps([[d.resource, d.amount] for d in debts], separators=(",", ":"))


def debts_of(text: str | None) -> tuple[Debt, ...]:
    return () if text is None else tuple(Debt(r, a) for r, a in json.loads(text))


def _classes(d: dict[str, Any], member: str) -> tuple[str, ...] | None:
    found = d.get(member)
    return None if found is None else tuple(found)


def entry_of(
    sequence: int, kind: str, timestamp: int, available: int, debt: int, details: str
) -> Entry:
    """An entry from its row (``ENTRY_COLUMNS`` without account_id and grant_id)."""
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
        )
    if kind == "void":
        return VoidEntry(sequence, timestamp, available, debt, d["grant_id"], d["amount"])
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
    )


def columns(names: Sequence[str]) -> str:
    """A column list for SQL text."""
    return ", ".join(names)
