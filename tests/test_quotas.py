"""Tenant quotas and the global bound on live grants (issue 9, item 7): one tenant cannot
starve the others. Service-level tests drive ``Ledger`` directly (no HTTP); one end-to-end
test runs the scenario from the issue against a real server with keys from the CLI."""

from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.adapters.embedded import EmbeddedPort
from app.adapters.postgres import PostgresPort
from app.api.render import encode_answer
from app.main import create_app
from app.quotas import Quota
from app.service.commands import ConsumeOp, GrantOp, Operation
from app.service.errors import QuotaExceeded
from app.service.idempotency import Idempotency, batch_scope
from app.service.ledger import Ledger
from app.service.limits import Limits
from app.service.results import BatchOutcome
from app.storage.memory import MemoryStore
from tests.support.app_runner import make_settings, running
from tests.support.pg_server import PostgresServer
from tests.support.server_process import ServerProcess
from tests.test_security import create_key, run_cli

TEAM_A = "team-a:"
TEAM_B = "team-b:"


def quota(accounts: int = 100, live: int = 100, keys: int = 100) -> Quota:
    return Quota(max_accounts=accounts, max_live_grants=live, max_idempotency_keys=keys)


def embedded_ledger(limits: Limits, wall_clock_s: Callable[[], float] = time.time) -> Ledger:
    port = EmbeddedPort(MemoryStore(), limits, wall_clock_s)
    return Ledger(port, encode_answer, limits, wall_clock_s)


@pytest.fixture
async def ledger() -> AsyncIterator[Ledger]:
    ledger = embedded_ledger(Limits(max_live_grants=50))
    await ledger.start()
    try:
        yield ledger
    finally:
        await ledger.close()


def key(name: str) -> Idempotency:
    fingerprint = hashlib.sha256(name.encode()).hexdigest()
    return Idempotency(name, fingerprint)


async def test_a_full_tenant_cannot_create_accounts_and_others_still_can(ledger: Ledger) -> None:
    ledger.configure_tenants({TEAM_A: quota(accounts=2), TEAM_B: quota()}, {})
    await ledger.grant("team-a:1", 5, 0, 10)
    await ledger.grant("team-a:2", 5, 0, 10)
    with pytest.raises(QuotaExceeded) as refused:
        await ledger.grant("team-a:3", 5, 0, 10)
    assert (refused.value.tenant, refused.value.quota, refused.value.limit) == (
        TEAM_A,
        "accounts",
        2,
    )
    assert "team-a:" in str(refused.value)
    await ledger.grant("team-b:1", 5, 0, 10)  # the other tenant is unaffected
    await ledger.grant("ops-account", 5, 0, 10)  # so is an account of no tenant
    await ledger.grant("team-a:1", 5, 1, 10)  # and the full tenant's existing accounts


async def test_a_failed_first_write_gives_its_account_back(ledger: Ledger) -> None:
    ledger.configure_tenants({TEAM_A: quota(accounts=1)}, {})
    with pytest.raises(ValueError, match="expiry"):
        await ledger.grant("team-a:x", 5, 10, 10)  # refused: the account is not kept
    assert (await ledger.accounts("", "", 10)).accounts == []
    await ledger.grant("team-a:y", 5, 0, 10)  # so the tenant's one account is still free
    assert [v.account_id for v in (await ledger.accounts("", "", 10)).accounts] == ["team-a:y"]


async def test_live_grants_are_counted_per_tenant_and_released(ledger: Ledger) -> None:
    ledger.configure_tenants({TEAM_A: quota(live=3)}, {})
    await ledger.grant("team-a:1", 5, 0, 10)
    await ledger.grant("team-a:1", 5, 0, 20)
    await ledger.grant("team-a:2", 5, 0, 30)
    with pytest.raises(QuotaExceeded) as refused:
        await ledger.grant("team-a:2", 5, 0, 40)
    assert (refused.value.tenant, refused.value.quota, refused.value.limit) == (
        TEAM_A,
        "live grants",
        3,
    )
    # A grant swallowed whole by debt keeps no live grant: always allowed.
    await ledger.consume("team-a:3", 7, 0)
    await ledger.grant("team-a:3", 7, 0, 50)
    # Consuming a whole live grant releases it.
    await ledger.consume("team-a:1", 5, 1)
    await ledger.grant("team-a:2", 5, 1, 40)
    # A grant whose own time expires a live grant of its account makes room for itself.
    with pytest.raises(QuotaExceeded):
        await ledger.grant("team-a:2", 5, 1, 60)
    await ledger.grant("team-a:1", 5, 20, 60)  # expiries 20 on team-a:1 ends at 20


async def test_the_service_bounds_live_grants_over_all_accounts(ledger: Ledger) -> None:
    for i in range(50):  # Limits(max_live_grants=50), accounts of no tenant
        await ledger.grant(f"acct-{i}", 1, 0, 100 + i)
    with pytest.raises(QuotaExceeded) as refused:
        await ledger.grant("acct-x", 1, 0, 100)
    assert (refused.value.tenant, refused.value.quota, refused.value.limit) == (
        None,
        "live grants",
        50,
    )
    assert "GPU_CREDITS_MAX_LIVE_GRANTS" in str(refused.value)
    await ledger.consume("acct-0", 1, 1)
    await ledger.grant("acct-x", 1, 1, 100)


async def test_idempotency_keys_per_tenant_including_batch_keys(ledger: Ledger) -> None:
    ledger.configure_tenants({TEAM_A: quota(keys=2), TEAM_B: quota(keys=2)}, {"kA": TEAM_A})
    await ledger.grant("team-a:1", 1, 0, 10, key("k1"))
    ops = [GrantOp("team-a:2", 1, 0, 10)]
    keyed = key("kb")
    keyed.scope = batch_scope("kA")  # a batch sent by team-a's key counts against team-a
    await ledger.batch(ops, atomic=False, idempotency=keyed)
    with pytest.raises(QuotaExceeded) as refused:
        await ledger.grant("team-a:1", 1, 0, 10, key("k3"))
    assert (refused.value.tenant, refused.value.quota) == (TEAM_A, "idempotency keys")
    # A retry of a key already held replays; another tenant's keys are unaffected.
    await ledger.grant("team-a:1", 1, 0, 10, key("k1"))
    await ledger.grant("team-b:1", 1, 0, 10, key("k1"))
    await ledger.grant("team-b:1", 1, 0, 10, key("k2"))


async def test_an_aborted_atomic_batch_gives_back_what_it_counted(ledger: Ledger) -> None:
    ledger.configure_tenants({TEAM_A: quota(accounts=2, live=2)}, {})
    ops: list[Operation] = [
        GrantOp("team-a:1", 5, 0, 10),
        GrantOp("team-a:2", 5, 0, 10),
        ConsumeOp("team-a:1", 1, 5),
        GrantOp("team-a:1", 5, 0, 10),  # timestamp regression: the batch is aborted
    ]
    outcome = await ledger.batch(ops, atomic=True, idempotency=None)
    assert isinstance(outcome, BatchOutcome)
    assert outcome.failed_index == 3
    # Nothing was kept, so the whole quota is still there.
    await ledger.grant("team-a:3", 5, 0, 10)
    await ledger.grant("team-a:4", 5, 0, 10)


async def test_usage_held_before_the_tenant_is_configured_is_counted(ledger: Ledger) -> None:
    for i in range(3):  # e.g. loaded at startup, or made before the key was created
        await ledger.grant(f"team-a:{i}", 5, 0, 10, key(f"k{i}"))
    ledger.configure_tenants({TEAM_A: quota(accounts=3, live=10, keys=10)}, {})
    with pytest.raises(QuotaExceeded):
        await ledger.grant("team-a:new", 5, 0, 10)
    # A raised quota takes effect with the counts kept.
    ledger.configure_tenants({TEAM_A: quota(accounts=4, live=10, keys=10)}, {})
    await ledger.grant("team-a:new", 5, 0, 10)
    with pytest.raises(QuotaExceeded):
        await ledger.grant("team-a:newer", 5, 0, 10)


async def test_nested_prefixes_both_count(ledger: Ledger) -> None:
    ledger.configure_tenants({"team-a:": quota(accounts=2), "team-a:ml:": quota(accounts=5)}, {})
    await ledger.grant("team-a:ml:1", 1, 0, 10)
    await ledger.grant("team-a:ml:2", 1, 0, 10)
    with pytest.raises(QuotaExceeded) as refused:
        await ledger.grant("team-a:ml:3", 1, 0, 10)
    assert refused.value.tenant == "team-a:"  # the parent's quota is the tighter one


def test_one_tenant_filling_its_quota_does_not_lock_out_another(tmp_path: Path) -> None:
    """The issue's scenario, end to end: a key restricted to team-a: fills its account quota
    (set with `keys create --max-accounts`); team-b's first grant still succeeds."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    team_a = create_key(data_dir, "a", "credits:grant", prefix=TEAM_A)
    done = run_cli(
        data_dir,
        "keys",
        "create",
        "--name",
        "a-small",
        "--scope",
        "credits:grant",
        "--account-prefix",
        "team-x:",
        "--max-accounts",
        "2",
    )
    assert done.returncode == 0, done.stderr
    team_x_key = done.stdout.strip()
    team_b = create_key(data_dir, "b", "credits:grant", prefix=TEAM_B)
    refused = run_cli(data_dir, "keys", "create", "--name", "n", "--scope", "credits:grant",
                      "--max-accounts", "2")  # fmt: skip
    assert refused.returncode == 2
    assert "--account-prefix" in refused.stderr
    server = ServerProcess(data_dir, env={"GPU_CREDITS_TENANT_MAX_ACCOUNTS": "3"})
    server.start()
    body = {"amount": 5, "timestamp": 0, "expiry": 10}
    try:
        with httpx.Client(base_url=server.base_url, timeout=10.0) as http:
            for i in range(3):
                r = http.post(f"/v1/accounts/team-a:{i}/grants", json=body, headers=team_a.bearer)
                assert r.status_code == 201, r.text
            full = http.post("/v1/accounts/team-a:3/grants", json=body, headers=team_a.bearer)
            assert full.status_code == 409
            problem = full.json()
            assert problem["type"].endswith(":quota-exceeded")
            assert (problem["quota"], problem["tenant"], problem["limit"]) == (
                "accounts",
                TEAM_A,
                3,
            )
            r = http.post("/v1/accounts/team-b:0/grants", json=body, headers=team_b.bearer)
            assert r.status_code == 201, r.text
            # A key's own quota overrides the default.
            x = {"Authorization": f"Bearer {team_x_key}"}
            for i in range(2):
                r = http.post(f"/v1/accounts/team-x:{i}/grants", json=body, headers=x)
                assert r.status_code == 201, r.text
            r = http.post("/v1/accounts/team-x:2/grants", json=body, headers=x)
            assert r.status_code == 409
            assert r.json()["limit"] == 2
    finally:
        server.stop()


async def test_keys_past_their_retention_give_their_room_back() -> None:
    now_s = [1_000_000.0]
    limits = Limits(idempotency_ttl_s=60.0)
    ledger = embedded_ledger(limits, lambda: now_s[0])
    await ledger.start()
    try:
        ledger.configure_tenants({TEAM_A: quota(keys=1)}, {})
        await ledger.grant("team-a:1", 1, 0, 10, key("k1"))
        with pytest.raises(QuotaExceeded):
            await ledger.grant("team-a:1", 1, 0, 10, key("k2"))
        now_s[0] += 61.0
        await ledger.prune_idempotency()  # the hourly sweep
        await ledger.grant("team-a:1", 1, 0, 10, key("k2"))
        now_s[0] += 61.0  # k2 expired, not yet swept: a new key at the quota sweeps first
        await ledger.grant("team-a:1", 1, 0, 10, key("k3"))
        with pytest.raises(QuotaExceeded):
            await ledger.grant("team-a:1", 1, 0, 10, key("k4"))
    finally:
        await ledger.close()


async def test_account_quota_on_every_backend(app: FastAPI, client: httpx.AsyncClient) -> None:
    """The same answers from memory, SQLite and PostgreSQL (where the count is the
    database's), for single writes and batches."""
    ledger = app.state.ledger
    assert isinstance(ledger, Ledger)
    ledger.configure_tenants({TEAM_A: quota(accounts=3)}, {})
    body = {"amount": 5, "timestamp": 0, "expiry": 10}
    for i in range(2):
        r = await client.post(f"/v1/accounts/team-a:{i}/grants", json=body)
        assert r.status_code == 201, r.text
    batch = {
        "operations": [
            {"op": "grant", "account_id": "team-a:2", **body},
            {"op": "grant", "account_id": "team-a:3", **body},
            {"op": "grant", "account_id": "team-b:0", **body},
        ]
    }
    r = await client.post("/v1/batch", json=batch)
    assert r.status_code == 200, r.text
    statuses = [result["status"] for result in r.json()["results"]]
    assert statuses == [201, 409, 201]
    refused = r.json()["results"][1]["body"]
    assert (refused["quota"], refused["tenant"], refused["limit"]) == ("accounts", TEAM_A, 3)
    r = await client.post("/v1/accounts/team-a:4/grants", json=body)
    assert r.status_code == 409, r.text
    assert r.json()["type"].endswith(":quota-exceeded")
    assert (await client.get("/v1/accounts/team-a:4/balance")).status_code == 404
    r = await client.post("/v1/accounts/team-a:0/grants", json={**body, "timestamp": 1})
    assert r.status_code == 201, r.text
    # The accounts the refused writes would have made are nowhere, not even in the list.
    r = await client.get("/v1/accounts")
    assert r.status_code == 200, r.text
    listed = [a["account_id"] for a in r.json()["accounts"]]
    assert listed == ["team-a:0", "team-a:1", "team-a:2", "team-b:0"]


async def test_a_postgres_process_caches_at_most_max_live_grants(
    postgres_url: PostgresServer, tmp_path: Path
) -> None:
    """On PostgreSQL the live grants are the database's; what a process holds is its cache
    of trackers, bounded by GPU_CREDITS_MAX_LIVE_GRANTS (least recently used evicted)."""
    url = postgres_url.create_database(f"cache_{uuid.uuid4().hex[:12]}")
    settings = make_settings("postgres", tmp_path / "data", url).model_copy(
        update={"max_live_grants": 5}
    )
    app = create_app(settings)
    async with running(app) as client:
        for i in range(12):
            body = {"amount": 10, "timestamp": 0, "expiry": 100 + i}
            r = await client.post(f"/v1/accounts/c{i}/grants", json=body)
            assert r.status_code == 201, r.text
        ledger = app.state.ledger
        assert isinstance(ledger, Ledger)
        port = ledger.port
        assert isinstance(port, PostgresPort)
        assert port.cached_live_grants <= 5
        # Evicted accounts reload from the database and answer exactly.
        for i in range(12):
            r = await client.post(
                f"/v1/accounts/c{i}/consumptions", json={"amount": 4, "timestamp": 1}
            )
            assert r.status_code == 200, r.text
            assert (r.json()["available"], r.json()["allocation"][0]["grant_id"]) == (6, 1)
        assert port.cached_live_grants <= 5
