"""A Python client generated from the COMMITTED ``openapi/openapi.json`` (SPEC section 3: "a
client generated from the file works unmodified") runs the SPEC examples against a real
server process, and parses error responses as the documented ``Problem`` model."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.server_process import ROOT, ServerProcess

PACKAGE = "gpu_credits_client"
VENV_BIN = ROOT / ".venv" / "bin"


def _generator() -> str:
    for candidate in (VENV_BIN, Path(sys.executable).parent):
        exe = candidate / "openapi-python-client"
        if exe.exists():
            return str(exe)
    pytest.fail("openapi-python-client is not installed in the project's virtualenv")


@dataclass(frozen=True)
class Generated:
    """The generated package's modules (typed Any: there are no stubs for generated code)."""

    Client: Any
    models: Any
    grant_credits: Any
    consume_credits: Any
    get_balance: Any
    list_ledger_entries: Any


@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Generated]:
    out_root = tmp_path_factory.mktemp("generated-client")
    env = {
        **os.environ,
        # The generator's post-hooks run ``ruff``: make it the project's.
        "PATH": os.pathsep.join(
            [str(VENV_BIN), str(Path(sys.executable).parent), os.environ["PATH"]]
        ),
    }
    proc = subprocess.run(
        [
            _generator(),
            "generate",
            "--path",
            str(ROOT / "openapi" / "openapi.json"),
            "--meta",
            "none",
            "--output-path",
            str(out_root / PACKAGE),
        ],
        env=env,
        cwd=out_root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    # The generator reports parts of the document it could not turn into code as warnings.
    assert "warning" not in output.lower(), output

    sys.path.insert(0, str(out_root))
    try:
        api = f"{PACKAGE}.api.credits_"
        yield Generated(
            Client=importlib.import_module(PACKAGE).Client,
            models=importlib.import_module(f"{PACKAGE}.models"),
            grant_credits=importlib.import_module(f"{api}.grant_credits"),
            consume_credits=importlib.import_module(f"{api}.consume_credits"),
            get_balance=importlib.import_module(f"{api}.get_balance"),
            list_ledger_entries=importlib.import_module(f"{api}.list_ledger_entries"),
        )
    finally:
        sys.path.remove(str(out_root))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


@pytest.fixture
def client(gen: Generated, server: ServerProcess) -> Iterator[Any]:
    c = gen.Client(base_url=server.base_url, raise_on_unexpected_status=True)
    with c as opened:
        yield opened


def _grant(gen: Generated, client: Any, account: str, amount: int, ts: int, expiry: int) -> Any:
    body = gen.models.GrantRequest(amount=amount, timestamp=ts, expiry=expiry)
    response = gen.grant_credits.sync_detailed(account_id=account, client=client, body=body)
    assert response.status_code == 201, response.content
    parsed = response.parsed
    assert isinstance(parsed, gen.models.GrantResponse), response.content
    assert response.headers["Location"] == f"/v1/accounts/{account}/grants/{parsed.grant_id}"
    return parsed


def _consume(gen: Generated, client: Any, account: str, amount: int, ts: int) -> Any:
    body = gen.models.ConsumeRequest(amount=amount, timestamp=ts)
    parsed = gen.consume_credits.sync(account_id=account, client=client, body=body)
    assert isinstance(parsed, gen.models.ConsumeResponse), parsed
    return parsed


def _balance(gen: Generated, client: Any, account: str, ts: int) -> Any:
    parsed = gen.get_balance.sync(account_id=account, client=client, timestamp=ts)
    assert isinstance(parsed, gen.models.BalanceResponse), parsed
    assert (parsed.account_id, parsed.timestamp) == (account, ts)
    return parsed


def _figures(parsed: Any) -> tuple[int, int, int]:
    return parsed.balance, parsed.available, parsed.debt


def test_spec_example_1_through_generated_client(gen: Generated, client: Any) -> None:
    acct = "gen-example-1"
    g1 = _grant(gen, client, acct, 100, 0, 10)
    assert (g1.account_id, g1.grant_id, g1.sequence, g1.timestamp) == (acct, 1, 1, 0)
    assert (g1.amount, g1.expiry, g1.settled_debt, g1.retained) == (100, 10, 0, 100)
    assert _figures(g1) == (100, 100, 0)
    assert g1.additional_properties == {}  # the document describes every member

    g2 = _grant(gen, client, acct, 50, 2, 5)
    assert (g2.grant_id, g2.retained) == (2, 50)
    assert _figures(g2) == (150, 150, 0)

    c1 = _consume(gen, client, acct, 70, 3)
    assert c1.debt == 0
    assert (c1.sequence, c1.amount, c1.consumed, c1.debt_added) == (3, 70, 70, 0)
    assert _figures(c1) == (80, 80, 0)
    assert [(a.grant_id, a.expiry, a.amount) for a in c1.allocation] == [(2, 5, 50), (1, 10, 20)]
    assert c1.additional_properties == {}

    assert _figures(_balance(gen, client, acct, 4)) == (80, 80, 0)

    c2 = _consume(gen, client, acct, 90, 8)
    assert c2.debt == 10
    assert (c2.consumed, c2.debt_added) == (80, 10)
    assert _figures(c2) == (-10, 0, 10)
    assert _figures(_balance(gen, client, acct, 8)) == (-10, 0, 10)

    g3 = _grant(gen, client, acct, 30, 12, 20)
    assert (g3.settled_debt, g3.retained) == (10, 20)
    assert _figures(g3) == (20, 20, 0)
    assert _figures(_balance(gen, client, acct, 12)) == (20, 20, 0)


def test_spec_example_2_through_generated_client(gen: Generated, client: Any) -> None:
    acct = "gen-example-2"
    _grant(gen, client, acct, 50, 0, 5)
    assert _figures(_balance(gen, client, acct, 5)) == (0, 0, 0)
    c = _consume(gen, client, acct, 20, 6)
    assert c.debt == 20
    assert (c.consumed, c.debt_added, c.allocation) == (0, 20, [])
    assert _figures(_balance(gen, client, acct, 6)) == (-20, 0, 20)

    # The ledger's entries are a union of three models: each parses as the right one.
    page = gen.list_ledger_entries.sync(account_id=acct, client=client)
    assert isinstance(page, gen.models.LedgerPage), page
    assert page.next_after is None
    m = gen.models
    assert [type(e) for e in page.entries] == [m.GrantEntry, m.ExpirationEntry, m.ConsumptionEntry]
    expired = page.entries[1]
    assert (expired.timestamp, expired.grant_id, expired.expiry, expired.amount) == (5, 1, 5, 50)


def test_errors_parse_as_problem(gen: Generated, client: Any) -> None:
    acct = "gen-errors"
    _grant(gen, client, acct, 10, 7, 100)

    # A timestamp regression: 409 with the account's latest timestamp.
    body = gen.models.ConsumeRequest(amount=1, timestamp=6)
    response = gen.consume_credits.sync_detailed(account_id=acct, client=client, body=body)
    assert response.status_code == 409
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.parsed
    assert isinstance(problem, gen.models.Problem), response.content
    assert problem.status == 409
    assert problem.account_timestamp == 7
    assert "7" in problem.detail
    assert problem.type_
    assert problem.title

    # Nothing changed.
    assert _figures(_balance(gen, client, acct, 7)) == (10, 10, 0)

    # An account never seen: 404, and reading it creates nothing.
    for _ in range(2):
        response = gen.get_balance.sync_detailed(account_id="gen-nobody", client=client)
        assert response.status_code == 404
        problem = response.parsed
        assert isinstance(problem, gen.models.Problem), response.content
        assert problem.status == 404
        assert problem.detail

    # Input outside the domain: 422 naming the field.
    bad = gen.models.GrantRequest(amount=0, timestamp=8, expiry=9)
    response = gen.grant_credits.sync_detailed(account_id=acct, client=client, body=bad)
    assert response.status_code == 422
    problem = response.parsed
    assert isinstance(problem, gen.models.Problem), response.content
    assert problem.status == 422
    assert any("amount" in [str(part) for part in issue.loc] for issue in problem.errors)


def test_batch_through_generated_client(gen: Generated, client: Any) -> None:
    """applyBatch: SPEC Example 1 as one batch, then an atomic batch that fails and changes
    nothing, its problem parsed with the failing operation's index and problem."""
    apply_batch = importlib.import_module(f"{PACKAGE}.api.credits_.apply_batch")
    m = gen.models
    acct = "gen-batch-1"
    operations = [
        m.GrantOperation(op="grant", account_id=acct, amount=100, timestamp=0, expiry=10),
        m.GrantOperation(op="grant", account_id=acct, amount=50, timestamp=2, expiry=5),
        m.ConsumeOperation(op="consume", account_id=acct, amount=70, timestamp=3),
        m.BalanceOperation(op="balance", account_id=acct, timestamp=4),
        m.ConsumeOperation(op="consume", account_id=acct, amount=90, timestamp=8),
        m.BalanceOperation(op="balance", account_id=acct, timestamp=8),
        m.GrantOperation(op="grant", account_id=acct, amount=30, timestamp=12, expiry=20),
        m.BalanceOperation(op="balance", account_id=acct, timestamp=12),
    ]
    response = apply_batch.sync_detailed(
        client=client, body=m.BatchRequest(operations=operations), idempotency_key="gen-batch"
    )
    assert response.status_code == 200, response.content
    assert "Idempotent-Replayed" not in response.headers
    parsed = response.parsed
    assert isinstance(parsed, m.BatchResponse), response.content
    assert (parsed.succeeded, parsed.failed) == (8, 0)
    results = parsed.results
    assert [(str(r.op), r.status) for r in results] == [
        ("grant", 201),
        ("grant", 201),
        ("consume", 200),
        ("balance", 200),
        ("consume", 200),
        ("balance", 200),
        ("grant", 201),
        ("balance", 200),
    ]
    bodies = [r.body for r in results]
    expected_types = [
        m.GrantResponse,
        m.GrantResponse,
        m.ConsumeResponse,
        m.BalanceResponse,
        m.ConsumeResponse,
        m.BalanceResponse,
        m.GrantResponse,
        m.BalanceResponse,
    ]
    assert [type(body) for body in bodies] == expected_types
    for body in bodies:
        assert body.account_id == acct
        assert body.additional_properties == {}  # the document describes every member
    assert [_figures(body) for body in bodies] == [
        (100, 100, 0),
        (150, 150, 0),
        (80, 80, 0),
        (80, 80, 0),
        (-10, 0, 10),
        (-10, 0, 10),
        (20, 20, 0),
        (20, 20, 0),
    ]
    c1 = bodies[2]
    assert [(a.grant_id, a.expiry, a.amount) for a in c1.allocation] == [(2, 5, 50), (1, 10, 20)]
    c2 = bodies[4]
    assert (c2.debt, c2.consumed, c2.debt_added) == (10, 80, 10)
    g3 = bodies[6]
    assert (g3.grant_id, g3.sequence, g3.settled_debt, g3.retained) == (3, 5, 10, 20)

    # The same batch again with the key: the first answer, byte for byte.
    again = apply_batch.sync_detailed(
        client=client, body=m.BatchRequest(operations=operations), idempotency_key="gen-batch"
    )
    assert again.status_code == 200
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.content == response.content

    # Atomic: the grant at 13 would apply, the consumption at 5 is a regression, so neither is.
    failing = m.BatchRequest(
        atomic=True,
        operations=[
            m.GrantOperation(op="grant", account_id=acct, amount=5, timestamp=13, expiry=30),
            m.ConsumeOperation(op="consume", account_id=acct, amount=1, timestamp=5),
            m.GrantOperation(
                op="grant", account_id="gen-batch-new", amount=1, timestamp=0, expiry=9
            ),
        ],
    )
    response = apply_batch.sync_detailed(client=client, body=failing)
    assert response.status_code == 409
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.parsed
    assert isinstance(problem, m.Problem), response.content
    assert problem.status == 409
    assert problem.type_
    assert problem.title
    assert problem.detail
    # Declared members of Problem: typed attributes of the generated model.
    assert problem.operation_index == 1
    inner = problem.operation_problem.to_dict()
    assert isinstance(inner, dict)
    assert inner["status"] == 409
    assert inner["account_timestamp"] == 13
    assert str(inner["type"]).endswith("timestamp-regression")

    # Nothing applied: the account is as Example 1 left it, the new account was not created.
    latest = gen.get_balance.sync(account_id=acct, client=client)
    assert isinstance(latest, m.BalanceResponse), latest
    assert (latest.timestamp, *_figures(latest)) == (12, 20, 20, 0)
    missing = gen.get_balance.sync_detailed(account_id="gen-batch-new", client=client)
    assert missing.status_code == 404
    assert isinstance(missing.parsed, m.Problem)
    page = gen.list_ledger_entries.sync(account_id=acct, client=client)
    assert isinstance(page, m.LedgerPage), page
    assert [e.sequence for e in page.entries] == [1, 2, 3, 4, 5]
