"""A batch's balance read of a GPU class at a time before its account's clock hung on
PostgreSQL once the process's connection pool was used up (found by an adversarial test).

The batch is one unit of work: it holds a pooled connection (its transaction) for its whole
run, and its class read asked the same pool for a *second* connection
(``PostgresStore.read_replay``), waiting without a timeout. With
``GPU_CREDITS_PG_MAX_CONNECTIONS=1`` one such batch waited for itself forever; with the
default 20, as many such batches at once waited for each other, and every later request of
the process behind them. The read now runs on the transaction's own connection
(``PgTransaction.read_replay``). README, Batches: a batch is answered (a result per
operation, or 422 ``class_as_of``); memory and SQLite answer at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.support.app_runner import running

READ = {"op": "balance", "account_id": "", "timestamp": 5, "resource": "h100"}


async def _account(client: httpx.AsyncClient, account_id: str) -> None:
    grant = {"amount": 10, "timestamp": 0, "expiry": 100, "resources": ["h100"]}
    r = await client.post(f"/v1/accounts/{account_id}/grants", json=grant)
    assert r.status_code == 201, r.text
    r = await client.post(
        f"/v1/accounts/{account_id}/consumptions",
        json={"amount": 3, "timestamp": 10, "resource": "h100"},
    )
    assert r.status_code == 200, r.text


def _settings(
    backend: str, tmp_path: Path, database_url: str | None, pool_connections: int | None = None
) -> Settings:
    """The backend's settings; on PostgreSQL a pool of ``pool_connections`` (None: the
    default pool)."""
    settings = Settings(
        storage=backend,
        data_dir=tmp_path / "data",
        database_url=database_url,
        allow_unauthenticated=True,
    )
    if pool_connections is None:
        return settings
    return settings.model_copy(
        update={"pg_min_connections": pool_connections, "pg_max_connections": pool_connections}
    )


def _batch(account_id: str) -> dict[str, object]:
    return {"operations": [{**READ, "account_id": account_id}], "atomic": False}


@pytest.mark.backends("memory", "sqlite", "postgres")
async def test_one_connection_pool_a_class_as_of_read_in_a_batch(
    backend: str, tmp_path: Path, database_url: str | None
) -> None:
    settings = _settings(backend, tmp_path, database_url, pool_connections=1)
    async with running(create_app(settings)) as client:
        await _account(client, "a")
        alone = await client.get("/v1/accounts/a/balance?timestamp=5&resource=h100")
        assert alone.status_code == 200, alone.text
        r = await asyncio.wait_for(client.post("/v1/batch", json=_batch("a")), 10)
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["body"] == alone.json()


@pytest.mark.backends("memory", "sqlite", "postgres")
async def test_default_pool_many_class_as_of_reads_in_batches_at_once(
    backend: str, tmp_path: Path, database_url: str | None
) -> None:
    settings = _settings(backend, tmp_path, database_url)
    n = 60  # more than GPU_CREDITS_PG_MAX_CONNECTIONS (20), each on an account of its own
    async with running(create_app(settings)) as client:
        for i in range(n):
            await _account(client, f"a{i}")
        answers = await asyncio.wait_for(
            asyncio.gather(*(client.post("/v1/batch", json=_batch(f"a{i}")) for i in range(n))),
            30,
        )
        assert [r.status_code for r in answers] == [200] * n


@pytest.mark.backends("postgres")
async def test_the_hung_batch_stops_account_creation_in_every_process(
    backend: str, tmp_path: Path, database_url: str | None
) -> None:
    """A hung batch that also made an account held the account-count row's lock (taken
    when a unit of work may create accounts): no other process could create an account
    until the hung process was stopped."""
    hung = _settings(backend, tmp_path, database_url, pool_connections=1)
    other = _settings(backend, tmp_path, database_url)
    async with running(create_app(hung)) as first, running(create_app(other)) as second:
        await _account(first, "a")
        batch = {
            "operations": [
                {"op": "grant", "account_id": "new", "amount": 1, "timestamp": 0, "expiry": 9},
                {**READ, "account_id": "a"},
            ],
            "atomic": False,
        }
        # Both at once: the batch (which makes an account, so holds the account-count row
        # while it runs) and another process's new account; neither may wait for ever.
        answer, r = await asyncio.wait_for(
            asyncio.gather(
                first.post("/v1/batch", json=batch),
                second.post(
                    "/v1/accounts/other/grants",
                    json={"amount": 1, "timestamp": 0, "expiry": 9},
                ),
            ),
            20,
        )
        assert r.status_code == 201, r.text
        assert answer.status_code == 200, answer.text
