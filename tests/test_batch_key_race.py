"""One batch ``Idempotency-Key`` sent with two different bodies at the same time.

A batch's key is scoped to the API key that sent it, not to an account, so two batches with
the same key over different accounts hold different account locks and run side by side. The
README promises that the same key with a different body is 422 and changes nothing: of two
such batches in flight at once, exactly one may be applied, whatever the interleaving.

The first batch voids many grants of an existing account, so it reads storage (a grant's
record per void) between looking its key up and committing: the second batch, over another
account, runs in that gap.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from tests.support.api import assert_absent, assert_problem, ok

BATCH = "/v1/batch"
KEY = {"Idempotency-Key": "one-key-two-bodies"}
GRANTS = 50


@pytest.mark.backends("sqlite", "postgres")
async def test_one_batch_key_with_two_bodies_at_once_applies_only_one(
    client: httpx.AsyncClient,
) -> None:
    grant = {"op": "grant", "account_id": "voided", "amount": 1, "timestamp": 0, "expiry": 100}
    ok(await client.post(BATCH, json={"operations": [grant] * GRANTS}))
    voids = {
        "operations": [
            {"op": "void", "account_id": "voided", "grant_id": i, "timestamp": 1}
            for i in range(1, GRANTS + 1)
        ]
    }
    other = {
        "operations": [
            {"op": "grant", "account_id": "other", "amount": 5, "timestamp": 0, "expiry": 100}
        ]
    }
    first, second = await asyncio.gather(
        client.post(BATCH, json=voids, headers=KEY),
        client.post(BATCH, json=other, headers=KEY),
    )
    assert sorted([first.status_code, second.status_code]) == [200, 422], (
        f"both bodies answered with one key: {first.status_code} {first.text[:200]}; "
        f"{second.status_code} {second.text[:200]}"
    )
    if first.status_code == 422:
        assert_problem(first, 422)
        live = ok(await client.get("/v1/accounts/voided/grants"))
        assert len(live["grants"]) == GRANTS, "the refused batch voided grants"
    else:
        assert_problem(second, 422)
        await assert_absent(client, "other")
