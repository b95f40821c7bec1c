"""A refused operation on an account it would have made gives that account's place in the
account bounds back at once, within its batch or its usage stream's chunk, as a single
request's account is given back when it ends (found by an adversarial test).

Before, the place stayed taken until the batch or chunk ended, so a later operation making
another account was refused (``quota-exceeded``, ``account-limit``) although the tenant or
the service held fewer accounts than its bound; on a stream the answer then depended on how
the lines fell into chunks. README: a batch's results are what the single endpoints answer,
and a stream's lines are applied as a non-atomic batch applies its operations.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.api.events import _Line, parse_line
from app.keys import Scope, create_key
from app.main import create_app
from app.service.commands import ConsumeOp, EventOp, GrantOp, Operation, VoidOp
from app.service.errors import AccountNotFound, QuotaExceeded
from app.service.ledger import Ledger
from app.service.limits import Limits
from app.service.results import BatchOutcome, ConsumptionReceipt
from app.settings import Settings
from tests.support.app_runner import running
from tests.test_api_events import EVENTS, NDJSON, c, g, ndjson, v
from tests.test_quotas import TEAM_A, embedded_ledger, ledger, quota  # noqa: F401 (a fixture)

# The tenant may hold 2 accounts and 1 live grant: the second grant is refused on the account
# it would have made, and the consumption after it makes the tenant's second account.
OPS: list[Operation] = [
    GrantOp("team-a:a", 5, 0, 100),
    GrantOp("team-a:b", 5, 0, 100),  # refused: the live-grant quota; changes nothing
    ConsumeOp("team-a:c", 1, 0),  # the tenant holds 1 account of 2: applies
]


async def test_alone_the_third_write_applies(ledger: Ledger) -> None:  # noqa: F811
    ledger.configure_tenants({TEAM_A: quota(accounts=2, live=1)}, {})
    await ledger.grant("team-a:a", 5, 0, 100)
    with pytest.raises(QuotaExceeded):
        await ledger.grant("team-a:b", 5, 0, 100)
    await ledger.consume("team-a:c", 1, 0)


async def test_in_a_non_atomic_batch_the_third_write_applies(ledger: Ledger) -> None:  # noqa: F811
    ledger.configure_tenants({TEAM_A: quota(accounts=2, live=1)}, {})
    outcome = await ledger.batch(OPS, False, None)
    assert isinstance(outcome, BatchOutcome)
    assert isinstance(outcome.results[1], QuotaExceeded)
    assert isinstance(outcome.results[2], ConsumptionReceipt), outcome.results[2]
    # The refused account was not made, and making it again later in a batch counts it once.
    page = await ledger.accounts("team-a:", "", 10)
    assert [a.account_id for a in page.accounts] == [
        "team-a:a",
        "team-a:c",
    ]


async def test_a_refused_account_made_again_later_in_the_batch(ledger: Ledger) -> None:  # noqa: F811
    ledger.configure_tenants({TEAM_A: quota(accounts=2, live=1)}, {})
    ops: list[Operation] = [
        GrantOp("team-a:a", 5, 0, 100),
        VoidOp("team-a:b", 1, 0),  # 404: team-a:b has no writes
        ConsumeOp("team-a:b", 1, 0),  # makes team-a:b: the tenant's second account
        ConsumeOp("team-a:c", 1, 0),  # a third: refused
    ]
    outcome = await ledger.batch(ops, False, None)
    assert isinstance(outcome, BatchOutcome)
    assert isinstance(outcome.results[1], AccountNotFound)
    assert isinstance(outcome.results[2], ConsumptionReceipt)
    assert isinstance(outcome.results[3], QuotaExceeded)
    assert outcome.results[3].limit == 2


async def test_in_one_stream_chunk_the_third_line_applies(ledger: Ledger) -> None:  # noqa: F811
    ledger.configure_tenants({TEAM_A: quota(accounts=2, live=1)}, {})
    lines = [
        g("e1", "team-a:a", 5, 0, 100),
        g("e2", "team-a:b", 5, 0, 100),
        c("e3", "team-a:c", 1, 0),
    ]
    chunk = []
    for number, line in enumerate(lines, 1):
        parsed = parse_line(number, json.dumps(line).encode())
        assert isinstance(parsed, _Line)
        chunk.append(EventOp(parsed.event_id, parsed.fingerprint, parsed.op))
    results = await ledger.events(chunk, 20_000)
    assert isinstance(results[1], QuotaExceeded)
    assert isinstance(results[2], ConsumptionReceipt), results[2]


async def test_the_global_account_bound_too() -> None:
    """No tenant: GPU_CREDITS_MAX_ACCOUNTS=2, a void on an account with no writes (404)."""
    ops: list[Operation] = [GrantOp("a", 5, 0, 100), VoidOp("b", 1, 0), ConsumeOp("c", 1, 0)]
    service = embedded_ledger(Limits(max_accounts=2))
    await service.start()
    try:
        outcome = await service.batch(ops, False, None)
        assert isinstance(outcome, BatchOutcome)
        assert isinstance(outcome.results[1], AccountNotFound)
        assert isinstance(outcome.results[2], ConsumptionReceipt), outcome.results[2]
    finally:
        await service.close()


def _tenant_keys(data: Path, prefixes: tuple[str, ...], **quotas: int) -> dict[str, str]:
    secrets = {}
    for prefix in prefixes:
        secret, _ = create_key(
            data / "api-keys.json",
            prefix,
            (Scope.GRANT, Scope.CONSUME, Scope.READ),
            prefix,
            **quotas,
        )
        secrets[prefix] = secret
    return secrets


async def test_batch_and_stream_answer_as_single_requests_on_every_backend(
    backend: str, tmp_path: Path, database_url: str | None
) -> None:
    """The tenant may hold 2 accounts; the second operation is a void on an account with no
    writes (404), which every backend refuses after making the account."""
    data = tmp_path / "data"
    data.mkdir()
    secrets = _tenant_keys(data, ("s:", "b:", "x:"), max_accounts=2)
    auth = {p: {"Authorization": f"Bearer {s}"} for p, s in secrets.items()}
    grant = {"amount": 5, "timestamp": 0, "expiry": 100}
    settings = Settings(storage=backend, data_dir=data, database_url=database_url)
    async with running(create_app(settings)) as client:
        single = [
            await client.post("/v1/accounts/s:a/grants", json=grant, headers=auth["s:"]),
            await client.post(
                "/v1/accounts/s:b/grants/1/void", json={"timestamp": 0}, headers=auth["s:"]
            ),
            await client.post(
                "/v1/accounts/s:c/consumptions",
                json={"amount": 1, "timestamp": 0},
                headers=auth["s:"],
            ),
        ]
        assert [r.status_code for r in single] == [201, 404, 200]
        ops = [
            {"op": "grant", "account_id": "b:a", **grant},
            {"op": "void", "account_id": "b:b", "grant_id": 1, "timestamp": 0},
            {"op": "consume", "account_id": "b:c", "amount": 1, "timestamp": 0},
        ]
        batch = await client.post(
            "/v1/batch", json={"operations": ops, "atomic": False}, headers=auth["b:"]
        )
        body = ndjson([g("e1", "x:a", 5, 0, 100), v("e2", "x:b", 1, 0), c("e3", "x:c", 1, 0)])
        streamed = await client.post(
            EVENTS, content=body, headers={"content-type": NDJSON, **auth["x:"]}
        )
        assert [r["status"] for r in batch.json()["results"]] == [201, 404, 200]
        assert [json.loads(x)["status"] for x in streamed.text.splitlines()] == [201, 404, 200]
        for prefix in ("s:", "b:", "x:"):
            listed = await client.get(f"/v1/accounts?prefix={prefix}", headers=auth[prefix])
            assert [a["account_id"] for a in listed.json()["accounts"]] == [
                f"{prefix}a",
                f"{prefix}c",
            ]


@pytest.mark.backends("memory", "sqlite")  # on postgres a tenant's live grants are not counted
async def test_a_live_grant_quota_refusal_over_http(backend: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    secrets = _tenant_keys(data, ("b:", "x:"), max_accounts=2, max_live_grants=1)
    auth = {p: {"Authorization": f"Bearer {s}"} for p, s in secrets.items()}
    grant = {"amount": 5, "timestamp": 0, "expiry": 100}
    async with running(create_app(Settings(storage=backend, data_dir=data))) as client:
        ops = [
            {"op": "grant", "account_id": "b:a", **grant},
            {"op": "grant", "account_id": "b:b", **grant},
            {"op": "consume", "account_id": "b:c", "amount": 1, "timestamp": 0},
        ]
        batch = await client.post(
            "/v1/batch", json={"operations": ops, "atomic": False}, headers=auth["b:"]
        )
        body = ndjson([g("e1", "x:a", 5, 0, 100), g("e2", "x:b", 5, 0, 100), c("e3", "x:c", 1, 0)])
        streamed = await client.post(
            EVENTS, content=body, headers={"content-type": NDJSON, **auth["x:"]}
        )
        assert [r["status"] for r in batch.json()["results"]] == [201, 409, 200]
        assert [json.loads(x)["status"] for x in streamed.text.splitlines()] == [201, 409, 200]
