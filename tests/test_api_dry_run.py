"""``POST /v1/accounts/{id}/consumptions?dry_run=true`` on every backend: the answer is what the
consumption would answer if it were sent now (plus ``"dry_run": true``), refusals are the
ones it would get, and nothing changes: balance, ledger, live grants, clock, watermark,
account list, Idempotency-Keys; not even across a restart. A real consumption with the same
body then gets the answer the dry run promised."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.keys import Scope, create_key
from app.main import create_app
from app.settings import Settings
from tests.support.api import (
    ACCOUNT,
    ACCOUNTS_URL,
    JSON,
    MAX,
    all_entries,
    assert_absent,
    assert_problem,
    before_storage,
    consume,
    error_locs,
    expect,
    grant,
    ok,
    snapshot,
    url,
)
from tests.support.app_runner import make_settings, running

CONSUMPTIONS = url(ACCOUNT, "consumptions")


async def dry_run(
    client: httpx.AsyncClient,
    body: JSON,
    account_id: str = ACCOUNT,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    return await client.post(
        url(account_id, "consumptions"),
        json=body,
        params={"dry_run": "true"},
        headers=headers,
    )


async def everything(client: httpx.AsyncClient, account_id: str = ACCOUNT) -> tuple[Any, ...]:
    """All an account shows: balance, ledger, live grants, its clock and watermark, and the
    account list."""
    settings = await client.get(url(account_id, "settings"))
    listed = await client.get(ACCOUNTS_URL)
    return (
        await snapshot(client, account_id),
        settings.status_code,
        settings.json(),
        ok(listed)["accounts"],
    )


async def promised_then_done(
    client: httpx.AsyncClient, body: JSON, account_id: str = ACCOUNT
) -> JSON:
    """Dry-run ``body`` (twice: a dry run changes nothing, so it answers the same), check
    nothing changed, then send it for real and check the answer is the one promised."""
    before = await everything(client, account_id)
    preview = ok(await dry_run(client, body, account_id))
    assert preview.pop("dry_run") is True
    assert await everything(client, account_id) == before
    again = ok(await dry_run(client, body, account_id))
    again.pop("dry_run")
    assert again == preview
    real_response = await client.post(url(account_id, "consumptions"), json=body)
    real = ok(real_response)
    assert "dry_run" not in real
    assert real == preview
    return real


async def test_the_answer_is_the_consumption_s_and_nothing_changes(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, 100, 0, 10), 201)
    ok(await grant(client, 50, 2, 5), 201)
    real = await promised_then_done(client, {"amount": 70, "timestamp": 3})
    expect(real, {"sequence": 3, "consumed": 70, "debt_added": 0, "available": 80, "debt": 0})
    assert [(a["grant_id"], a["amount"]) for a in real["allocation"]] == [(2, 50), (1, 20)]
    # Into debt, with an expiration on the way (grant 2 is used up; grant 1 expires at 10).
    real = await promised_then_done(client, {"amount": 30, "timestamp": 12})
    expect(real, {"consumed": 0, "debt_added": 30, "debt": 30, "balance": -30})
    kinds = [e["kind"] for e in await all_entries(client)]
    assert kinds == ["grant", "grant", "consumption", "expiration", "consumption"]


async def test_a_dry_run_on_a_new_account_creates_nothing(client: httpx.AsyncClient) -> None:
    body = {"amount": 5, "timestamp": 7}
    preview = ok(await dry_run(client, body, "newcomer"))
    expect(
        preview,
        {"sequence": 1, "debt": 5, "debt_added": 5, "allocation": [], "dry_run": True},
    )
    await assert_absent(client, "newcomer")
    assert ok(await client.get(ACCOUNTS_URL))["accounts"] == []
    real = ok(await client.post(url("newcomer", "consumptions"), json=body))
    preview.pop("dry_run")
    assert real == preview


async def test_gpu_classes(client: httpx.AsyncClient) -> None:
    """SPEC Example 3's consumptions, each previewed first."""
    grants = [
        {"amount": 100, "timestamp": 0, "expiry": 50, "resources": ["h100"]},
        {"amount": 40, "timestamp": 0, "expiry": 30},
    ]
    for body in grants:
        ok(await client.post(url(ACCOUNT, "grants"), json=body), 201)
    a100 = await promised_then_done(client, {"amount": 30, "timestamp": 1, "resource": "a100"})
    expect(a100, {"debt": 0, "available": 110, "resource": "a100"})
    h100 = await promised_then_done(client, {"amount": 120, "timestamp": 2, "resource": "h100"})
    expect(h100, {"debt": 10, "debt_added": 10, "consumed": 110})
    assert [(a["grant_id"], a["amount"], a["resources"]) for a in h100["allocation"]] == [
        (2, 10, None),
        (1, 100, ["h100"]),
    ]


async def test_a_late_dry_run_says_what_it_would_restate(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 50, 10, 100), 201)
    ok(await client.put(url(ACCOUNT, "settings"), json={"lateness_window": 10}))
    ok(await consume(client, 30, 20))
    ok(await grant(client, 10, 25, 40), 201)
    ledger = await all_entries(client)
    # At 16 (the watermark is 15), before the consumption at 20, which then finds 20 instead
    # of 50 and runs 10 into debt, which the grant at 25 then settles: both restated.
    late = await promised_then_done(client, {"amount": 30, "timestamp": 16})
    expect(late, {"restated": 2, "timestamp": 16, "available": 0, "debt": 0, "watermark": 15})
    after = await all_entries(client)
    assert len(after) == len(ledger) + 1
    by_time = {e["timestamp"]: e for e in after}
    expect(by_time[20], {"revision": 1, "consumed": 20, "debt_added": 10})
    expect(by_time[25], {"revision": 1, "settled_debt": 10, "retained": 0})


async def test_refusals_are_the_consumption_s(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 10, 5, 50), 201)
    ok(await consume(client, MAX, 6))  # 10 consumed, MAX - 10 of debt
    before = await everything(client)
    for body, status, slug in [
        ({"amount": 1, "timestamp": 4}, 409, "timestamp-regression"),
        ({"amount": 11, "timestamp": 6}, 422, "total-overflow"),
    ]:
        refused = assert_problem(await dry_run(client, body), status)
        assert refused["type"].endswith(f":{slug}"), refused
        real = assert_problem(await client.post(CONSUMPTIONS, json=body), status)
        assert without_request_id(real) == without_request_id(refused)
        assert await everything(client) == before
    body = {"amount": 10, "timestamp": 6}  # debt exactly 2^53-1: accepted
    await promised_then_done(client, body)


async def test_the_account_limit_applies_and_a_dry_run_uses_none_of_it(
    backend: str, tmp_path: Path, database_url: str | None
) -> None:
    settings = Settings(
        storage=backend, data_dir=tmp_path / "data", max_accounts=2, database_url=database_url
    )
    body = {"amount": 1, "timestamp": 0}
    async with running(create_app(settings)) as client:
        ok(await grant(client, 1, 0, 5, account_id="first"), 201)
        for _ in range(3):  # each counted as a new account while it runs, then forgotten
            ok(await dry_run(client, body, "second"))
        ok(await grant(client, 1, 0, 5, account_id="third"), 201)
        refused = assert_problem(await dry_run(client, body, "fourth"), 409)
        assert refused["type"].endswith(":account-limit")
        real = assert_problem(await consume(client, 1, 0, "fourth"), 409)
        assert without_request_id(refused) == without_request_id(real)
        # An existing account is not a new one: its dry run is answered.
        ok(await dry_run(client, body, "first"))


async def test_an_idempotency_key_is_refused_and_not_stored(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 100, 0, 10), 201)
    before = await everything(client)
    body = {"amount": 5, "timestamp": 1}
    refused = assert_problem(await dry_run(client, body, headers={"Idempotency-Key": "k-1"}), 422)
    assert error_locs(refused) == [["header", "Idempotency-Key"]]
    assert "Idempotency-Key" in refused["detail"]
    assert await everything(client) == before
    # The key was not stored: another body under it is a first request, not a reuse.
    other = {"amount": 7, "timestamp": 1}
    first = await client.post(CONSUMPTIONS, json=other, headers={"Idempotency-Key": "k-1"})
    expect(ok(first), {"consumed": 7})
    assert "Idempotent-Replayed" not in first.headers
    # dry_run=false is the real consumption, key and all: a retry replays it.
    retried = await client.post(
        CONSUMPTIONS, json=other, params={"dry_run": "false"}, headers={"Idempotency-Key": "k-1"}
    )
    assert retried.headers["Idempotent-Replayed"] == "true"
    assert ok(retried) == ok(first)


async def test_many_dry_runs_leave_the_sequence_alone(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 100, 0, 1000), 201)
    for t in range(1, 30):
        expect(ok(await dry_run(client, {"amount": t, "timestamp": t})), {"sequence": 2})
    expect(ok(await consume(client, 3, 30)), {"sequence": 2, "available": 97})


@pytest.mark.backends("sqlite", "postgres")
async def test_nothing_is_written_to_storage(
    backend: str, tmp_path: Path, new_database_url: Callable[[], str | None]
) -> None:
    settings = make_settings(backend, tmp_path / "data", new_database_url())
    async with running(create_app(settings)) as client:
        ok(await grant(client, 40, 0, 100), 201)
        ok(await dry_run(client, {"amount": 30, "timestamp": 50}))
        ok(await dry_run(client, {"amount": 30, "timestamp": 1}, "ghost"))
        before = await everything(client)
    async with running(create_app(settings)) as client:
        assert await everything(client) == before
        await assert_absent(client, "ghost")
        expect(ok(await consume(client, 30, 1)), {"sequence": 2, "available": 10})


@before_storage
@pytest.mark.parametrize("value", ["yes", "1", "True", "TRUE", "", "on"])
async def test_dry_run_is_true_or_false(client: httpx.AsyncClient, value: str) -> None:
    r = await client.post(
        CONSUMPTIONS, json={"amount": 1, "timestamp": 0}, params={"dry_run": value}
    )
    assert error_locs(assert_problem(r, 422)) == [["query", "dry_run"]]
    await assert_absent(client, ACCOUNT)


@before_storage
async def test_dry_run_given_twice_is_refused(client: httpx.AsyncClient) -> None:
    r = await client.post(
        f"{CONSUMPTIONS}?dry_run=true&dry_run=true", json={"amount": 1, "timestamp": 0}
    )
    assert error_locs(assert_problem(r, 422)) == [["query", "dry_run"]]
    await assert_absent(client, ACCOUNT)


@before_storage
async def test_a_bad_body_is_refused_as_without_dry_run(client: httpx.AsyncClient) -> None:
    body = {"amount": 0, "timestamp": 0}
    refused = assert_problem(await dry_run(client, body), 422)
    real = assert_problem(await client.post(CONSUMPTIONS, json=body), 422)
    assert without_request_id(refused) == without_request_id(real)
    assert error_locs(refused) == [["body", "amount"]]


async def test_a_dry_run_needs_the_consume_scope(tmp_path: Path) -> None:
    keys_file = tmp_path / "api-keys.json"
    reader, _ = create_key(keys_file, "dashboard", (Scope.READ,), "")
    scheduler, _ = create_key(keys_file, "scheduler", (Scope.CONSUME,), "team-a:")
    app = create_app(Settings(storage="memory", data_dir=tmp_path, api_keys_file=keys_file))
    async with running(app) as client:
        body = {"amount": 1, "timestamp": 0}
        as_reader = {"Authorization": f"Bearer {reader}"}
        refused = assert_problem(await dry_run(client, body, "team-a:x", as_reader), 403)
        assert "credits:consume" in refused["detail"]
        as_scheduler = {"Authorization": f"Bearer {scheduler}"}
        assert_problem(await dry_run(client, body, "team-b:x", as_scheduler), 403)
        ok(await dry_run(client, body, "team-a:x", as_scheduler))
        assert_problem(await dry_run(client, body, "team-a:x"), 401)


def without_request_id(problem: JSON) -> JSON:
    """A problem document less its ``request_id``, which names the request, not the refusal."""
    return {k: v for k, v in problem.items() if k != "request_id"}
