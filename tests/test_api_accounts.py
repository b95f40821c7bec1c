"""Accounts: created by their first write, 404 to every read before it (creating nothing),
independent of each other; which ``account_id`` values are valid, and that an invalid one is
refused wherever it appears without bringing a look-alike account into existence.

``GET /v1/accounts``: the accounts that exist, in byte order of their id, each at its clock
(as a balance read answers), by prefix and cursor pages; never an account a failed request
would have made; and, with API keys, only the accounts within the key's prefix."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.keys import Scope, create_key
from app.main import create_app
from app.settings import Settings
from tests.support.api import (
    ACCOUNTS_URL,
    JSON,
    MAX,
    account_ids,
    all_entries,
    assert_absent,
    assert_problem,
    balance,
    before_storage,
    consume,
    error_locs,
    expect,
    grant,
    ok,
    url,
)
from tests.support.app_runner import make_settings, running

_UNKNOWN_ACCOUNT_READS: list[tuple[str, dict[str, str]]] = [
    ("balance", {}),
    ("balance", {"timestamp": "5"}),
    ("grants", {}),
    ("grants/1", {}),
    ("ledger", {}),
    ("ledger", {"after": "3", "limit": "2"}),
]


async def test_reading_an_unknown_account_is_404_and_creates_nothing(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    for tail, params in _UNKNOWN_ACCOUNT_READS:
        with subtests.test(tail=tail, params=params):
            r = await client.get(url("ghost", tail), params=params)
            problem = assert_problem(r, 404)
            assert problem["type"].endswith("account-not-found")
            await assert_absent(client, "ghost")
    # No read advanced a clock either: a write at 0 is fine and starts the ledger.
    body = ok(await grant(client, 1, 0, 1, account_id="ghost"), 201)
    expect(body, {"grant_id": 1, "sequence": 1, "timestamp": 0})


async def test_accounts_are_independent(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 10, 100, 200, account_id="a"), 201)
    ok(await grant(client, 20, 0, 5, account_id="b"), 201)  # b's clock is its own
    assert ok(await balance(client, account_id="a"))["balance"] == 10
    assert ok(await balance(client, account_id="b"))["balance"] == 20
    assert ok(await consume(client, 25, 1, account_id="b"))["debt"] == 5
    assert ok(await balance(client, account_id="a"))["balance"] == 10


async def test_valid_account_ids(client: httpx.AsyncClient, subtests: pytest.Subtests) -> None:
    for account_id in ["a" * 128, "Z", "0", "Team-A.b_c:9-x", "9.:_-"]:
        with subtests.test(account_id=account_id):
            body = ok(await grant(client, 3, 0, 9, account_id=account_id), 201)
            assert body["account_id"] == account_id
            assert ok(await balance(client, account_id=account_id))["balance"] == 3
            assert len(await all_entries(client, account_id)) == 1


# (raw path segment, whether it reaches the route (422) or misses every route (404), a valid
# id that looks like it and must not spring into existence)
_BAD_ACCOUNT_IDS: list[tuple[str, bool, str]] = [
    ("a" * 129, True, "a" * 128),
    (".abc", True, "abc"),
    ("-abc", True, "abc"),
    ("_abc", True, "abc"),
    (":abc", True, "abc"),
    ("a%2Fb", False, "ab"),  # an encoded '/': a route miss
    ("a b", True, "ab"),
    ("a%20b", True, "ab"),
    ("caf\u00e9", True, "caf"),
    ("\u0430bc", True, "abc"),  # Cyrillic a
    ("a%00b", True, "ab"),
    ("a!b", True, "ab"),
    ("a*b", True, "ab"),
    ("a%25b", True, "ab"),
]


_ACCOUNT_ROUTES: list[tuple[str, str, JSON | None]] = [
    ("POST", "grants", {"amount": 10, "timestamp": 5, "expiry": 10}),
    ("POST", "consumptions", {"amount": 10, "timestamp": 5}),
    ("GET", "balance", None),
    ("GET", "grants", None),
    ("GET", "grants/1", None),
    ("GET", "ledger", None),
]


@before_storage
async def test_invalid_account_id_is_rejected_and_creates_nothing(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    for raw, reaches_route, lookalike in _BAD_ACCOUNT_IDS:
        for method, tail, body in _ACCOUNT_ROUTES:
            with subtests.test(account_id=raw, method=method, tail=tail):
                r = await client.request(method, f"/v1/accounts/{raw}/{tail}", json=body)
                if reaches_route:
                    problem = assert_problem(r, 422)
                    assert ["path", "account_id"] in error_locs(problem)
                else:
                    problem = assert_problem(r, 404)
                    assert problem["type"].endswith(":not-found"), problem  # no route
                await assert_absent(client, lookalike)


# -- listing accounts ----------------------------------------------------------------------

# Ids whose byte order is not a natural-language collation's: upper case first, and
# ``team-a-``, ``team-a.``, ``team-a:``, ``team-a_`` and ``team-ab`` in that order.
_LISTED = [
    "team-a:x", "A", "team-a-1", "a", "team-a:", "team-a_x", "team-ab", "a0", "Z",
    "0", "team-a.", "team-a:1", "aA", "b", "a:b", "a.b", "B", "team-b:1", "team-a",
]  # fmt: skip
_LISTED_IN_BYTE_ORDER = [
    "0", "A", "B", "Z", "a", "a.b", "a0", "a:b", "aA", "b", "team-a", "team-a-1",
    "team-a.", "team-a:", "team-a:1", "team-a:x", "team-a_x", "team-ab", "team-b:1",
]  # fmt: skip


async def _list(client: httpx.AsyncClient, **params: str) -> JSON:
    return ok(await client.get(ACCOUNTS_URL, params=params))


async def test_an_empty_ledger_lists_no_account(client: httpx.AsyncClient) -> None:
    assert await _list(client) == {"accounts": [], "next_after": None}
    assert await _list(client, prefix="team-a:", after="a", limit="1") == {
        "accounts": [],
        "next_after": None,
    }


async def test_accounts_are_listed_in_byte_order_each_at_its_clock(
    client: httpx.AsyncClient,
) -> None:
    for i, account_id in enumerate(_LISTED):
        ok(await grant(client, 10 + i, i, 100, account_id=account_id), 201)
    ok(await consume(client, 30, 50, account_id="b"))  # into debt: 23 credits, 7 of debt
    ok(await grant(client, 5, 60, 61, account_id="Z"), 201)  # Z's clock moves to 60

    page = await _list(client, limit="1000")
    assert [a["account_id"] for a in page["accounts"]] == _LISTED_IN_BYTE_ORDER
    assert page["next_after"] is None
    # Each item is what a balance read without a time answers: the account at its clock.
    for item in page["accounts"]:
        assert item == ok(await balance(client, account_id=item["account_id"])), item
    by_id = {a["account_id"]: a for a in page["accounts"]}
    assert by_id["b"] == {
        "account_id": "b",
        "timestamp": 50,
        "balance": -7,
        "available": 0,
        "debt": 7,
        "resource": None,
        "watermark": 50,
        "final": False,
    }
    expect(by_id["Z"], {"timestamp": 60, "available": 23, "balance": 23})
    # Listing changes nothing (reads are safe), not even when asked again.
    assert await _list(client, limit="1000") == page


async def test_a_prefix_lists_exactly_the_ids_that_start_with_it(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    for account_id in _LISTED:
        ok(await grant(client, 1, 0, 100, account_id=account_id), 201)
    cases = {
        "": _LISTED_IN_BYTE_ORDER,
        "a": ["a", "a.b", "a0", "a:b", "aA"],  # not A
        "A": ["A"],
        "team-a:": ["team-a:", "team-a:1", "team-a:x"],  # not team-a-1, team-a_x...
        "team-a-": ["team-a-1"],
        "team-a": _LISTED_IN_BYTE_ORDER[10:18],
        "team-a:x": ["team-a:x"],  # a prefix may be a whole id
        "team-a:xy": [],
        "c": [],
    }
    for prefix, expected in cases.items():
        with subtests.test(prefix=prefix):
            assert await account_ids(client, 1000, prefix) == expected
            assert await account_ids(client, 2, prefix) == expected  # the same, in pages
    page = await _list(client, prefix="team-a:", after="team-a:")
    assert [a["account_id"] for a in page["accounts"]] == ["team-a:1", "team-a:x"]
    page = await _list(client, prefix="team-a:", after="B")  # a cursor before the range
    assert [a["account_id"] for a in page["accounts"]] == ["team-a:", "team-a:1", "team-a:x"]
    assert await _list(client, prefix="a", after="b") == {"accounts": [], "next_after": None}


async def test_pages_follow_next_after(client: httpx.AsyncClient) -> None:
    ids = [f"acct-{i:02d}" for i in range(7)]
    for account_id in reversed(ids):
        ok(await grant(client, 1, 0, 9, account_id=account_id), 201)
    for limit in (1, 2, 3, 6, 7, 8, 1000):
        assert await account_ids(client, limit) == ids, limit

    page = await _list(client, limit="3")
    assert [a["account_id"] for a in page["accounts"]] == ids[:3]
    assert page["next_after"] == "acct-02"
    page = await _list(client, limit="3", after="acct-02")
    assert [a["account_id"] for a in page["accounts"]] == ids[3:6]
    assert page["next_after"] == "acct-05"
    page = await _list(client, limit="3", after="acct-05")
    assert [a["account_id"] for a in page["accounts"]] == ids[6:]
    assert page["next_after"] is None
    # A page that ends exactly with the last account is the last page.
    page = await _list(client, limit="7")
    assert len(page["accounts"]) == 7
    assert page["next_after"] is None
    # A cursor need not be an account; past the last one, nothing.
    page = await _list(client, after="acct-02x")
    assert [a["account_id"] for a in page["accounts"]] == ids[3:]
    assert await _list(client, after="acct-06") == {"accounts": [], "next_after": None}
    assert await _list(client, after="zzz") == {"accounts": [], "next_after": None}


async def test_the_default_page_holds_100(client: httpx.AsyncClient) -> None:
    ops = [
        {"op": "grant", "account_id": f"n{i:03d}", "amount": 1, "timestamp": 0, "expiry": 9}
        for i in range(101)
    ]
    assert ok(await client.post("/v1/batch", json={"operations": ops}))["succeeded"] == 101
    page = await _list(client)
    assert len(page["accounts"]) == 100
    assert page["next_after"] == "n099"
    page = await _list(client, after="n099")
    assert [a["account_id"] for a in page["accounts"]] == ["n100"]
    assert page["next_after"] is None


async def test_an_acknowledged_write_is_listed_at_once(client: httpx.AsyncClient) -> None:
    """A write is acknowledged once durable, and the listing shows durable accounts: the
    account is there in the very next listing, with the write's figures."""
    for i in range(5):
        account_id = f"fresh-{i}"
        granted = ok(await grant(client, 10 + i, 3, 20, account_id=account_id), 201)
        page = await _list(client, prefix=account_id)
        assert page["accounts"] == [
            {
                k: granted[k]
                for k in ("account_id", "timestamp", "balance", "available", "debt", "watermark")
            }
            | {"resource": None, "final": False}
        ]
    assert len(await account_ids(client, 2, "fresh-")) == 5


async def test_failed_requests_list_no_account(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 10, 5, 50, account_id="real"), 201)
    # Refused before the ledger: invalid bodies.
    assert_problem(await grant(client, 10, 5, 5, account_id="ghost-1"), 422)
    assert_problem(await consume(client, 0, 5, account_id="ghost-2"), 422)
    # Refused by the ledger on a new account: an atomic batch whose second operation
    # overflows a total, so its first (which made the account) is undone.
    ops = [
        {"op": "grant", "account_id": "ghost-3", "amount": MAX, "timestamp": 0, "expiry": 9},
        {"op": "grant", "account_id": "ghost-3", "amount": 1, "timestamp": 0, "expiry": 9},
    ]
    assert_problem(await client.post("/v1/batch", json={"atomic": True, "operations": ops}), 422)
    # Not atomic, each operation alone: a read of an unknown account makes none; a grant
    # that is accepted makes its account, though a later operation on it is refused.
    ops = [
        {"op": "grant", "account_id": "kept", "amount": 1, "timestamp": 0, "expiry": 9},
        {"op": "balance", "account_id": "ghost-4"},
        {"op": "grant", "account_id": "half-kept", "amount": MAX, "timestamp": 0, "expiry": 9},
        {"op": "grant", "account_id": "half-kept", "amount": 1, "timestamp": 0, "expiry": 9},
    ]
    batch = ok(await client.post("/v1/batch", json={"operations": ops}))
    assert [r["status"] for r in batch["results"]] == [201, 404, 201, 422]
    # Reads create nothing; a refused write on an existing account makes no other.
    assert_problem(await balance(client, account_id="ghost-6"), 404)
    assert_problem(await consume(client, 1, 4, account_id="real"), 409)
    assert await account_ids(client, 1000) == ["half-kept", "kept", "real"]
    for ghost in ("ghost-1", "ghost-2", "ghost-3", "ghost-4", "ghost-6"):
        await assert_absent(client, ghost)


@pytest.mark.backends("sqlite", "postgres")
async def test_the_list_survives_a_restart(
    backend: str, tmp_path: Path, database_url: str | None
) -> None:
    settings = make_settings(backend, tmp_path / "data", database_url)
    async with running(create_app(settings)) as client:
        for account_id in ("b", "a", "team-a:1"):
            ok(await grant(client, 3, 1, 9, account_id=account_id), 201)
        before = await _list(client)
    async with running(create_app(settings)) as client:
        assert await _list(client) == before
        assert [a["account_id"] for a in before["accounts"]] == ["a", "b", "team-a:1"]


@before_storage
async def test_invalid_list_query_is_422(
    client: httpx.AsyncClient, subtests: pytest.Subtests
) -> None:
    ok(await grant(client, 1, 0, 9, account_id="a"), 201)
    cases: list[tuple[tuple[tuple[str, str], ...], str]] = [
        ((("limit", "0"),), "limit"),
        ((("limit", "1001"),), "limit"),
        ((("limit", "-1"),), "limit"),
        ((("limit", "1.0"),), "limit"),
        ((("limit", "abc"),), "limit"),
        ((("limit", ""),), "limit"),
        ((("prefix", ":a"),), "prefix"),  # no account id starts with it
        ((("prefix", "-"),), "prefix"),
        ((("prefix", "a b"),), "prefix"),
        ((("prefix", "a/b"),), "prefix"),
        ((("prefix", "caf\u00e9"),), "prefix"),
        ((("prefix", "a" * 129),), "prefix"),
        ((("after", ".a"),), "after"),
        ((("after", "a*"),), "after"),
        ((("after", "a" * 129),), "after"),
        ((("prefx", "a"),), "prefx"),  # a typo must not list everything
        ((("prefix", "a"), ("prefix", "b")), "prefix"),  # repeated
    ]
    for params, name in cases:
        with subtests.test(params=params):
            r = await client.get(ACCOUNTS_URL, params=params)
            assert ["query", name] in error_locs(assert_problem(r, 422))
    # The longest of each is fine.
    page = await _list(client, prefix="a" * 128, after="a" * 128, limit="1000")
    assert page == {"accounts": [], "next_after": None}
    assert await _list(client, prefix="", after="") == await _list(client)


# -- listing with API keys: only the accounts within the key's prefix ------------------------


@dataclass(frozen=True)
class Keys:
    admin: str  # every scope, every account
    team_a: str  # credits:read, accounts starting with team-a:
    team_a_writer: str  # credits:grant and credits:consume, team-a:


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def keyed_client(
    backend: str, tmp_path: Path, database_url: str | None
) -> AsyncIterator[tuple[httpx.AsyncClient, Keys]]:
    """The app on ``backend`` with API keys, holding accounts inside and outside
    ``team-a:``, and ids that only look like it."""
    keys_file = tmp_path / "api-keys.json"
    admin, _ = create_key(keys_file, "admin", tuple(Scope), "")
    team_a, _ = create_key(keys_file, "team-a-dashboard", (Scope.READ,), "team-a:")
    writer, _ = create_key(keys_file, "team-a-jobs", (Scope.GRANT, Scope.CONSUME), "team-a:")
    settings = make_settings(backend, tmp_path / "data", database_url)
    app = create_app(Settings(**{**settings.model_dump(), "api_keys_file": keys_file}))
    async with running(app) as client:
        for account_id in _KEYED_ACCOUNTS:
            r = await client.post(
                url(account_id, "grants"),
                json={"amount": 5, "timestamp": 0, "expiry": 9},
                headers=bearer(admin),
            )
            ok(r, 201)
        yield client, Keys(admin, team_a, writer)


_KEYED_ACCOUNTS = [
    "team-a", "team-a-x", "team-a.x", "team-a:", "team-a:job-1", "team-a:job-2", "team-a:x",
    "team-a:xy", "team-a_x", "team-ab", "team-b:job-1", "TEAM-A:job-1", "xteam-a:job",
]  # fmt: skip
_TEAM_A = ["team-a:", "team-a:job-1", "team-a:job-2", "team-a:x", "team-a:xy"]


async def test_a_key_with_a_prefix_lists_only_its_accounts(
    keyed_client: tuple[httpx.AsyncClient, Keys], subtests: pytest.Subtests
) -> None:
    client, keys = keyed_client
    team_a = bearer(keys.team_a)
    cases: dict[str | None, list[str]] = {
        None: _TEAM_A,  # no prefix: the key's
        "": _TEAM_A,
        "t": _TEAM_A,  # a shorter prefix: still the key's
        "team-a": _TEAM_A,
        "team-a:": _TEAM_A,
        "team-a:x": ["team-a:x", "team-a:xy"],  # a longer one narrows it
        "team-a:job-": ["team-a:job-1", "team-a:job-2"],
        "team-a:zzz": [],
        "team-b:": [],  # another team's: an empty page, not an error
        "team-a-": [],
        "team-ab": [],
        "TEAM-A:": [],
        "x": [],
    }
    for prefix, expected in cases.items():
        with subtests.test(prefix=prefix):
            assert await account_ids(client, 1000, prefix, team_a) == expected
            assert await account_ids(client, 1, prefix, team_a) == expected
    # The exact answers, for what a dashboard receives.
    r = await client.get(ACCOUNTS_URL, params={"prefix": "team-b:"}, headers=team_a)
    assert ok(r) == {"accounts": [], "next_after": None}
    r = await client.get(ACCOUNTS_URL, params={"limit": "2"}, headers=team_a)
    assert ok(r)["next_after"] == "team-a:job-1"
    # A cursor cannot reach outside the key's range either way.
    for after, expected in (("A", _TEAM_A), ("team-a-x", _TEAM_A), ("team-a:x", ["team-a:xy"])):
        params = {"after": after, "limit": "1000"}
        page = ok(await client.get(ACCOUNTS_URL, params=params, headers=team_a))
        assert [a["account_id"] for a in page["accounts"]] == expected, after
    params = {"after": "team-a:xy", "limit": "1000"}
    assert ok(await client.get(ACCOUNTS_URL, params=params, headers=team_a)) == {
        "accounts": [],
        "next_after": None,
    }
    # A key without a prefix sees everything.
    everything = sorted(_KEYED_ACCOUNTS, key=lambda a: a.encode())
    assert await account_ids(client, 3, None, bearer(keys.admin)) == everything


async def test_listing_needs_the_read_scope_and_a_key(
    keyed_client: tuple[httpx.AsyncClient, Keys],
) -> None:
    client, keys = keyed_client
    problem = assert_problem(
        await client.get(ACCOUNTS_URL, headers=bearer(keys.team_a_writer)), 403
    )
    assert "credits:read" in problem["detail"]
    assert_problem(await client.get(ACCOUNTS_URL), 401)
    assert_problem(
        await client.get(ACCOUNTS_URL, headers=bearer("gck_000000000000_" + "A" * 43)), 401
    )
    # Authentication comes first: a bad query from a caller without a key is still 401.
    assert_problem(await client.get(ACCOUNTS_URL, params={"limit": "0"}), 401)
    r = await client.get(ACCOUNTS_URL, params={"limit": "0"}, headers=bearer(keys.team_a))
    assert_problem(r, 422)
