"""The Python client generated from the COMMITTED ``openapi/openapi.json`` and committed under
``clients/python`` (SPEC section 3: "a client generated from the file works unmodified";
``tests/test_clients.py`` checks it is what the generator writes from that file now) runs the
SPEC examples against a real server process with an API key, as a user imports it, and parses
error responses as the documented ``Problem`` model. The imports are typed: ``mypy --strict``
checks this file against the client's own annotations."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, Protocol

import pytest
from gpu_credits_client import AuthenticatedClient
from gpu_credits_client import models as m
from gpu_credits_client.api.credits_ import (
    apply_batch,
    consume_credits,
    get_balance,
    grant_credits,
    list_accounts,
    list_grants,
    list_ledger_entries,
    put_account_settings,
    void_grant,
)

from app.api.render import LIVE_GRANTS_PER_PIECE
from tests.support.clients import KeyedServer, keyed_server
from tests.support.spec_examples import EXAMPLE_1, EXAMPLES, Example

Operation = m.BalanceOperation | m.ConsumeOperation | m.GrantOperation | m.VoidOperation


class Answer(Protocol):
    """What every generated response model has."""

    additional_properties: dict[str, Any]

    def to_dict(self) -> dict[str, Any]: ...


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyedServer]:
    with keyed_server(tmp_path_factory.mktemp("generated-client") / "data") as started:
        yield started


@pytest.fixture
def client(keyed: KeyedServer) -> Iterator[AuthenticatedClient]:
    c = AuthenticatedClient(
        base_url=keyed.server.base_url, token=keyed.key, raise_on_unexpected_status=True
    )
    with c as opened:
        yield opened


def _grant(
    client: AuthenticatedClient, account: str, amount: int, ts: int, expiry: int
) -> m.GrantResponse:
    body = m.GrantRequest(amount=amount, timestamp=ts, expiry=expiry)
    response = grant_credits.sync_detailed(account_id=account, client=client, body=body)
    assert response.status_code == 201, response.content
    parsed = response.parsed
    assert isinstance(parsed, m.GrantResponse), response.content
    assert response.headers["Location"] == f"/v1/accounts/{account}/grants/{parsed.grant_id}"
    return parsed


def _consume(client: AuthenticatedClient, account: str, amount: int, ts: int) -> m.ConsumeResponse:
    body = m.ConsumeRequest(amount=amount, timestamp=ts)
    parsed = consume_credits.sync(account_id=account, client=client, body=body)
    assert isinstance(parsed, m.ConsumeResponse), parsed
    return parsed


def _balance(client: AuthenticatedClient, account: str, ts: int) -> m.BalanceResponse:
    parsed = get_balance.sync(account_id=account, client=client, timestamp=ts)
    assert isinstance(parsed, m.BalanceResponse), parsed
    assert (parsed.account_id, parsed.timestamp) == (account, ts)
    return parsed


def _ledger(client: AuthenticatedClient, account: str) -> m.LedgerPage:
    page = list_ledger_entries.sync(account_id=account, client=client)
    assert isinstance(page, m.LedgerPage), page
    return page


def _figures(parsed: m.BalanceResponse) -> tuple[int, int, int]:
    return parsed.balance, parsed.available, parsed.debt


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_spec_example_through_generated_client(
    client: AuthenticatedClient, example: Example
) -> None:
    acct = f"gen-{example.name}"
    grant: Callable[[int, int, int], Answer] = partial(_grant, client, acct)
    consume: Callable[[int, int], Answer] = partial(_consume, client, acct)
    balance: Callable[[int], Answer] = partial(_balance, client, acct)
    for step in example.steps:
        parsed = step.send(grant, consume, balance)
        assert parsed.additional_properties == {}  # the document describes every member
        assert parsed.to_dict() == step.body(acct), step

    # The ledger's entries are a union of three models: each parses as the right one.
    page = _ledger(client, acct)
    assert page.next_after is None
    models: dict[str, type[Answer]] = {
        "grant": m.GrantEntry,
        "consumption": m.ConsumptionEntry,
        "expiration": m.ExpirationEntry,
    }
    assert [type(e) for e in page.entries] == [models[e["kind"]] for e in example.ledger()]
    assert [e.to_dict() for e in page.entries] == example.ledger()


def test_a_key_is_needed(keyed: KeyedServer) -> None:
    """The service has keys: the client sends its key as a bearer token, and without a key
    the service knows, the answer is a 401 problem the client parses."""
    for token in ("gck_000000000000_" + "0" * 43, "not-a-key"):
        with AuthenticatedClient(base_url=keyed.server.base_url, token=token) as stranger:
            response = get_balance.sync_detailed(account_id="gen-stranger", client=stranger)
        assert response.status_code == 401
        assert response.headers["www-authenticate"].lower().startswith("bearer")
        assert isinstance(response.parsed, m.Problem), response.content
        assert response.parsed.status == 401
    with AuthenticatedClient(base_url=keyed.server.base_url, token=keyed.reader_key) as reader:
        body = m.GrantRequest(amount=1, timestamp=0, expiry=9)
        refused = grant_credits.sync_detailed(account_id="gen-reader", client=reader, body=body)
        assert refused.status_code == 403
        assert isinstance(refused.parsed, m.Problem), refused.content
        missing = get_balance.sync_detailed(account_id="gen-reader", client=reader)
        assert missing.status_code == 404  # the grant was not made


def test_accounts_through_generated_client(client: AuthenticatedClient) -> None:
    """listAccounts: pages of BalanceResponse items, followed through next_after."""
    for account, amount in (("gen-list:c", 3), ("gen-list:a", 1), ("gen-list:b", 2)):
        _grant(client, account, amount, 4, 50)
    page = list_accounts.sync(client=client, prefix="gen-list:", limit=2)
    assert isinstance(page, m.AccountPage), page
    assert all(isinstance(a, m.BalanceResponse) for a in page.accounts)
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
    last = list_accounts.sync(client=client, prefix="gen-list:", after=page.next_after)
    assert isinstance(last, m.AccountPage), last
    assert [a.account_id for a in last.accounts] == ["gen-list:c"]
    assert last.next_after is None
    response = list_accounts.sync_detailed(client=client, limit=0)
    assert response.status_code == 422
    assert isinstance(response.parsed, m.Problem), response.content


def test_errors_parse_as_problem(client: AuthenticatedClient) -> None:
    acct = "gen-errors"
    _grant(client, acct, 10, 7, 100)

    # A timestamp regression: 409 with the account's latest timestamp.
    body = m.ConsumeRequest(amount=1, timestamp=6)
    response = consume_credits.sync_detailed(account_id=acct, client=client, body=body)
    assert response.status_code == 409
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.parsed
    assert isinstance(problem, m.Problem), response.content
    assert problem.status == 409
    assert problem.account_timestamp == 7
    assert "7" in problem.detail
    assert problem.type_
    assert problem.title

    # Nothing changed.
    assert _figures(_balance(client, acct, 7)) == (10, 10, 0)

    # An account never seen: 404, and reading it creates nothing.
    for _ in range(2):
        missing = get_balance.sync_detailed(account_id="gen-nobody", client=client)
        assert missing.status_code == 404
        assert isinstance(missing.parsed, m.Problem), missing.content
        assert missing.parsed.status == 404
        assert missing.parsed.detail

    # Input outside the domain: 422 naming the field.
    bad = m.GrantRequest(amount=0, timestamp=8, expiry=9)
    refused = grant_credits.sync_detailed(account_id=acct, client=client, body=bad)
    assert refused.status_code == 422
    invalid = refused.parsed
    assert isinstance(invalid, m.Problem), refused.content
    assert invalid.status == 422
    assert isinstance(invalid.errors, list), invalid
    assert any("amount" in [str(part) for part in issue.loc] for issue in invalid.errors)


def test_batch_through_generated_client(client: AuthenticatedClient) -> None:
    """applyBatch: SPEC Example 1 as one batch, then an atomic batch that fails and changes
    nothing, its problem parsed with the failing operation's index and problem."""
    acct = "gen-batch-1"
    classes: dict[str, type[Operation]] = {
        "grant": m.GrantOperation,
        "consume": m.ConsumeOperation,
        "balance": m.BalanceOperation,
    }
    operations: list[Operation] = [
        classes[s.op].from_dict(s.batch_operation(acct)) for s in EXAMPLE_1.steps
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
    answers: dict[str, type[Answer]] = {"grant": m.GrantResponse, "consume": m.ConsumeResponse}
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
    refused = apply_batch.sync_detailed(client=client, body=failing)
    assert refused.status_code == 409
    assert refused.headers["content-type"].startswith("application/problem+json")
    problem = refused.parsed
    assert isinstance(problem, m.Problem), refused.content
    assert problem.status == 409
    assert problem.type_
    assert problem.title
    assert problem.detail
    # Declared members of Problem: typed attributes of the generated model.
    assert problem.operation_index == 1
    assert isinstance(problem.operation_problem, m.ProblemOperationProblemType0), problem
    inner = problem.operation_problem.to_dict()
    assert inner["status"] == 409
    assert inner["account_timestamp"] == 13
    assert str(inner["type"]).endswith("timestamp-regression")

    # Nothing applied: the account is as Example 1 left it, the new account was not created.
    latest = get_balance.sync(account_id=acct, client=client)
    assert isinstance(latest, m.BalanceResponse), latest
    assert latest.to_dict() == EXAMPLE_1.last.body(acct)
    missing = get_balance.sync_detailed(account_id="gen-batch-new", client=client)
    assert missing.status_code == 404
    assert isinstance(missing.parsed, m.Problem)
    assert [e.sequence for e in _ledger(client, acct).entries] == [1, 2, 3, 4, 5]


def test_example_3_and_a_void_through_generated_client(client: AuthenticatedClient) -> None:
    """SPEC section 5's Example 3, then a void (section 7), as a client generated from the
    committed document sends them."""
    acct = "gen-example-3"

    def grant(
        amount: int, ts: int, expiry: int, resources: list[str] | None = None
    ) -> m.GrantResponse:
        body = m.GrantRequest(amount=amount, timestamp=ts, expiry=expiry)
        if resources is not None:
            body = m.GrantRequest(amount=amount, timestamp=ts, expiry=expiry, resources=resources)
        parsed = grant_credits.sync(account_id=acct, client=client, body=body)
        assert isinstance(parsed, m.GrantResponse), parsed
        return parsed

    def consume(amount: int, ts: int, resource: str) -> m.ConsumeResponse:
        body = m.ConsumeRequest(amount=amount, timestamp=ts, resource=resource)
        parsed = consume_credits.sync(account_id=acct, client=client, body=body)
        assert isinstance(parsed, m.ConsumeResponse), parsed
        return parsed

    def balance(ts: int, resource: str | None = None) -> int:
        kwargs: dict[str, Any] = {} if resource is None else {"resource": resource}
        parsed = get_balance.sync(account_id=acct, client=client, timestamp=ts, **kwargs)
        assert isinstance(parsed, m.BalanceResponse), parsed
        return parsed.balance

    assert grant(100, 0, 50, ["h100"]).resources == ["h100"]
    grant(40, 0, 30)
    assert consume(30, 1, "a100").debt == 0
    assert consume(120, 2, "h100").debt == 10
    assert (balance(3), balance(3, "a100")) == (-10, 0)
    assert grant(25, 4, 60, ["a100"]).retained == 25
    assert (balance(5), balance(5, "h100")) == (15, -10)
    assert grant(15, 6, 70).settled_debt == 10
    assert (balance(6, "h100"), balance(6, "a100"), balance(6)) == (5, 30, 30)

    voided = void_grant.sync(
        account_id=acct, grant_id=3, client=client, body=m.VoidRequest(timestamp=7)
    )
    assert isinstance(voided, m.VoidResponse), voided
    assert (voided.amount, voided.available, voided.debt) == (25, 5, 0)
    again = void_grant.sync_detailed(
        account_id=acct, grant_id=3, client=client, body=m.VoidRequest(timestamp=8)
    )
    assert again.status_code == 409
    assert isinstance(again.parsed, m.Problem), again.content
    last_entry = _ledger(client, acct).entries[-1]
    assert isinstance(last_entry, m.VoidEntry), last_entry


def test_example_4_through_generated_client(client: AuthenticatedClient) -> None:
    """SPEC section 6's Example 4 (W = 10) as a client generated from the committed document
    sends it: the window set through putAccountSettings, late grants restating the
    consumption, the ledger in effective order, a too-late write refused."""
    acct = "gen-example-4"

    def grant(amount: int, ts: int, expiry: int) -> m.GrantResponse:
        body = m.GrantRequest(amount=amount, timestamp=ts, expiry=expiry)
        parsed = grant_credits.sync(account_id=acct, client=client, body=body)
        assert isinstance(parsed, m.GrantResponse), parsed
        return parsed

    grant(50, 10, 100)
    settings = put_account_settings.sync(
        account_id=acct, client=client, body=m.AccountSettingsRequest(lateness_window=10)
    )
    assert isinstance(settings, m.AccountSettingsResponse), settings
    assert (settings.lateness_window, settings.inherited, settings.watermark) == (10, False, 10)
    consumed = consume_credits.sync(
        account_id=acct, client=client, body=m.ConsumeRequest(amount=80, timestamp=20)
    )
    assert isinstance(consumed, m.ConsumeResponse), consumed
    assert (consumed.debt, consumed.restated) == (30, 0)
    late_2 = grant(40, 15, 18)
    assert (late_2.retained, late_2.restated, late_2.debt, late_2.watermark) == (40, 0, 30, 10)
    late_3 = grant(40, 12, 60)
    assert (late_3.restated, late_3.available, late_3.debt) == (1, 10, 0)
    refused = consume_credits.sync_detailed(
        account_id=acct, client=client, body=m.ConsumeRequest(amount=5, timestamp=9)
    )
    assert refused.status_code == 409
    assert isinstance(refused.parsed, m.Problem), refused.content
    assert (refused.parsed.watermark, refused.parsed.account_timestamp) == (10, 20)
    assert [(e.kind, e.timestamp, e.revision) for e in _ledger(client, acct).entries] == [
        ("grant", 10, 0),
        ("grant", 12, 0),
        ("grant", 15, 0),
        ("expiration", 18, 0),
        ("consumption", 20, 1),
    ]
    as_of = get_balance.sync(account_id=acct, client=client, timestamp=16)
    assert isinstance(as_of, m.BalanceResponse), as_of
    assert (as_of.available, as_of.final) == (130, False)


def test_live_grants_through_generated_client(client: AuthenticatedClient) -> None:
    """listGrants, sent in pieces of LIVE_GRANTS_PER_PIECE grants (chunked, no
    Content-Length), parses whole as ``LiveGrantsResponse``: every grant, in order, labels
    with non-ASCII text, U+2028 and control characters as given; with ``resource`` too."""
    acct = "gen-live-grants"
    count = 2 * LIVE_GRANTS_PER_PIECE + 1
    metadata = {"note": "\x01\u2028é😀", "empty": ""}
    operations: list[Operation] = [
        m.GrantOperation.from_dict(
            {"op": "grant", "account_id": acct, "amount": 1, "timestamp": 0, "expiry": 10 + i}
            | ({"resources": ["h100"]} if i % 2 else {})
            | ({"name": f"grant {i} — ünïcode", "metadata": metadata} if i % 3 else {})
        )
        for i in range(count)
    ]
    batch = apply_batch.sync(client=client, body=m.BatchRequest(operations=operations))
    assert isinstance(batch, m.BatchResponse), batch
    assert batch.failed == 0, batch.to_dict()

    response = list_grants.sync_detailed(account_id=acct, client=client)
    assert response.status_code == 200, response.content
    assert response.headers["Content-Type"] == "application/json"
    assert "X-Request-ID" in response.headers
    parsed = response.parsed
    assert isinstance(parsed, m.LiveGrantsResponse), response.content
    assert parsed.additional_properties == {}
    assert parsed.to_dict() == json.loads(response.content)
    assert [g.grant_id for g in parsed.grants] == list(range(1, count + 1))
    labelled = [g.to_dict() for g in parsed.grants if g.grant_id % 3 != 1]
    assert all(g["metadata"] == metadata for g in labelled)
    assert labelled[0]["name"] == "grant 1 — ünïcode"

    by_class = list_grants.sync(account_id=acct, client=client, resource="h100")
    assert isinstance(by_class, m.LiveGrantsResponse), by_class
    assert (by_class.resource, by_class.available) == ("h100", count)
    assert [g.grant_id for g in by_class.grants] == list(range(1, count + 1))
