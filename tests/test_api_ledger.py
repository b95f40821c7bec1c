"""``GET /v1/accounts/{id}/ledger`` (the history: kinds, expirations, pages, a replay that
reconciles with every answer and with the reference model) and ``GET .../grants`` (the live
grants in consumption order)."""

from __future__ import annotations

import random

import httpx
import pytest

from tests.support.api import (
    ACCOUNT,
    MAX,
    all_entries,
    assert_problem,
    balance,
    before_storage,
    check_entry_totals,
    consume,
    error_locs,
    expect,
    grant,
    ok,
    paginate,
    subset,
    url,
)
from tests.support.model import Account

# -- history ------------------------------------------------------------------------------


async def test_ledger_kinds_and_expiration_entries(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 100, 0, 5), 201)
    ok(await grant(client, 20, 1, 7), 201)
    ok(await grant(client, 30, 1, 5), 201)
    ok(await consume(client, 60, 2))  # 60 from grant 1 (expiry 5, granted first)
    assert ok(await balance(client, 6))["available"] == 20
    consumed = ok(await consume(client, 25, 8))  # grant 2 expired at 7; 25 become debt

    entries = await all_entries(client)
    assert [e["sequence"] for e in entries] == list(range(1, len(entries) + 1))
    assert [(e["kind"], e["timestamp"]) for e in entries] == [
        ("grant", 0),
        ("grant", 1),
        ("grant", 1),
        ("consumption", 2),
        ("expiration", 5),  # grant 1's remaining 40
        ("expiration", 5),  # grant 3's 30, same expiry: grant order
        ("expiration", 7),
        ("consumption", 8),
    ]
    expect(
        entries[3],
        {
            "amount": 60,
            "consumed": 60,
            "debt_added": 0,
            "available": 90,
            "debt": 0,
            "allocation": [{"grant_id": 1, "expiry": 5, "amount": 60, "resources": None}],
        },
    )
    expect(
        entries[4],
        {
            "grant_id": 1,
            "expiry": 5,
            "amount": 40,
            "available": 50,
            "debt": 0,
            "balance": 50,
        },
    )
    expect(entries[5], {"grant_id": 3, "expiry": 5, "amount": 30, "available": 20})
    expect(entries[6], {"grant_id": 2, "expiry": 7, "amount": 20, "available": 0})
    consumption = entries[7]
    for name in ("sequence", "timestamp", "balance", "available", "debt", "amount", "consumed"):
        assert consumption[name] == consumed[name], name
    assert consumption["allocation"] == consumed["allocation"] == []
    assert consumption["debt_added"] == 25
    for entry in entries:
        check_entry_totals(entry)


async def test_expiration_without_any_read_is_recorded_by_the_next_write(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, 50, 0, 5), 201)
    ok(await grant(client, 10, 9, 20), 201)
    entries = await all_entries(client)
    assert [(e["kind"], e["timestamp"], e["sequence"]) for e in entries] == [
        ("grant", 0, 1),
        ("expiration", 5, 2),
        ("grant", 9, 3),
    ]
    assert ok(await client.get(url(ACCOUNT, "grants/2")))["sequence"] == 3


async def test_ledger_pagination(client: httpx.AsyncClient) -> None:
    for i in range(12):
        ok(await grant(client, 1, i, 100), 201)
    full = await all_entries(client)
    assert [e["sequence"] for e in full] == list(range(1, 13))
    for limit in (1, 3, 4, 5, 12, 13, 1000):
        assert await paginate(client, limit) == full, limit

    page = ok(await client.get(url(ACCOUNT, "ledger"), params={"limit": "5", "after": "5"}))
    assert [e["sequence"] for e in page["entries"]] == [6, 7, 8, 9, 10]
    assert page["next_after"] == 10
    page = ok(await client.get(url(ACCOUNT, "ledger"), params={"limit": "5", "after": "10"}))
    assert [e["sequence"] for e in page["entries"]] == [11, 12]
    assert page["next_after"] is None
    page = ok(await client.get(url(ACCOUNT, "ledger"), params={"after": "12"}))
    assert page == {"account_id": ACCOUNT, "entries": [], "next_after": None}
    page = ok(await client.get(url(ACCOUNT, "ledger"), params={"after": str(MAX)}))
    assert page["entries"] == []
    # The default page holds up to 100.
    page = ok(await client.get(url(ACCOUNT, "ledger")))
    assert len(page["entries"]) == 12


async def test_ledger_default_page_size_is_100(client: httpx.AsyncClient) -> None:
    for i in range(101):
        ok(await consume(client, 1, i))
    page = ok(await client.get(url(ACCOUNT, "ledger")))
    assert len(page["entries"]) == 100
    assert page["next_after"] == 100
    assert len(await paginate(client, 1000)) == 101


@before_storage
async def test_invalid_ledger_query_is_422(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    ok(await grant(client, 100, 3, 50), 201)
    cases = [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"limit": "1.0"}, "limit"),
        ({"limit": "abc"}, "limit"),
        ({"after": "-1"}, "after"),
        ({"after": "x"}, "after"),
        ({"after": str(2**53)}, "after"),
    ]
    for params, name in cases:
        with subtests.test(params=params):
            r = await client.get(url(ACCOUNT, "ledger"), params=params)
            assert ["query", name] in error_locs(assert_problem(r, 422))
    assert (
        len(ok(await client.get(url(ACCOUNT, "ledger"), params={"limit": "1000"}))["entries"]) == 1
    )


@pytest.mark.parametrize("seed", [7, 2026])
async def test_ledger_reconciles_with_balances(client: httpx.AsyncClient, seed: int) -> None:
    rng = random.Random(seed)
    model = Account(ACCOUNT)
    t = 0
    expect(ok(await grant(client, 50, 0, 10), 201), model.grant(50, 0, 10))
    for _ in range(300):
        t += rng.choice([0, 0, 1, 1, 2, 3, 8])
        roll = rng.random()
        if roll < 0.45:
            amount, expiry = rng.randint(1, 100), t + rng.randint(1, 12)
            body = ok(await grant(client, amount, t, expiry), 201)
            expect(body, model.grant(amount, t, expiry))
        elif roll < 0.75:
            amount = rng.randint(1, 120)
            body = ok(await consume(client, amount, t))
            expect(body, model.consume(amount, t))
        elif roll < 0.86:
            body = ok(await balance(client, t))
            assert body == model.read_balance(t)  # a projection
        elif roll < 0.92:
            asked = rng.randint(0, max(model.clock, 1))
            assert ok(await balance(client, asked)) == model.read_balance(asked)
        elif roll < 0.96:
            assert ok(await balance(client)) == model.read_balance()
        elif model.clock > 0:
            problem = assert_problem(await consume(client, 1, model.clock - 1), 409)
            assert problem["account_timestamp"] == model.clock

    entries = await paginate(client, 97)
    assert {e["kind"] for e in entries} == {"grant", "consumption", "expiration"}
    assert any(e["debt"] > 0 for e in entries), "the run should include debt"
    assert any(e["kind"] == "grant" and e["settled_debt"] > 0 for e in entries)
    assert [e["sequence"] for e in entries] == list(range(1, len(entries) + 1))
    assert len(entries) == len(model.entries)
    for got, expected in zip(entries, model.entries, strict=True):
        assert subset(got, expected) == expected

    # Replaying the entries from zero reproduces every entry's totals and the final balance.
    available = debt = 0
    last_timestamp = 0
    for entry in entries:
        kind = entry["kind"]
        if kind == "grant":
            assert entry["settled_debt"] + entry["retained"] == entry["amount"]
            assert entry["settled_debt"] <= debt
            available += entry["retained"]
            debt -= entry["settled_debt"]
        elif kind == "consumption":
            assert entry["consumed"] + entry["debt_added"] == entry["amount"]
            assert sum(a["amount"] for a in entry["allocation"]) == entry["consumed"]
            available -= entry["consumed"]
            debt += entry["debt_added"]
        else:
            assert kind == "expiration"
            assert entry["timestamp"] == entry["expiry"]
            available -= entry["amount"]
        assert entry["timestamp"] >= last_timestamp, "entries are in time order"
        last_timestamp = entry["timestamp"]
        assert (entry["available"], entry["debt"]) == (available, debt), entry
        check_entry_totals(entry)
    final = ok(await balance(client))
    assert (final["available"], final["debt"], final["balance"]) == (
        available,
        debt,
        available - debt,
    )
    assert final == model.read_balance()
    live = ok(await client.get(url(ACCOUNT, "grants")))
    assert live == model.live_grants()
    # The account list shows the same state at the clock.
    listed = ok(await client.get("/v1/accounts"))
    assert listed == {"accounts": [model.read_balance()], "next_after": None}


# -- live grants --------------------------------------------------------------------------


async def test_live_grants_in_consumption_order(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 10, 0, 30), 201)  # 1
    ok(await grant(client, 20, 0, 10), 201)  # 2
    ok(await grant(client, 30, 0, 30), 201)  # 3
    ok(await grant(client, 40, 1, 5), 201)  # 4
    ok(await grant(client, 50, 1, 10), 201)  # 5
    body = ok(await client.get(url(ACCOUNT, "grants")))
    expect(
        body,
        {
            "account_id": ACCOUNT,
            "timestamp": 1,
            "balance": 150,
            "available": 150,
            "debt": 0,
        },
    )
    assert body["grants"] == [
        _unlabelled(4, 5, 40),
        _unlabelled(2, 10, 20),
        _unlabelled(5, 10, 50),
        _unlabelled(1, 30, 10),
        _unlabelled(3, 30, 30),
    ]

    # 25 used from grant 4 (15 left); at 6 grant 4 has expired; then grant 2 used up and
    # 5 taken from grant 5.
    ok(await consume(client, 25, 2))
    ok(await consume(client, 25, 6))
    body = ok(await client.get(url(ACCOUNT, "grants")))
    assert body["grants"] == [
        _unlabelled(5, 10, 45),
        _unlabelled(1, 30, 10),
        _unlabelled(3, 30, 30),
    ]
    assert body["available"] == 85
    # Reading changes nothing.
    assert ok(await client.get(url(ACCOUNT, "grants"))) == body

    # A read at 10 projects grant 5's expiry; the list (at the clock, 6) is unchanged.
    assert ok(await balance(client, 10))["available"] == 40
    assert [g["grant_id"] for g in ok(await client.get(url(ACCOUNT, "grants")))["grants"]] == [
        5,
        1,
        3,
    ]
    ok(await consume(client, 100, 11))
    body = ok(await client.get(url(ACCOUNT, "grants")))
    assert body["grants"] == []
    expect(body, {"balance": -60, "available": 0, "debt": 60})


def _unlabelled(grant_id: int, expiry: int, remaining: int) -> dict[str, object]:
    """A live grant as listGrants shows one with no classes, name or metadata."""
    return {
        "grant_id": grant_id,
        "expiry": expiry,
        "remaining": remaining,
        "resources": None,
        "name": None,
        "metadata": None,
    }
