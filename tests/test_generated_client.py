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
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.support.server_process import ROOT, ServerProcess
from tests.support.spec_examples import EXAMPLE_1, EXAMPLES, Example

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
    list_accounts: Any
    void_grant: Any
    put_account_settings: Any


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
            list_accounts=importlib.import_module(f"{api}.list_accounts"),
            void_grant=importlib.import_module(f"{api}.void_grant"),
            put_account_settings=importlib.import_module(f"{api}.put_account_settings"),
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


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_spec_example_through_generated_client(
    gen: Generated, client: Any, example: Example
) -> None:
    acct = f"gen-{example.name}"
    for step in example.steps:
        parsed = step.send(
            partial(_grant, gen, client, acct),
            partial(_consume, gen, client, acct),
            partial(_balance, gen, client, acct),
        )
        assert parsed.additional_properties == {}  # the document describes every member
        assert parsed.to_dict() == step.body(acct), step

    # The ledger's entries are a union of three models: each parses as the right one.
    page = gen.list_ledger_entries.sync(account_id=acct, client=client)
    assert isinstance(page, gen.models.LedgerPage), page
    assert page.next_after is None
    m = gen.models
    models = {
        "grant": m.GrantEntry,
        "consumption": m.ConsumptionEntry,
        "expiration": m.ExpirationEntry,
    }
    assert [type(e) for e in page.entries] == [models[e["kind"]] for e in example.ledger()]
    assert [e.to_dict() for e in page.entries] == example.ledger()


def test_accounts_through_generated_client(gen: Generated, client: Any) -> None:
    """listAccounts: pages of BalanceResponse items, followed through next_after."""
    for account, amount in (("gen-list:c", 3), ("gen-list:a", 1), ("gen-list:b", 2)):
        _grant(gen, client, account, amount, 4, 50)
    page = gen.list_accounts.sync(client=client, prefix="gen-list:", limit=2)
    assert isinstance(page, gen.models.AccountPage), page
    assert all(isinstance(a, gen.models.BalanceResponse) for a in page.accounts)
    assert [a.to_dict() for a in page.accounts] == [
        {
            "account_id": f"gen-list:{name}",
            "timestamp": 4,
            "balance": figure,
            "available": figure,
            "debt": 0,
            "resource": None,
            "watermark": 4,
            "final": False,
        }
        for name, figure in (("a", 1), ("b", 2))
    ]
    assert page.next_after == "gen-list:b"
    last = gen.list_accounts.sync(client=client, prefix="gen-list:", after=page.next_after)
    assert isinstance(last, gen.models.AccountPage), last
    assert [a.account_id for a in last.accounts] == ["gen-list:c"]
    assert last.next_after is None
    response = gen.list_accounts.sync_detailed(client=client, limit=0)
    assert response.status_code == 422
    assert isinstance(response.parsed, gen.models.Problem), response.content


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
    classes = {"grant": m.GrantOperation, "consume": m.ConsumeOperation}
    operations = [
        classes.get(s.op, m.BalanceOperation).from_dict(s.batch_operation(acct))
        for s in EXAMPLE_1.steps
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
    assert [(str(r.op), r.status) for r in results] == [(s.op, s.status) for s in EXAMPLE_1.steps]
    answers = {"grant": m.GrantResponse, "consume": m.ConsumeResponse}
    expected_types = [answers.get(s.op, m.BalanceResponse) for s in EXAMPLE_1.steps]
    bodies = [r.body for r in results]
    assert [type(body) for body in bodies] == expected_types
    for body in bodies:
        assert body.additional_properties == {}  # the document describes every member
    assert [body.to_dict() for body in bodies] == [s.body(acct) for s in EXAMPLE_1.steps]

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
    assert latest.to_dict() == EXAMPLE_1.last.body(acct)
    missing = gen.get_balance.sync_detailed(account_id="gen-batch-new", client=client)
    assert missing.status_code == 404
    assert isinstance(missing.parsed, m.Problem)
    page = gen.list_ledger_entries.sync(account_id=acct, client=client)
    assert isinstance(page, m.LedgerPage), page
    assert [e.sequence for e in page.entries] == [1, 2, 3, 4, 5]


def test_example_3_and_a_void_through_generated_client(gen: Generated, client: Any) -> None:
    """SPEC section 5's Example 3, then a void (section 7), as a client generated from the
    committed document sends them."""
    m, acct = gen.models, "gen-example-3"

    def grant(amount: int, ts: int, expiry: int, resources: list[str] | None = None) -> Any:
        body = m.GrantRequest(amount=amount, timestamp=ts, expiry=expiry)
        if resources is not None:
            body = m.GrantRequest(amount=amount, timestamp=ts, expiry=expiry, resources=resources)
        parsed = gen.grant_credits.sync(account_id=acct, client=client, body=body)
        assert isinstance(parsed, m.GrantResponse), parsed
        return parsed

    def consume(amount: int, ts: int, resource: str) -> Any:
        body = m.ConsumeRequest(amount=amount, timestamp=ts, resource=resource)
        parsed = gen.consume_credits.sync(account_id=acct, client=client, body=body)
        assert isinstance(parsed, m.ConsumeResponse), parsed
        return parsed

    def balance(ts: int, resource: str | None = None) -> int:
        kwargs: dict[str, Any] = {} if resource is None else {"resource": resource}
        parsed = gen.get_balance.sync(account_id=acct, client=client, timestamp=ts, **kwargs)
        assert isinstance(parsed, m.BalanceResponse), parsed
        return int(parsed.balance)

    assert grant(100, 0, 50, ["h100"]).resources == ["h100"]
    grant(40, 0, 30)
    assert consume(30, 1, "a100").debt == 0
    assert consume(120, 2, "h100").debt == 10
    assert (balance(3), balance(3, "a100")) == (-10, 0)
    assert grant(25, 4, 60, ["a100"]).retained == 25
    assert (balance(5), balance(5, "h100")) == (15, -10)
    assert grant(15, 6, 70).settled_debt == 10
    assert (balance(6, "h100"), balance(6, "a100"), balance(6)) == (5, 30, 30)

    voided = gen.void_grant.sync(
        account_id=acct, grant_id=3, client=client, body=m.VoidRequest(timestamp=7)
    )
    assert isinstance(voided, m.VoidResponse), voided
    assert (voided.amount, voided.available, voided.debt) == (25, 5, 0)
    again = gen.void_grant.sync_detailed(
        account_id=acct, grant_id=3, client=client, body=m.VoidRequest(timestamp=8)
    )
    assert again.status_code == 409
    assert isinstance(again.parsed, m.Problem), again.content
    page = gen.list_ledger_entries.sync(account_id=acct, client=client)
    assert isinstance(page.entries[-1], m.VoidEntry), page.entries[-1]


def test_example_4_through_generated_client(gen: Generated, client: Any) -> None:
    """SPEC section 6's Example 4 (W = 10) as a client generated from the committed document
    sends it: the window set through putAccountSettings, late grants restating the
    consumption, the ledger in effective order, a too-late write refused."""
    m, acct = gen.models, "gen-example-4"

    def grant(amount: int, ts: int, expiry: int) -> Any:
        body = m.GrantRequest(amount=amount, timestamp=ts, expiry=expiry)
        parsed = gen.grant_credits.sync(account_id=acct, client=client, body=body)
        assert isinstance(parsed, m.GrantResponse), parsed
        return parsed

    grant(50, 10, 100)
    settings = gen.put_account_settings.sync(
        account_id=acct, client=client, body=m.AccountSettingsRequest(lateness_window=10)
    )
    assert isinstance(settings, m.AccountSettingsResponse), settings
    assert (settings.lateness_window, settings.inherited, settings.watermark) == (10, False, 10)
    consumed = gen.consume_credits.sync(
        account_id=acct, client=client, body=m.ConsumeRequest(amount=80, timestamp=20)
    )
    assert isinstance(consumed, m.ConsumeResponse), consumed
    assert (consumed.debt, consumed.restated) == (30, 0)
    late_2 = grant(40, 15, 18)
    assert (late_2.retained, late_2.restated, late_2.debt, late_2.watermark) == (40, 0, 30, 10)
    late_3 = grant(40, 12, 60)
    assert (late_3.restated, late_3.available, late_3.debt) == (1, 10, 0)
    refused = gen.consume_credits.sync_detailed(
        account_id=acct, client=client, body=m.ConsumeRequest(amount=5, timestamp=9)
    )
    assert refused.status_code == 409
    assert isinstance(refused.parsed, m.Problem), refused.content
    assert (refused.parsed.watermark, refused.parsed.account_timestamp) == (10, 20)
    page = gen.list_ledger_entries.sync(account_id=acct, client=client)
    assert [(e.kind, e.timestamp, e.revision) for e in page.entries] == [
        ("grant", 10, 0),
        ("grant", 12, 0),
        ("grant", 15, 0),
        ("expiration", 18, 0),
        ("consumption", 20, 1),
    ]
    as_of = gen.get_balance.sync(account_id=acct, client=client, timestamp=16)
    assert isinstance(as_of, m.BalanceResponse), as_of
    assert (as_of.available, as_of.final) == (130, False)
