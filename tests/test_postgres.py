"""PostgreSQL specifics the backend-agnostic suites cannot see: migrations from an empty
database (applied once even when several processes start together, and by the CLI),
``serve --workers`` (allowed on postgres, refused on the embedded backends), and faults
injected around COMMIT (issue 9, item 1): a write whose COMMIT succeeded is answered with its
success whatever fails next; a COMMIT in flight when the connection dies is the
outcome-unknown 503; a failure before COMMIT is sent is the plain 503 and changes nothing;
no driver error is ever a 500. The same under real restarts: ``tests/test_pg_restarts.py``."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import asyncpg
import httpx
import pytest
from asyncpg.connection import Connection

from app.main import create_app
from app.settings import Settings
from app.storage.postgres import MIGRATIONS, PgTransaction, PostgresStore, migrate
from tests.support.app_runner import running
from tests.support.pg_server import PostgresServer
from tests.support.server_process import ServerProcess, console_script, free_port

PROBLEM = "tag:gpu-credits,2026:problem:"
OUTCOME_UNKNOWN = PROBLEM + "outcome-unknown"
UNAVAILABLE = PROBLEM + "unavailable"
FAULT_TEST_TIMEOUT_S = 60


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
    assert f"applied migrations: {[v for v, _ in MIGRATIONS]}" in first.stderr, first.stderr
    second = subprocess.run(
        [console_script(), "migrate"], env=env, capture_output=True, text=True, check=True
    )
    assert "none, the schema is current" in second.stderr, second.stderr
    tables = asyncio.run(
        _fetch(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1")
    )
    assert {r["tablename"] for r in tables} >= {"accounts", "live_grants", "entries", "idempotency"}


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
    assert [r["version"] for r in rows] == [v for v, _ in MIGRATIONS]
    indexes = asyncio.run(
        _fetch(url, "SELECT indexname FROM pg_indexes WHERE tablename = 'entries'")
    )
    assert "entries_by_time" in {r["indexname"] for r in indexes}


# -- faults around COMMIT ----------------------------------------------------------------


@dataclass
class PgApp:
    client: httpx.AsyncClient
    url: str


@pytest.fixture
async def pg_app(postgres_url: PostgresServer, tmp_path: Path) -> AsyncIterator[PgApp]:
    """The app in process on a fresh database, with a pool of ONE connection: a connection
    the service failed to give back would make the next request wait forever (the test's
    timeout then says so)."""
    url = _fresh(postgres_url)
    settings = Settings(
        storage="postgres",
        data_dir=tmp_path / "data",
        database_url=url,
        pg_min_connections=1,
        pg_max_connections=1,
    )
    app = create_app(settings)
    async with running(app) as client:
        yield PgApp(client, url)


async def _grant(
    client: httpx.AsyncClient, account_id: str, amount: int, key: str | None = None
) -> httpx.Response:
    return await client.post(
        f"/v1/accounts/{account_id}/grants",
        json={"amount": amount, "timestamp": 1, "expiry": 1000},
        headers={} if key is None else {"Idempotency-Key": key},
    )


async def _granted_amounts(url: str, account_id: str) -> list[int]:
    """The amounts of the account's grant entries in the database, in ledger order."""
    rows = await _fetch_args(
        url,
        "SELECT (details->>'amount')::bigint AS amount FROM entries "
        "WHERE account_id = $1 AND kind = 'grant' ORDER BY sequence",
        account_id,
    )
    return [r["amount"] for r in rows]


async def _fetch_args(url: str, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


def _problem_type(r: httpx.Response) -> str:
    assert r.headers["content-type"].startswith("application/problem+json"), r.text
    kind = r.json()["type"]
    assert isinstance(kind, str)
    return kind


@pytest.mark.timeout(FAULT_TEST_TIMEOUT_S)
async def test_a_failed_release_after_commit_still_answers_the_success(
    pg_app: PgApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first symptom of issue 9: after a successful COMMIT the pool resets the connection
    on release, which fails when the server is going away (asyncpg: "cannot switch to state
    15"); that was a 500 for a committed grant."""
    resets: list[object] = []

    async def broken_reset(self: Connection[Any], **kwargs: object) -> None:
        resets.append(self)
        raise asyncpg.InternalClientError(
            "cannot switch to state 15; another operation (2) is in progress"
        )

    monkeypatch.setattr(Connection, "reset", broken_reset)
    r = await _grant(pg_app.client, "released", 7, key="after-commit")
    assert r.status_code == 201, r.text
    assert r.json()["sequence"] == 1
    # Reads and the health check are answered too: their release fails the same way.
    balance = await pg_app.client.get("/v1/accounts/released/balance")
    assert balance.status_code == 200, balance.text
    assert balance.json()["balance"] == 7
    health = await pg_app.client.get("/healthz")
    assert health.status_code == 200, health.text
    assert len(resets) == 3, "the fault did not fire on every release"
    monkeypatch.undo()

    assert await _granted_amounts(pg_app.url, "released") == [7]
    # The broken connections were dropped, not leaked: the one-connection pool still serves.
    r = await _grant(pg_app.client, "released", 5)
    assert r.status_code == 201, r.text
    assert (r.json()["sequence"], r.json()["balance"]) == (2, 12)
    replay = await _grant(pg_app.client, "released", 7, key="after-commit")
    assert replay.status_code == 201, replay.text
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert await _granted_amounts(pg_app.url, "released") == [7, 5]


ORIGINAL_EXECUTE = Connection.execute
# The stubs make Connection generic; at run time it is not, hence the string.
Fault: TypeAlias = "Callable[[Connection[Any], str, tuple[Any, ...]], Awaitable[str]]"


def _on_commit(fault: Fault) -> Callable[..., Awaitable[str]]:
    """``Connection.execute`` with ``fault`` in place of every COMMIT (asyncpg's transactions
    send COMMIT through it, however they are ended); other statements run as usual."""

    async def execute(self: Connection[Any], query: str, *args: Any, **kwargs: Any) -> str:
        if query.strip().rstrip(";").upper() == "COMMIT":
            return await fault(self, query, args)
        return await ORIGINAL_EXECUTE(self, query, *args, **kwargs)

    return execute


async def _lost_after_commit(conn: Connection[Any], query: str, args: tuple[Any, ...]) -> str:
    """COMMIT reached the server and committed; its answer never came back."""
    await ORIGINAL_EXECUTE(conn, query, *args)
    raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")


@pytest.mark.timeout(FAULT_TEST_TIMEOUT_S)
async def test_connection_lost_after_commit_is_outcome_unknown_and_a_keyed_retry_replays(
    pg_app: PgApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Connection, "execute", _on_commit(_lost_after_commit))
    r = await _grant(pg_app.client, "lost", 9, key="lost-reply")
    monkeypatch.undo()
    assert r.status_code == 503, r.text
    assert _problem_type(r) == OUTCOME_UNKNOWN
    assert r.headers["Retry-After"]
    assert "same Idempotency-Key" in r.json()["detail"]
    assert await _granted_amounts(pg_app.url, "lost") == [9]  # it did commit

    retry = await _grant(pg_app.client, "lost", 9, key="lost-reply")
    assert retry.status_code == 201, retry.text
    assert retry.headers["Idempotent-Replayed"] == "true"
    assert retry.json()["sequence"] == 1
    r = await _grant(pg_app.client, "lost", 4)
    assert (r.status_code, r.json()["sequence"], r.json()["balance"]) == (201, 2, 13)
    assert await _granted_amounts(pg_app.url, "lost") == [9, 4]


def _raising(make: Callable[[], BaseException]) -> Fault:
    """A COMMIT that fails with ``make()`` without committing (the transaction is rolled
    back when the connection is reset)."""

    async def fault(conn: Connection[Any], query: str, args: tuple[Any, ...]) -> str:
        raise make()

    return fault


def _server_error(sqlstate: str, severity: str, message: str) -> asyncpg.PostgresError:
    """An error as the server sends it (asyncpg builds the class from the SQLSTATE)."""
    return asyncpg.PostgresError.new({"C": sqlstate, "S": severity, "V": severity, "M": message})


# (name, what COMMIT raises, the problem type answered)
COMMIT_FAULTS: list[tuple[str, Callable[[], BaseException], str]] = [
    # No answer to COMMIT: the outcome is unknown.
    (
        "connection lost",
        lambda: asyncpg.ConnectionDoesNotExistError(
            "connection was closed in the middle of operation"
        ),
        OUTCOME_UNKNOWN,
    ),
    (
        "socket reset",
        lambda: ConnectionResetError(104, "Connection reset by peer"),
        OUTCOME_UNKNOWN,
    ),
    ("timeout", TimeoutError, OUTCOME_UNKNOWN),
    # A FATAL as the answer may come after the commit record was written.
    (
        "server shutting down",
        lambda: _server_error("57P01", "FATAL", "terminating connection due to administrator"),
        OUTCOME_UNKNOWN,
    ),
    (
        "protocol error after sending",
        lambda: asyncpg.InternalClientError("unknown error in protocol implementation"),
        OUTCOME_UNKNOWN,
    ),
    # COMMIT never sent, or refused by the server: nothing committed, the plain 503.
    (
        "connection already closed",
        lambda: asyncpg.InterfaceError(
            "cannot call Transaction.commit(): the underlying connection is closed"
        ),
        UNAVAILABLE,
    ),
    (
        "connection already broken",
        lambda: asyncpg.InternalClientError(
            "cannot switch to state 15; another operation (2) is in progress"
        ),
        UNAVAILABLE,
    ),
    (
        "serialization failure",
        lambda: _server_error("40001", "ERROR", "could not serialize access"),
        UNAVAILABLE,
    ),
]


@pytest.mark.timeout(FAULT_TEST_TIMEOUT_S)
async def test_a_failed_commit_is_outcome_unknown_only_when_it_may_have_committed(
    pg_app: PgApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each fault on an account the process has cached: the answer's type, the database
    unchanged (none of these COMMITs committed), and the next write computed from the
    database, not from the cached tracker that had already applied the failed grant."""
    for i, (name, make, expected) in enumerate(COMMIT_FAULTS):
        account_id = f"fault-{i}"
        assert (await _grant(pg_app.client, account_id, 100)).status_code == 201
        monkeypatch.setattr(Connection, "execute", _on_commit(_raising(make)))
        r = await _grant(pg_app.client, account_id, 10, key=f"key-{i}")
        monkeypatch.undo()
        assert r.status_code == 503, (name, r.text)
        assert _problem_type(r) == expected, name
        assert await _granted_amounts(pg_app.url, account_id) == [100], name
        r = await _grant(pg_app.client, account_id, 1)
        assert r.status_code == 201, (name, r.text)
        assert (r.json()["sequence"], r.json()["balance"]) == (2, 101), name
        # The keyed grant left no record: retried, it runs (and now commits).
        retry = await _grant(pg_app.client, account_id, 10, key=f"key-{i}")
        assert retry.status_code == 201, (name, retry.text)
        assert "Idempotent-Replayed" not in retry.headers, name
        assert await _granted_amounts(pg_app.url, account_id) == [100, 1, 10], name


@pytest.mark.timeout(FAULT_TEST_TIMEOUT_S)
async def test_an_unexpected_driver_error_is_a_logged_503_never_a_500(
    pg_app: PgApp, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Errors the service does not expect from the database (here a bad query, as a bug
    would make) are still the storage's: 503 problem documents, logged with a traceback."""

    async def bad_query(self: PgTransaction, account_ids: list[str]) -> None:
        raise _server_error("42703", "ERROR", 'column "nope" does not exist')

    async def bad_read(self: PostgresStore, account_id: str) -> None:
        raise asyncpg.InternalClientError("unexpected protocol state")

    monkeypatch.setattr(PgTransaction, "lock_or_create_accounts", bad_query)
    monkeypatch.setattr(PostgresStore, "read_account", bad_read)
    with caplog.at_level(logging.ERROR):
        write = await _grant(pg_app.client, "bug", 5)
        read = await pg_app.client.get("/v1/accounts/bug/balance")
    for r in (write, read):
        assert r.status_code == 503, r.text
        assert _problem_type(r) == UNAVAILABLE
        assert r.headers["Retry-After"]
    logged = [rec for rec in caplog.records if rec.levelno >= logging.ERROR and rec.exc_info]
    assert any(
        isinstance(rec.exc_info[1], asyncpg.UndefinedColumnError) for rec in logged if rec.exc_info
    )


@pytest.mark.timeout(FAULT_TEST_TIMEOUT_S)
async def test_a_connection_lost_before_commit_is_unavailable_and_changes_nothing(
    pg_app: PgApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection dies while the transaction runs, before COMMIT is sent (as when
    PostgreSQL restarts): there is nothing to roll back on it (the server drops the
    transaction with the session), the answer is the plain 503, the database is unchanged,
    and the next request gets another connection. Under load the PostgreSQL restarts of
    ``test_pg_restarts`` reach this only by chance; here it happens every time."""
    assert (await _grant(pg_app.client, "dropped", 100)).status_code == 201

    async def dies(self: PgTransaction, account_ids: list[str]) -> None:
        self._conn.terminate()
        raise asyncpg.ConnectionDoesNotExistError(
            "connection was closed in the middle of operation"
        )

    monkeypatch.setattr(PgTransaction, "lock_or_create_accounts", dies)
    r = await _grant(pg_app.client, "dropped", 10)
    monkeypatch.undo()
    assert r.status_code == 503, r.text
    assert _problem_type(r) == UNAVAILABLE
    assert await _granted_amounts(pg_app.url, "dropped") == [100]
    r = await _grant(pg_app.client, "dropped", 1)
    assert r.status_code == 201, r.text
    assert (r.json()["sequence"], r.json()["balance"]) == (2, 101)
