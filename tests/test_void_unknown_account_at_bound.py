"""A void on an account with no writes is 404 on the single endpoint, whatever the bounds;
in a batch or a usage stream it was 409 ``account-limit`` / ``quota-exceeded`` once the
service or the tenant held its most accounts, because the batch made the account before
looking (found by an adversarial lockstep test: batches and chunks against the same
operations sent one at a time; fixed in ``Ledger._apply_batch``). README,
Batches: "Each result is the status and body the single endpoint would have answered"; a
stream's lines are applied as a non-atomic batch applies its operations; Voids: "Unknown
account or grant: 404"."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

import pytest

from app.service.commands import EventOp, GrantOp, VoidOp
from app.service.errors import AccountNotFound
from app.service.ledger import Ledger
from app.service.limits import Limits
from app.service.results import BatchOutcome
from tests.test_quotas import TEAM_A, embedded_ledger, quota


def _fp(x: object) -> str:
    return hashlib.sha256(repr(x).encode()).hexdigest()


@pytest.fixture
async def full() -> AsyncIterator[Ledger]:
    """A service that holds its most accounts (GPU_CREDITS_MAX_ACCOUNTS=1)."""
    service = embedded_ledger(Limits(max_accounts=1))
    await service.start()
    try:
        await service.grant("a", 5, 0, 100)
        yield service
    finally:
        await service.close()


async def test_single_void_is_404(full: Ledger) -> None:
    with pytest.raises(AccountNotFound):
        await full.void("b", 1, 0)


async def test_batch_void_is_404_as_alone(full: Ledger) -> None:
    outcome = await full.batch([VoidOp("b", 1, 0)], False, None)
    assert isinstance(outcome, BatchOutcome)
    assert isinstance(outcome.results[0], AccountNotFound), outcome.results[0]


async def test_atomic_batch_void_is_404_as_alone(full: Ledger) -> None:
    outcome = await full.batch([GrantOp("a", 1, 1, 100), VoidOp("b", 1, 0)], True, None)
    assert isinstance(outcome, BatchOutcome)
    assert outcome.failed_index == 1
    assert isinstance(outcome.results[0], AccountNotFound), outcome.results[0]


async def test_stream_void_line_is_404_as_alone(full: Ledger) -> None:
    op = VoidOp("b", 1, 0)
    results = await full.events([EventOp("e1", _fp(op), op)], 20_000)
    assert isinstance(results[0], AccountNotFound), results[0]


async def test_tenant_quota_too() -> None:
    service = embedded_ledger(Limits())
    await service.start()
    try:
        service.configure_tenants({TEAM_A: quota(accounts=1)}, {})
        await service.grant("team-a:1", 5, 0, 100)
        with pytest.raises(AccountNotFound):
            await service.void("team-a:2", 1, 0)
        outcome = await service.batch([VoidOp("team-a:2", 1, 0)], False, None)
        assert isinstance(outcome, BatchOutcome)
        assert isinstance(outcome.results[0], AccountNotFound), outcome.results[0]
    finally:
        await service.close()
