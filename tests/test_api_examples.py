"""SPEC Examples 1 and 2 through the HTTP API (in process, on every storage backend), from
the one table in ``tests/support/spec_examples.py``: every answer, the ledger and the live
grants."""

from __future__ import annotations

from functools import partial

import httpx
import pytest

from tests.support.api import (
    ACCOUNT,
    all_entries,
    balance,
    consume,
    grant,
    ok,
    url,
)
from tests.support.spec_examples import EXAMPLES, Example


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
async def test_spec_example(client: httpx.AsyncClient, example: Example) -> None:
    for step in example.steps:
        r = await step.send(
            partial(grant, client), partial(consume, client), partial(balance, client)
        )
        assert ok(r, step.status) == step.body(ACCOUNT), step
        if step.op == "grant":
            assert r.headers["location"] == url(ACCOUNT, f"grants/{step.answer['grant_id']}")
    assert await all_entries(client) == example.ledger()
    live = ok(await client.get(url(ACCOUNT, "grants")))
    assert live["grants"] == example.live_grants
