"""Helpers for driving the HTTP API in process (``tests.support.app_runner``): requests on
one account, answers that must be JSON or problem documents, and snapshots of everything
observable about an account, to show that a refused request changed nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

JSON = dict[str, Any]
MAX = 2**53 - 1
PROBLEM_JSON = "application/problem+json"
ACCOUNT = "acct-1"
GOOD_GRANT: JSON = {"amount": 10, "timestamp": 5, "expiry": 10}
GOOD_CONSUME: JSON = {"amount": 10, "timestamp": 5}

# Requests refused before they reach the ledger (validation of the path, query, headers and
# body; routing) take the same way whatever the storage: such tests run on memory only.
before_storage = pytest.mark.backends("memory")


def url(account_id: str, tail: str) -> str:
    return f"/v1/accounts/{account_id}/{tail}"


def key_header(key: str | None) -> dict[str, str]:
    return {} if key is None else {"Idempotency-Key": key}


async def grant(
    client: httpx.AsyncClient,
    amount: int,
    timestamp: int,
    expiry: int,
    account_id: str = ACCOUNT,
    key: str | None = None,
) -> httpx.Response:
    body = {"amount": amount, "timestamp": timestamp, "expiry": expiry}
    return await client.post(url(account_id, "grants"), json=body, headers=key_header(key))


async def consume(
    client: httpx.AsyncClient,
    amount: int,
    timestamp: int,
    account_id: str = ACCOUNT,
    key: str | None = None,
) -> httpx.Response:
    body = {"amount": amount, "timestamp": timestamp}
    return await client.post(url(account_id, "consumptions"), json=body, headers=key_header(key))


async def balance(
    client: httpx.AsyncClient, timestamp: int | None = None, account_id: str = ACCOUNT
) -> httpx.Response:
    params = {} if timestamp is None else {"timestamp": str(timestamp)}
    return await client.get(url(account_id, "balance"), params=params)


def ok(response: httpx.Response, status: int = 200) -> JSON:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert isinstance(body, dict)
    return body


def subset(body: JSON, expected: JSON) -> JSON:
    """The members of ``body`` named in ``expected`` (missing ones as a sentinel)."""
    return {k: body.get(k, "<missing>") for k in expected}


def expect(body: JSON, expected: JSON) -> None:
    assert subset(body, expected) == expected


def assert_problem(response: httpx.Response, status: int) -> JSON:
    """An RFC 9457 problem document with the required members, answered with ``status``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].split(";")[0].strip() == PROBLEM_JSON
    body = response.json()
    assert isinstance(body, dict)
    assert isinstance(body.get("type"), str), body
    assert body["type"], body
    assert isinstance(body.get("title"), str), body
    assert body["title"], body
    assert isinstance(body.get("detail"), str), body
    assert body["detail"], body
    assert body.get("status") == response.status_code, body
    return body


def error_locs(problem: JSON) -> list[list[str | int]]:
    errors = problem.get("errors")
    assert isinstance(errors, list), problem
    assert errors, problem
    locs: list[list[str | int]] = []
    for issue in errors:
        assert isinstance(issue, dict)
        assert isinstance(issue.get("message"), str)
        assert isinstance(issue.get("type"), str)
        loc = issue.get("loc")
        assert isinstance(loc, list)
        locs.append(loc)
    return locs


async def all_entries(client: httpx.AsyncClient, account_id: str = ACCOUNT) -> list[JSON]:
    body = ok(await client.get(url(account_id, "ledger"), params={"limit": "1000"}))
    assert body["next_after"] is None, "more than 1000 entries: use paginate()"
    entries = body["entries"]
    assert isinstance(entries, list)
    return entries


async def whole_ledger(http: httpx.AsyncClient, base_url: str, account_id: str) -> list[JSON]:
    """Every entry of an account on a server at ``base_url``, following the cursor (pages of
    1,000); [] for an account that does not exist."""
    entries: list[JSON] = []
    after = 0
    while True:
        r = await http.get(
            f"{base_url}/v1/accounts/{account_id}/ledger", params={"after": after, "limit": 1000}
        )
        if r.status_code == 404 and after == 0:
            return []
        assert r.status_code == 200, r.text
        page = r.json()
        entries.extend(page["entries"])
        if page["next_after"] is None:
            return entries
        after = page["next_after"]


async def paginate(client: httpx.AsyncClient, limit: int, account_id: str = ACCOUNT) -> list[JSON]:
    entries: list[JSON] = []
    after = 0
    while True:
        params = {"limit": str(limit), "after": str(after)}
        page = ok(await client.get(url(account_id, "ledger"), params=params))
        assert page["account_id"] == account_id
        assert len(page["entries"]) <= limit
        entries.extend(page["entries"])
        if page["next_after"] is None:
            return entries
        assert page["entries"], "a page with a cursor must not be empty"
        assert page["next_after"] == page["entries"][-1]["sequence"]
        after = page["next_after"]


ACCOUNTS_URL = "/v1/accounts"


async def account_ids(
    client: httpx.AsyncClient,
    limit: int,
    prefix: str | None = None,
    headers: dict[str, str] | None = None,
) -> list[str]:
    """Every account ``GET /v1/accounts`` lists, page by page, following ``next_after``;
    checks each page's shape and cursor on the way."""
    ids: list[str] = []
    after: str | None = None
    while True:
        params = {"limit": str(limit)}
        if prefix is not None:
            params["prefix"] = prefix
        if after is not None:
            params["after"] = after
        page = ok(await client.get(ACCOUNTS_URL, params=params, headers=headers))
        assert set(page) == {"accounts", "next_after"}, page
        assert len(page["accounts"]) <= limit
        ids += [a["account_id"] for a in page["accounts"]]
        if page["next_after"] is None:
            return ids
        assert len(page["accounts"]) == limit, "only a full page has a next one"
        assert page["next_after"] == page["accounts"][-1]["account_id"]
        after = page["next_after"]


@dataclass(frozen=True)
class Snapshot:
    balance_status: int
    balance: Any
    ledger_status: int
    ledger: Any
    grants_status: int
    grants: Any


def observed(response: httpx.Response) -> Any:
    """What an answer says about the ledger: its body, less the problem document's
    ``request_id`` (which names the request, not the state)."""
    body = response.json()
    if response.status_code >= 400 and isinstance(body, dict):
        body.pop("request_id", None)
    return body


async def snapshot(client: httpx.AsyncClient, account_id: str = ACCOUNT) -> Snapshot:
    """Everything observable about an account without changing it."""
    b = await balance(client, account_id=account_id)
    ledger = await client.get(url(account_id, "ledger"), params={"limit": "1000"})
    grants = await client.get(url(account_id, "grants"))
    return Snapshot(
        b.status_code,
        observed(b),
        ledger.status_code,
        observed(ledger),
        grants.status_code,
        observed(grants),
    )


async def assert_absent(client: httpx.AsyncClient, account_id: str) -> None:
    assert_problem(await balance(client, account_id=account_id), 404)
    assert_problem(await client.get(url(account_id, "ledger")), 404)
    assert_problem(await client.get(url(account_id, "grants")), 404)
    assert_problem(await client.get(url(account_id, "grants/1")), 404)


def check_entry_totals(entry: JSON) -> None:
    assert entry["balance"] == entry["available"] - entry["debt"], entry
    assert entry["debt"] == 0 or entry["available"] == 0, entry
