"""PostgreSQL batches across processes (issue 14, item 4): locks in one fixed order.

Two ``gpu-credits serve`` processes share one fresh PostgreSQL database. Clients send
non-atomic batches through both at once, over the same accounts in opposite orders (one
ascending, the next descending), and every round also brings accounts that do not exist yet,
so that batches create the same accounts concurrently while others lock them. A unit of work
takes its row locks in one pass in sorted order, new accounts included, so none of this can
deadlock: every batch answers 200 with every operation applied (no 500, no 503 from a
deadlock the database broke), and each account ends with exactly the sum of what was granted.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.pg_server import PostgresServer
from tests.support.server_process import ServerProcess, postgres_processes, started

TEST_TIMEOUT_S = 120
REQUEST_TIMEOUT_S = 30.0
PROCESSES = 2
CLIENTS_PER_PROCESS = 3
ROUNDS = 6
SHARED = [f"shared-{i:02d}" for i in range(40)]  # exist after round 0, in every batch
FRESH_PER_ROUND = 20  # new accounts per round, created by whichever batch comes first
GRANT = 7
FAR_EXPIRY = 10**15


@pytest.fixture
def cluster(postgres_url: PostgresServer, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Two service processes on different ports sharing one fresh database."""
    database_url = postgres_url.create_database(f"batches_{uuid.uuid4().hex[:16]}")
    with started(postgres_processes(tmp_path, database_url, PROCESSES)) as servers:
        yield servers


def _grants(accounts: list[str], timestamp: int) -> dict[str, Any]:
    return {
        "operations": [
            {
                "op": "grant",
                "account_id": a,
                "amount": GRANT,
                "timestamp": timestamp,
                "expiry": FAR_EXPIRY,
            }
            for a in accounts
        ]
    }


@pytest.mark.timeout(TEST_TIMEOUT_S)
async def test_batches_over_the_same_accounts_in_opposite_orders_never_deadlock(
    cluster: list[ServerProcess],
) -> None:
    granted: dict[str, int] = {}
    failures: list[str] = []

    async def client(http: httpx.AsyncClient, url: str, index: int, accounts: list[str]) -> None:
        ordered = accounts if index % 2 == 0 else accounts[::-1]
        r = await http.post(f"{url}/v1/batch", json=_grants(ordered, 1))
        if r.status_code != 200:
            failures.append(f"{url} client {index}: {r.status_code} {r.text}")
            return
        body = r.json()
        if body["failed"] != 0:
            failures.append(f"{url} client {index}: {body['failed']} operations failed: {body}")
            return
        for account_id in ordered:
            granted[account_id] = granted.get(account_id, 0) + GRANT

    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as http:
        for round_ in range(ROUNDS):
            fresh = [f"new-{round_}-{i:02d}" for i in range(FRESH_PER_ROUND)]
            # Fresh accounts interleaved with the shared ones: in sorted order they fall
            # between them, so creating and locking alternate within one batch.
            accounts = sorted(SHARED + fresh, key=lambda a: (a[-2:], a))
            await asyncio.gather(
                *(
                    client(http, server.base_url, p * CLIENTS_PER_PROCESS + c, accounts)
                    for p, server in enumerate(cluster)
                    for c in range(CLIENTS_PER_PROCESS)
                )
            )
        assert not failures, "\n".join(failures)
        expected_each = ROUNDS * PROCESSES * CLIENTS_PER_PROCESS * GRANT
        assert granted[SHARED[0]] == expected_each
        for account_id, amount in sorted(granted.items()):
            for server in cluster:  # both processes read the database's state
                r = await http.get(f"{server.base_url}/v1/accounts/{account_id}/balance")
                assert r.status_code == 200, r.text
                assert r.json()["available"] == amount, (account_id, r.json())
    for server in cluster:
        assert "Traceback" not in server.log(), server.log()
