"""One small ledger, as the storage layer sees it, shared by the storage contract suite and the
migration tests.

Three accounts, written by this sequence of requests to a service (the release before
versioned migrations made exactly these rows; ``tests/test_storage_migrations.py`` holds
them as that release wrote them):

- ``acme``: grant 100 at 0 expiring at 10 (Idempotency-Key ``g-1``); grant 50 at 1 expiring
  at 30; consume 120 at 5 (key ``c-1``: 100 from grant 1, 20 from grant 2); consume 40 at 12
  (30 from grant 2, 10 of debt); grant 25 at 15 expiring at 40 (key ``g-2``: settles the
  debt, keeps 15).
- ``team-b:1``: grant 7 at 3 expiring at 8; grant 9 at 9 expiring at 20 (grant 1 expires
  unused at 8 first).
- ``bat``: one batch (key ``b-1``): grant 5 at 2 expiring at 6, consume 2 at 3.
"""

from __future__ import annotations

from dataclasses import replace

from app.domain import Allocation, LiveGrant, TrackerState
from app.storage.base import (
    AccountRow,
    Change,
    ConsumptionEntry,
    Entry,
    ExpirationEntry,
    GrantEntry,
    IdempotencyRecord,
    LoadedAccount,
    StorageBackend,
)

ACCOUNTS = ("acme", "bat", "team-b:1")


def _grant(
    head: tuple[int, int, int, int],
    grant_id: int,
    amount: int,
    expiry: int,
    settled: int,
    retained: int,
) -> GrantEntry:
    """``head``: (sequence, timestamp, available, debt) after the entry."""
    return GrantEntry(*head, grant_id, amount, expiry, settled, retained)


def _consumption(
    head: tuple[int, int, int, int],
    amount: int,
    consumed: int,
    debt_added: int,
    *parts: tuple[int, int, int],
) -> ConsumptionEntry:
    allocation = tuple(Allocation(g, e, a) for g, e, a in parts)
    return ConsumptionEntry(*head, amount, consumed, debt_added, allocation)


ENTRIES: dict[str, list[Entry]] = {
    "acme": [
        _grant((1, 0, 100, 0), 1, 100, 10, 0, 100),
        _grant((2, 1, 150, 0), 2, 50, 30, 0, 50),
        _consumption((3, 5, 30, 0), 120, 120, 0, (1, 10, 100), (2, 30, 20)),
        _consumption((4, 12, 0, 10), 40, 30, 10, (2, 30, 30)),
        _grant((5, 15, 15, 0), 3, 25, 40, 10, 15),
    ],
    "bat": [
        _grant((1, 2, 5, 0), 1, 5, 6, 0, 5),
        _consumption((2, 3, 3, 0), 2, 2, 0, (1, 6, 2)),
    ],
    "team-b:1": [
        _grant((1, 3, 7, 0), 1, 7, 8, 0, 7),
        ExpirationEntry(2, 8, 0, 0, grant_id=1, expiry=8, amount=7),
        _grant((3, 9, 9, 0), 2, 9, 20, 0, 9),
    ],
}

STATES: dict[str, LoadedAccount] = {
    # Written with a lateness window of 0: the watermark is the clock.
    "acme": LoadedAccount(
        TrackerState(15, 0, 4, (LiveGrant(3, 40, 15, granted_at=15),)), 6, watermark=15
    ),
    "bat": LoadedAccount(
        TrackerState(3, 0, 2, (LiveGrant(1, 6, 3, granted_at=2),)), 3, watermark=3
    ),
    "team-b:1": LoadedAccount(
        TrackerState(9, 0, 3, (LiveGrant(2, 20, 9, granted_at=9),)), 4, watermark=9
    ),
}

# (account, timestamp) -> (available, debt) after the last entry at or before it.
TOTALS_AT: dict[tuple[str, int], tuple[int, int]] = {
    ("acme", 0): (100, 0),
    ("acme", 4): (150, 0),
    ("acme", 5): (30, 0),
    ("acme", 11): (30, 0),
    ("acme", 12): (0, 10),
    ("acme", 14): (0, 10),
    ("acme", 10**15): (15, 0),
    ("bat", 1): (0, 0),
    ("team-b:1", 2): (0, 0),
    ("team-b:1", 8): (0, 0),
    ("team-b:1", 9): (9, 0),
    ("nobody", 5): (0, 0),
}

# scope, key, fingerprint, status, body: the records the requests above left.
KEYS: tuple[tuple[str, str, str, int, bytes], ...] = (
    (
        "acme",
        "g-1",
        "c23b2efc8b6dade9db0fbfe865ee063cf0adc9e5a5cd6d0f9084fa56a11a4e5b",
        201,
        b'{"account_id":"acme","grant_id":1,"sequence":1,"timestamp":0,"amount":100,"expiry":10,'
        b'"balance":100,"available":100,"debt":0,"settled_debt":0,"retained":100}',
    ),
    (
        "acme",
        "c-1",
        "c0054c6be45dd72728fa4d6bb2eb98b9aa1ad17636f800f88302e2d529acdfd4",
        200,
        b'{"account_id":"acme","sequence":3,"timestamp":5,"amount":120,"balance":30,'
        b'"available":30,"debt":0,"consumed":120,"debt_added":0,"allocation":[{"grant_id":1,'
        b'"expiry":10,"amount":100},{"grant_id":2,"expiry":30,"amount":20}]}',
    ),
    (
        "acme",
        "g-2",
        "faf7a733520cba73ccb65dce52b300248917c83aa17d2156f7dd3d70726f3dd4",
        201,
        b'{"account_id":"acme","grant_id":3,"sequence":5,"timestamp":15,"amount":25,'
        b'"expiry":40,"balance":15,"available":15,"debt":0,"settled_debt":10,"retained":15}',
    ),
    (
        "/batch",
        "b-1",
        "43e4a98da59895f3aaf886b957dfb33694c72a073a11586882e8ff19ddc585f6",
        200,
        b'{"succeeded":3,"failed":0,"results":[{"op":"grant","status":201,"body":{"account_id":'
        b'"bat","grant_id":1,"sequence":1,"timestamp":2,"amount":5,"expiry":6,"balance":5,'
        b'"available":5,"debt":0,"settled_debt":0,"retained":5}},{"op":"consume","status":200,'
        b'"body":{"account_id":"bat","sequence":2,"timestamp":3,"amount":2,"balance":3,'
        b'"available":3,"debt":0,"consumed":2,"debt_added":0,"allocation":[{"grant_id":1,'
        b'"expiry":6,"amount":2}]}},{"op":"balance","status":200,"body":{"account_id":"acme",'
        b'"timestamp":15,"balance":15,"available":15,"debt":0}}]}',
    ),
)


def record(key: str, created_at_s: float) -> IdempotencyRecord:
    scope, key, fingerprint, status, body = next(k for k in KEYS if k[1] == key)
    return IdempotencyRecord(scope, key, fingerprint, status, body, created_at_s)


def groups(created_at_s: float) -> list[list[Change]]:
    """The changes the service submitted for those requests, grouped as a group commit
    could have: several changes of one account, and of several accounts, in one group."""
    acme, team, bat = ({e.sequence: e for e in ENTRIES[a]} for a in ("acme", "team-b:1", "bat"))

    def change(
        row: AccountRow,
        entries: list[Entry],
        upserted: list[LiveGrant] | None = None,
        removed: list[int] | None = None,
        key: str | None = None,
    ) -> Change:
        row.watermark = row.clock  # a lateness window of 0
        return Change(
            row,
            upserted or [],
            removed or [],
            entries,
            None if key is None else record(key, created_at_s),
        )

    return [
        [
            change(
                AccountRow("acme", 0, 0, 2, 2),
                [acme[1]],
                [LiveGrant(1, 10, 100, granted_at=0)],
                key="g-1",
            ),
            change(AccountRow("acme", 1, 0, 3, 3), [acme[2]], [LiveGrant(2, 30, 50, granted_at=1)]),
        ],
        [
            change(
                AccountRow("acme", 5, 0, 3, 4),
                [acme[3]],
                [LiveGrant(2, 30, 30, granted_at=1)],
                [1],
                "c-1",
            )
        ],
        [
            change(
                AccountRow("team-b:1", 3, 0, 2, 2), [team[1]], [LiveGrant(1, 8, 7, granted_at=3)]
            ),
            change(AccountRow("acme", 12, 10, 3, 5), [acme[4]], [], [2]),
        ],
        [
            change(
                AccountRow("team-b:1", 9, 0, 3, 4),
                [team[2], team[3]],
                [LiveGrant(2, 20, 9, granted_at=9)],
                [1],
            ),
            change(
                AccountRow("acme", 15, 0, 4, 6),
                [acme[5]],
                [LiveGrant(3, 40, 15, granted_at=15)],
                key="g-2",
            ),
        ],
        [
            change(AccountRow("bat", 2, 0, 2, 2), [bat[1]], [LiveGrant(1, 6, 5, granted_at=2)]),
            change(
                AccountRow("bat", 3, 0, 2, 3),
                [bat[2]],
                [LiveGrant(1, 6, 3, granted_at=2)],
                key="b-1",
            ),
        ],
    ]


def available_after(changes: list[Change]) -> dict[str, int]:
    """Each account's available credits after ``changes`` (the totals of its last entry):
    what a transactional store's account row keeps."""
    out: dict[str, int] = {}
    for c in changes:
        if c.entries:
            out[c.account.account_id] = c.entries[-1].available
        else:
            out.setdefault(c.account.account_id, 0)  # not what this suite checks
    return out


def account_row(account_id: str) -> AccountRow:
    """The account's row as ``read_accounts`` lists it."""
    account = STATES[account_id]
    state = account.tracker_state
    return AccountRow(
        account_id,
        state.clock,
        state.debt,
        state.next_grant_id,
        account.next_sequence,
        watermark=account.watermark,
    )


def first_grant(account_id: str) -> Change:
    """A new account's first write: a grant of 5 at 0 expiring at 10."""
    entry = GrantEntry(1, 0, 5, 0, 1, 5, 10, 0, 5)
    return Change(AccountRow(account_id, 0, 0, 2, 2), [LiveGrant(1, 10, 5)], [], [entry])


async def assert_holds(
    store: StorageBackend, created_at_s: float, *, migrated: bool = False
) -> None:
    """``store`` holds exactly this ledger, read through every read of the interface.
    ``migrated``: written by a release before late events, so no checkpoint exists and every
    write so far counts as folded since the last one (the next write stores one)."""
    rows = [account_row(a) for a in sorted(ACCOUNTS)]
    if migrated:
        rows = [replace(r, folded_since_checkpoint=r.next_sequence - 1) for r in rows]
    assert await store.read_accounts("", "", 100) == rows
    for account_id in ACCOUNTS:
        assert await store.read_entries(account_id, None, 100) == ENTRIES[account_id]
        expected = STATES[account_id]
        if migrated:
            expected = replace(expected, folded_since_checkpoint=expected.next_sequence - 1)
        assert await store.read_account_state(account_id) == expected
    for (account_id, timestamp), totals in TOTALS_AT.items():
        assert await store.read_totals_at(account_id, timestamp) == totals, (account_id, timestamp)
    for scope, key, _, _, body in KEYS:
        assert await store.read_idempotency(scope, key) == record(key, created_at_s)
        assert await store.read_idempotency_body(scope, key) == body
