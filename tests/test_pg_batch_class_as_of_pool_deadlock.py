"""A batch's balance read of a GPU class at a time before its account's clock hangs on
PostgreSQL once the process's connection pool is used up (found by helper-d).

The batch is one unit of work: it holds a pooled connection (its transaction) for its whole
run, and ``_PgUnitOfWork.history`` answers a class read with ``as_of(self._port._pg,
read)``, which acquires a *second* connection from the same pool
(``PostgresStore.read_replay``) and waits for it without a timeout. With
``GPU_CREDITS_PG_MAX_CONNECTIONS=1`` one such batch waits for itself forever; with the
default 20, as many such batches at once (each holding one connection and waiting for
another) wait for each other forever, and every later request of the process waits behind
them. README, Limits / Batches: a batch is answered (a result per operation, or 422
``class_as_of``), and SPEC's rules admit no hang; memory and SQLite answer at once.
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


def _batch(account_id: str) -> dict[str, object]:
    return {"operations": [{**READ, "account_id": account_id}], "atomic": False}


@pytest.mark.backends("memory", "sqlite", "postgres")
async def test_one_connection_pool_a_class_as_of_read_in_a_batch(
    backend: str, tmp_path: Path, database_url: str | None
) -> None:
    settings = Settings(
        storage=backend,
        data_dir=tmp_path / "data",
        database_url=database_url,
        allow_unauthenticated=True,
        pg_min_connections=1,
        pg_max_connections=1,
    )
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
    settings = Settings(
        storage=backend,
        data_dir=tmp_path / "data",
        database_url=database_url,
        allow_unauthenticated=True,
    )
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
    """A hung batch that also makes an account holds the account-count row's lock (taken
    when a unit of work may create accounts): no other process can create an account until
    the hung process is stopped."""
    hung = Settings(
        storage=backend,
        data_dir=tmp_path / "data",
        database_url=database_url,
        allow_unauthenticated=True,
        pg_min_connections=1,
        pg_max_connections=1,
    )
    other = hung.model_copy(update={"pg_min_connections": 2, "pg_max_connections": 20})
    async with running(create_app(hung)) as first, running(create_app(other)) as second:
        await _account(first, "a")
        batch = {
            "operations": [
                {"op": "grant", "account_id": "new", "amount": 1, "timestamp": 0, "expiry": 9},
                {**READ, "account_id": "a"},
            ],
            "atomic": False,
        }
        stuck = asyncio.create_task(first.post("/v1/batch", json=batch))
        await asyncio.sleep(1)
        try:
            r = await asyncio.wait_for(
                second.post(
                    "/v1/accounts/other/grants",
                    json={"amount": 1, "timestamp": 0, "expiry": 9},
                ),
                10,
            )
            assert r.status_code == 201, r.text
            answer = await asyncio.wait_for(stuck, 10)
            assert answer.status_code == 200, answer.text
        finally:
            stuck.cancel()
