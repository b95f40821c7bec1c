"""PostgreSQL specifics the backend-agnostic suites cannot see: migrations from an empty
database (applied once even when several processes start together, and by the CLI), and
``serve --workers`` (allowed on postgres, refused on the embedded backends)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
import uuid
from pathlib import Path

import asyncpg
import httpx
import pytest

from app.storage.postgres import MIGRATIONS, migrate
from tests.pg_server import PostgresServer
from tests.server_process import ServerProcess, console_script, free_port


def _fresh(postgres_url: PostgresServer) -> str:
    return postgres_url.create_database(f"pg_{uuid.uuid4().hex[:16]}")


async def _fetch(url: str, query: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetch(query)
    finally:
        await conn.close()


def test_processes_starting_together_migrate_an_empty_database_once(
    postgres_url: PostgresServer, tmp_path: Path
) -> None:
    url = _fresh(postgres_url)
    env = {"GPU_CREDITS_DATABASE_URL": url}
    servers = [ServerProcess(tmp_path / f"p{i}", storage="postgres", env=env) for i in range(3)]
    errors: list[BaseException] = []

    def start(server: ServerProcess) -> None:
        try:
            server.start()
        except BaseException as exc:  # reported below, with the server's log
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in servers]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        rows = asyncio.run(_fetch(url, "SELECT version FROM schema_migrations ORDER BY 1"))
        assert [r["version"] for r in rows] == [v for v, _ in MIGRATIONS]
        # All three serve the same ledger.
        r = httpx.post(
            f"{servers[0].base_url}/v1/accounts/m/grants",
            json={"amount": 5, "timestamp": 1, "expiry": 9},
        )
        assert r.status_code == 201, r.text
        for s in servers:
            assert httpx.get(f"{s.base_url}/v1/accounts/m/balance").json()["balance"] == 5
    finally:
        for s in servers:
            s.stop()


def test_migrate_command_applies_then_finds_nothing_to_do(
    postgres_url: PostgresServer,
) -> None:
    url = _fresh(postgres_url)
    env = {**os.environ, "GPU_CREDITS_STORAGE": "postgres", "GPU_CREDITS_DATABASE_URL": url}
    first = subprocess.run(
        [console_script(), "migrate"], env=env, capture_output=True, text=True, check=True
    )
    assert "applied migrations: [1, 2, 3]" in first.stderr, first.stderr
    second = subprocess.run(
        [console_script(), "migrate"], env=env, capture_output=True, text=True, check=True
    )
    assert "none, the schema is current" in second.stderr, second.stderr
    tables = asyncio.run(
        _fetch(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
    )
    assert {r["tablename"] for r in tables} >= {"accounts", "batches", "entries", "idempotency"}


def test_a_schema_newer_than_the_service_is_refused(postgres_url: PostgresServer) -> None:
    url = _fresh(postgres_url)

    async def scenario() -> None:
        conn = await asyncpg.connect(url)
        try:
            await migrate(conn)
            newest = MIGRATIONS[-1][0]
            await conn.execute("INSERT INTO schema_migrations (version) VALUES ($1)", newest + 1)
            with pytest.raises(RuntimeError, match="newer than this service knows"):
                await migrate(conn)
        finally:
            await conn.close()

    asyncio.run(scenario())


def test_serve_with_workers_needs_postgres(tmp_path: Path) -> None:
    env = {**os.environ, "GPU_CREDITS_STORAGE": "sqlite", "GPU_CREDITS_DATA_DIR": str(tmp_path)}
    refused = subprocess.run(
        [console_script(), "serve", "--port", str(free_port()), "--workers", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "storage=postgres" in refused.stderr


def test_serve_with_two_workers_on_postgres(postgres_url: PostgresServer, tmp_path: Path) -> None:
    url = _fresh(postgres_url)
    port = free_port()
    env = {**os.environ, "GPU_CREDITS_STORAGE": "postgres", "GPU_CREDITS_DATABASE_URL": url}
    log_path = tmp_path / "workers.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [console_script(), "serve", "--port", str(port), "--workers", "2"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = ServerProcess(tmp_path, storage="postgres", port=port)
    server.proc = proc
    server.log_path = log_path
    try:
        server.wait_healthy(60)
        with httpx.Client(base_url=server.base_url) as client:
            for t in range(20):
                r = client.post(
                    "/v1/accounts/w/grants", json={"amount": 5, "timestamp": t, "expiry": 1000}
                )
                assert r.status_code == 201, r.text
            assert client.get("/v1/accounts/w/balance").json()["balance"] == 100
            assert len(client.get("/v1/accounts/w/ledger").json()["entries"]) == 20
    finally:
        server.stop()
    started = [
        line for line in log_path.read_text().splitlines() if "Started server process" in line
    ]
    assert len(started) >= 2, log_path.read_text()[-2000:]


def test_a_version_1_database_upgrades_and_keeps_its_data(
    postgres_url: PostgresServer, tmp_path: Path
) -> None:
    """A database made by the release before as-of reads (schema 1) gains the index as-of
    reads use, keeps every row, and answers reads from the history it already has."""
    url = _fresh(postgres_url)

    async def make_version_1() -> None:
        conn = await asyncpg.connect(url)
        try:
            version, sql = MIGRATIONS[0]
            assert version == 1
            await conn.execute(
                "CREATE TABLE schema_migrations ("
                "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            await conn.execute(sql)
            await conn.execute("INSERT INTO schema_migrations (version) VALUES (1)")
            # The rows the version-1 service wrote for: grant 100 at 0 (expiry 10), then a
            # consumption of 30 at 4.
            await conn.execute(
                "INSERT INTO accounts VALUES ('old', 4, 0, 70, 2, 3, 2);"
                "UPDATE account_count SET n = 1;"
                "INSERT INTO batches VALUES ('old', 1, 10, 70);"
                "INSERT INTO entries VALUES "
                "('old', 1, 'grant', 0, 100, 0, 1, '{\"grant_id\": 1, \"amount\": 100, "
                '"expiry": 10, "settled_debt": 0, "retained": 100}\'),'
                "('old', 2, 'consumption', 4, 70, 0, NULL, '{\"amount\": 30, "
                '"consumed": 30, "debt_added": 0, "allocation": [{"grant_id": 1, '
                '"expiry": 10, "amount": 30}]}\')'
            )
        finally:
            await conn.close()

    asyncio.run(make_version_1())
    server = ServerProcess(tmp_path, storage="postgres", env={"GPU_CREDITS_DATABASE_URL": url})
    server.start()
    try:
        with httpx.Client(base_url=server.base_url) as client:
            as_of = client.get("/v1/accounts/old/balance", params={"timestamp": 2}).json()
            assert (as_of["available"], as_of["debt"]) == (100, 0)
            assert client.get("/v1/accounts/old/balance").json()["available"] == 70
            r = client.post("/v1/accounts/old/consumptions", json={"amount": 5, "timestamp": 5})
            assert r.status_code == 200, r.text
            assert r.json()["sequence"] == 3
            assert len(client.get("/v1/accounts/old/ledger").json()["entries"]) == 3
    finally:
        server.stop()
    rows = asyncio.run(_fetch(url, "SELECT version FROM schema_migrations ORDER BY 1"))
    assert [r["version"] for r in rows] == [1, 2, 3]
    indexes = asyncio.run(
        _fetch(url, "SELECT indexname FROM pg_indexes WHERE tablename = 'entries'")
    )
    assert "entries_by_time" in {r["indexname"] for r in indexes}
