"""Versioned migrations on both databases: a database made by an earlier release opens, keeps
every row, and the service answers from it as that release did; released migrations are
never edited; ``gpu-credits migrate [--status]`` through the real console script.

The old databases are built here, in tmp_path or a fresh PostgreSQL database, from the
schema and rows those releases wrote, copied below as literals: they are frozen history.
The rows are the ledger of ``tests/storage_dataset.py``, captured from a database the
release made by serving its requests.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from app.storage import redacted_url
from app.storage import sqlite as sqlite_backend
from app.storage.base import MigrationStatus, SchemaTooNew
from app.storage.postgres import MIGRATIONS as PG_MIGRATIONS
from app.storage.postgres import PostgresStore
from app.storage.sqlite import MIGRATIONS as SQLITE_MIGRATIONS
from app.storage.sqlite import SqliteStore
from tests import storage_dataset as data
from tests.support.pg_server import PostgresServer
from tests.support.server_process import console_script

DB_NAME = "gpu-credits.sqlite3"
SQLITE_VERSIONS = tuple(v for v, _ in SQLITE_MIGRATIONS)
PG_VERSIONS = tuple(v for v, _ in PG_MIGRATIONS)


def _listed(versions: tuple[int, ...]) -> str:
    return ", ".join(map(str, versions))


# sha256 of every migration a release has shipped. A database that ran one will never run
# it again, so editing it changes nothing there and splits the schema in two: append a new
# migration instead (and its hash here).
RELEASED: dict[tuple[str, int], str] = {
    ("sqlite", 1): "e13ad805945626753febf3a0d3c973fd1f50146f69d9d72adbc572b16c355596",
    ("sqlite", 2): "04dd3b902cbc1a8784da318acfba280daf6d435b061cbe1baa5ebb9192ceff24",
    ("sqlite", 3): "d7ebe03c38b575c30f81ea850f9e8acc2550783bb7c938a70f499e8bfaa22146",
    ("sqlite", 4): "2b9b273eec73d4848e88bf83541f7a3110119ec09b6768ec52876d02bfc3ff4e",
    ("postgres", 1): "3bc9fa44c7a2add5bb12a47d9b070fe70b395ce33dab39b0ea187be321e1bc53",
    ("postgres", 2): "d9e88a25920c2bedae5f2622e3fcb086d72941bc20791a183f91239625639a77",
    ("postgres", 3): "553ebc7c77129cde4180865988a1c292a6ff7259e83f330ee15d102b44092baa",
    ("postgres", 4): "f0df8158267e33764f1fab5b6b34494168ffeee6b421cc9d117bf02e01779551",
    ("postgres", 5): "98a9f96a5ed359c66c3d0bcbb9ef47979cfbf101baeb3f5ed95606862c078ac1",
    ("sqlite", 5): "44549fc6652a4895eb95fd657c061eee360cbfa6567af26cae32aa91221d3be8",
    ("postgres", 6): "1dd9d8d960ec883081e0722318a5cf94f4a76bacc2aa50586116ef907b74ce47",
    ("sqlite", 6): "5458fa810fd2d16bd595798fb500ff7308edad6882865d35d413acc413ef248f",
    ("postgres", 7): "5fed47e80a9775d77bb8e080999b8197091527fb19275460ce29184a192e396f",
    ("sqlite", 7): "6fa261b7650487a59f5043309d5775194fa5d56da44273d29581a26dfbb6a5a7",
}

# -- the release before versioned SQLite migrations (schema 1 in ``meta``) ------------------

V1_SQLITE_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS accounts (
    account_id TEXT PRIMARY KEY,
    clock INTEGER NOT NULL,
    debt INTEGER NOT NULL,
    next_grant_seq INTEGER NOT NULL,
    next_entry_seq INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
    account_id TEXT NOT NULL,
    grant_seq INTEGER NOT NULL,
    expiry INTEGER NOT NULL,
    remaining INTEGER NOT NULL,
    PRIMARY KEY (account_id, grant_seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS entries (
    account_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    timestamp INTEGER NOT NULL,
    available INTEGER NOT NULL,
    debt INTEGER NOT NULL,
    grant_seq INTEGER,
    details TEXT NOT NULL,
    PRIMARY KEY (account_id, seq)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_by_grant ON entries (account_id, grant_seq)
    WHERE kind = 'grant';
CREATE TABLE IF NOT EXISTS idempotency (
    account_id TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status_code INTEGER NOT NULL,
    body BLOB NOT NULL,
    created_at_s REAL NOT NULL,
    PRIMARY KEY (account_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS idempotency_by_age ON idempotency (created_at_s);
"""
V1_SQLITE_ROWS = """
INSERT INTO meta VALUES('schema_version','1');
INSERT INTO accounts VALUES('acme',15,0,4,6);
INSERT INTO accounts VALUES('bat',3,0,2,3);
INSERT INTO accounts VALUES('team-b:1',9,0,3,4);
INSERT INTO batches VALUES('acme',3,40,15);
INSERT INTO batches VALUES('bat',1,6,3);
INSERT INTO batches VALUES('team-b:1',2,20,9);
INSERT INTO entries VALUES('acme',1,'grant',0,100,0,1,'{"grant_id":1,"amount":100,"expiry":10,"settled_debt":0,"retained":100}');
INSERT INTO entries VALUES('acme',2,'grant',1,150,0,2,'{"grant_id":2,"amount":50,"expiry":30,"settled_debt":0,"retained":50}');
INSERT INTO entries VALUES('acme',3,'consumption',5,30,0,NULL,'{"amount":120,"consumed":120,"debt_added":0,"allocation":[{"grant_id":1,"expiry":10,"amount":100},{"grant_id":2,"expiry":30,"amount":20}]}');
INSERT INTO entries VALUES('acme',4,'consumption',12,0,10,NULL,'{"amount":40,"consumed":30,"debt_added":10,"allocation":[{"grant_id":2,"expiry":30,"amount":30}]}');
INSERT INTO entries VALUES('acme',5,'grant',15,15,0,3,'{"grant_id":3,"amount":25,"expiry":40,"settled_debt":10,"retained":15}');
INSERT INTO entries VALUES('bat',1,'grant',2,5,0,1,'{"grant_id":1,"amount":5,"expiry":6,"settled_debt":0,"retained":5}');
INSERT INTO entries VALUES('bat',2,'consumption',3,3,0,NULL,'{"amount":2,"consumed":2,"debt_added":0,"allocation":[{"grant_id":1,"expiry":6,"amount":2}]}');
INSERT INTO entries VALUES('team-b:1',1,'grant',3,7,0,1,'{"grant_id":1,"amount":7,"expiry":8,"settled_debt":0,"retained":7}');
INSERT INTO entries VALUES('team-b:1',2,'expiration',8,0,0,NULL,'{"grant_id":1,"expiry":8,"amount":7}');
INSERT INTO entries VALUES('team-b:1',3,'grant',9,9,0,2,'{"grant_id":2,"amount":9,"expiry":20,"settled_debt":0,"retained":9}');
"""  # noqa: E501  (rows as that release wrote them, one a line)
# That release's statement for idempotency rows: bodies are BLOBs, created_at_s the wall clock.
V1_SQLITE_INSERT_KEY = """
INSERT OR REPLACE INTO idempotency
    (account_id, key, fingerprint, status_code, body, created_at_s)
VALUES (?, ?, ?, ?, ?, ?)
"""

# -- PostgreSQL at version 3 (migrations 1 to 3 as released) --------------------------------

V3_POSTGRES_SCHEMA = """
CREATE TABLE schema_migrations (
    version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE accounts (
    account_id text PRIMARY KEY,
    clock bigint NOT NULL,
    debt bigint NOT NULL,
    available bigint NOT NULL,
    next_grant_seq bigint NOT NULL,
    next_entry_seq bigint NOT NULL,
    version bigint NOT NULL
);
CREATE TABLE account_count (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    n bigint NOT NULL
);
INSERT INTO account_count VALUES (true, 0);
CREATE TABLE batches (
    account_id text NOT NULL,
    grant_seq bigint NOT NULL,
    expiry bigint NOT NULL,
    remaining bigint NOT NULL,
    PRIMARY KEY (account_id, grant_seq)
);
CREATE TABLE entries (
    account_id text NOT NULL,
    seq bigint NOT NULL,
    kind text NOT NULL,
    timestamp bigint NOT NULL,
    available bigint NOT NULL,
    debt bigint NOT NULL,
    grant_seq bigint,
    details jsonb NOT NULL,
    PRIMARY KEY (account_id, seq)
);
CREATE INDEX entries_by_grant ON entries (account_id, grant_seq) WHERE kind = 'grant';
CREATE TABLE idempotency (
    scope text NOT NULL,
    key text NOT NULL,
    fingerprint text NOT NULL,
    status_code integer NOT NULL,
    body bytea NOT NULL,
    created_at_s double precision NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_by_age ON idempotency (created_at_s);
CREATE INDEX entries_by_time ON entries (account_id, timestamp, seq);
CREATE INDEX accounts_by_prefix ON accounts (account_id COLLATE "C");
INSERT INTO schema_migrations (version) VALUES (1), (2), (3);
"""
V3_POSTGRES_ROWS = """
INSERT INTO accounts VALUES ('acme', 15, 0, 15, 4, 6, 5), ('bat', 3, 0, 3, 2, 3, 1),
    ('team-b:1', 9, 0, 9, 3, 4, 2);
UPDATE account_count SET n = 3;
INSERT INTO batches VALUES ('acme', 3, 40, 15), ('bat', 1, 6, 3), ('team-b:1', 2, 20, 9);
INSERT INTO entries VALUES
('acme', 1, 'grant', 0, 100, 0, 1, '{"amount": 100, "expiry": 10, "grant_id": 1, "retained": 100, "settled_debt": 0}'),
('acme', 2, 'grant', 1, 150, 0, 2, '{"amount": 50, "expiry": 30, "grant_id": 2, "retained": 50, "settled_debt": 0}'),
('acme', 3, 'consumption', 5, 30, 0, NULL, '{"amount": 120, "consumed": 120, "allocation": [{"amount": 100, "expiry": 10, "grant_id": 1}, {"amount": 20, "expiry": 30, "grant_id": 2}], "debt_added": 0}'),
('acme', 4, 'consumption', 12, 0, 10, NULL, '{"amount": 40, "consumed": 30, "allocation": [{"amount": 30, "expiry": 30, "grant_id": 2}], "debt_added": 10}'),
('acme', 5, 'grant', 15, 15, 0, 3, '{"amount": 25, "expiry": 40, "grant_id": 3, "retained": 15, "settled_debt": 10}'),
('bat', 1, 'grant', 2, 5, 0, 1, '{"amount": 5, "expiry": 6, "grant_id": 1, "retained": 5, "settled_debt": 0}'),
('bat', 2, 'consumption', 3, 3, 0, NULL, '{"amount": 2, "consumed": 2, "allocation": [{"amount": 2, "expiry": 6, "grant_id": 1}], "debt_added": 0}'),
('team-b:1', 1, 'grant', 3, 7, 0, 1, '{"amount": 7, "expiry": 8, "grant_id": 1, "retained": 7, "settled_debt": 0}'),
('team-b:1', 2, 'expiration', 8, 0, 0, NULL, '{"amount": 7, "expiry": 8, "grant_id": 1}'),
('team-b:1', 3, 'grant', 9, 9, 0, 2, '{"amount": 9, "expiry": 20, "grant_id": 2, "retained": 9, "settled_debt": 0}');
"""  # noqa: E501
V3_POSTGRES_INSERT_KEY = "INSERT INTO idempotency VALUES ($1, $2, $3, $4, $5, $6)"


def make_v1_sqlite_file(path: Path, created_at_s: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(V1_SQLITE_SCHEMA + V1_SQLITE_ROWS)
        for scope, key, fingerprint, status, body in data.KEYS:
            conn.execute(
                V1_SQLITE_INSERT_KEY, (scope, key, fingerprint, status, body, created_at_s)
            )
    finally:
        conn.close()


async def make_v3_postgres_database(url: str, created_at_s: float) -> None:
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute(V3_POSTGRES_SCHEMA + V3_POSTGRES_ROWS)
            await conn.executemany(V3_POSTGRES_INSERT_KEY, [(*k, created_at_s) for k in data.KEYS])
    finally:
        await conn.close()


def _fresh(postgres_url: PostgresServer) -> str:
    return postgres_url.create_database(f"mig_{uuid.uuid4().hex[:16]}")


# -- released migrations --------------------------------------------------------------------


def test_released_migrations_are_never_edited() -> None:
    shipped = {
        **{("sqlite", v): sql for v, sql in SQLITE_MIGRATIONS},
        **{("postgres", v): sql for v, sql in PG_MIGRATIONS},
    }
    for where, digest in RELEASED.items():
        assert where in shipped, f"released migration {where} was removed"
        assert hashlib.sha256(shipped[where].encode()).hexdigest() == digest, (
            f"released migration {where} was edited: append a new one instead"
        )
    unlisted = sorted(set(shipped) - set(RELEASED))
    assert not unlisted, f"add the sha256 of {unlisted} to RELEASED once it ships"
    # SQLite's first migration is the schema the release before migrations created.
    assert SQLITE_MIGRATIONS[0][1] == V1_SQLITE_SCHEMA


# -- SQLite: the release before versioned migrations ------------------------------------------


async def test_a_sqlite_file_of_the_previous_release_opens_and_keeps_every_row(
    tmp_path: Path,
) -> None:
    now = time.time()
    path = tmp_path / DB_NAME
    make_v1_sqlite_file(path, now)
    store = SqliteStore(path)
    assert await store.migration_status() == MigrationStatus(applied=(1,), known=SQLITE_VERSIONS)
    loaded = await store.open(now - 3600)
    try:
        await data.assert_holds(store, now, migrated=True)
        assert {a: s.next_sequence for a, s in loaded.accounts.items()} == {
            a: s.next_sequence for a, s in data.STATES.items()
        }
        assert len(loaded.idempotency) == len(data.KEYS)
        assert await store.migration_status() == MigrationStatus(
            applied=SQLITE_VERSIONS, known=SQLITE_VERSIONS
        )
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        # That release checks this value and refuses anything but 1: it must not write
        # into the renamed column it does not know.
        assert conn.execute("SELECT value FROM meta").fetchall() == [(str(SQLITE_VERSIONS[-1]),)]
        assert [r[1] for r in conn.execute("PRAGMA table_info(idempotency)")][:1] == ["scope"]


async def test_the_service_answers_from_a_sqlite_file_of_the_previous_release(
    tmp_path: Path,
) -> None:
    make_v1_sqlite_file(tmp_path / "data" / DB_NAME, time.time())
    app = create_app(Settings(storage="sqlite", data_dir=tmp_path / "data"))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client,
    ):
        await assert_answers_as_before(client)


@pytest.mark.parametrize("orphan", ["entries", "live_grants"])
def test_sqlite_7_numbers_the_accounts_and_refuses_rows_of_no_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, orphan: str
) -> None:
    """Entries and live grants keyed by their account's number keep every row as it was
    (same account, same values), numbers go 1..n in id order; a file with a row whose
    account has no row is refused, naming check, and left as it was (nothing dropped)."""
    path = tmp_path / DB_NAME
    make_v1_sqlite_file(path, time.time())
    conn = sqlite_backend._connect(path)
    try:
        monkeypatch.setattr(sqlite_backend, "MIGRATIONS", SQLITE_MIGRATIONS[:6])
        assert sqlite_backend._migrate(conn) == [2, 3, 4, 5, 6]
        monkeypatch.undo()
        fields = {
            "entries": "sequence, kind, timestamp, available, debt, grant_id, details, rank, "
            "revision",
            "live_grants": "grant_id, expiry, remaining, resources, granted_at",
        }
        before = {
            table: conn.execute(f"SELECT account_id, {f} FROM {table} ORDER BY 1, 2").fetchall()
            for table, f in fields.items()
        }
        assert all(len({r[0] for r in rows}) > 1 for rows in before.values())
        conn.execute(f"INSERT INTO {orphan} SELECT 'ghost', {fields[orphan]} FROM {orphan} LIMIT 1")
        with pytest.raises(sqlite3.IntegrityError, match="no account row") as refused:
            sqlite_backend._migrate(conn)
        # The refusal says how to find them on this file: ``gpu-credits check`` would not
        # read it (it reads only a current schema, and tells to migrate first).
        listed = str(refused.value).split("they are: ", 1)[1]
        assert conn.execute(listed).fetchall() == [("ghost",)]
        assert conn.execute("SELECT max(version) FROM schema_migrations").fetchone() == (6,)
        count = conn.execute(f"SELECT count(*) FROM {orphan}").fetchone()
        assert count == (len(before[orphan]) + 1,)
        conn.execute(f"DELETE FROM {orphan} WHERE account_id = 'ghost'")
        assert sqlite_backend._migrate(conn) == [7]
        for table, f in fields.items():
            after = conn.execute(
                f"SELECT a.account_id, {', '.join('t.' + c for c in f.split(', '))} "
                f"FROM {table} t JOIN accounts a ON a.number = t.account ORDER BY 1, 2"
            ).fetchall()
            assert after == before[table]
        numbers = [n for (n,) in conn.execute("SELECT number FROM accounts ORDER BY account_id")]
        assert numbers == list(range(1, len(numbers) + 1))
    finally:
        conn.close()


async def test_a_sqlite_file_a_newer_release_migrated_is_refused(tmp_path: Path) -> None:
    path = tmp_path / DB_NAME
    store = SqliteStore(path)
    assert await store.migrate() == list(SQLITE_VERSIONS)
    with sqlite3.connect(path) as conn:
        conn.execute(
            "INSERT INTO schema_migrations (version) VALUES (?)", (SQLITE_VERSIONS[-1] + 1,)
        )
    status = await SqliteStore(path).migration_status()
    assert status.newer_than_known
    store = SqliteStore(path)
    try:
        with pytest.raises(SchemaTooNew, match="newer than this service knows"):
            await store.open(0.0)
    finally:
        await store.close()


async def test_migration_status_reads_a_file_another_store_holds(tmp_path: Path) -> None:
    path = tmp_path / DB_NAME
    holder = SqliteStore(path)
    await holder.open(0.0)
    try:
        await holder.submit(data.groups(1.0)[0])
        status = await SqliteStore(path).migration_status()
        assert status.pending == ()
        assert status.current == SQLITE_VERSIONS[-1]
    finally:
        await holder.close()


# -- PostgreSQL at version 3 ----------------------------------------------------------------


async def test_a_postgres_database_at_version_3_opens_and_keeps_every_row(
    postgres_url: PostgresServer,
) -> None:
    url = _fresh(postgres_url)
    now = time.time()
    await make_v3_postgres_database(url, now)
    store = PostgresStore(url, 1, 2)
    status = await store.migration_status()
    assert status.applied == (1, 2, 3)
    await store.open()
    try:
        await data.assert_holds(store, now, migrated=True)
        assert (await store.migration_status()).pending == ()
        assert await store.read_account("acme") is not None
    finally:
        await store.close()


async def test_the_service_answers_from_a_postgres_database_at_version_3(
    postgres_url: PostgresServer, tmp_path: Path
) -> None:
    url = _fresh(postgres_url)
    await make_v3_postgres_database(url, time.time())
    app = create_app(Settings(storage="postgres", data_dir=tmp_path / "data", database_url=url))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as client,
    ):
        await assert_answers_as_before(client)


async def assert_answers_as_before(client: httpx.AsyncClient) -> None:
    """What the earlier release answered from this ledger, then a retry of each stored key
    (replayed byte for byte) and new writes that go on from where the ledger stood."""
    balance = await client.get("/v1/accounts/acme/balance")
    assert balance.json() == {
        "account_id": "acme",
        "timestamp": 15,
        "balance": 15,
        "available": 15,
        "debt": 0,
        "resource": None,
        "watermark": 15,
        "final": False,
    }
    as_of = await client.get("/v1/accounts/acme/balance", params={"timestamp": 6})
    assert (as_of.json()["available"], as_of.json()["debt"]) == (30, 0)
    # Per class too, replayed from the account's beginning (it has no checkpoint yet).
    params = {"timestamp": "6", "resource": "h100"}
    as_of = await client.get("/v1/accounts/acme/balance", params=params)
    assert (as_of.json()["available"], as_of.json()["final"]) == (30, True)
    grants = (await client.get("/v1/accounts/team-b:1/grants")).json()
    assert grants["grants"] == [
        {
            "grant_id": 2,
            "expiry": 20,
            "remaining": 9,
            "resources": None,
            "name": None,
            "metadata": None,
        }
    ]
    grant = (await client.get("/v1/accounts/acme/grants/3")).json()
    assert (grant["amount"], grant["remaining"]) == (25, 15)
    for account_id in data.ACCOUNTS:
        ledger = (await client.get(f"/v1/accounts/{account_id}/ledger")).json()["entries"]
        expected = data.ENTRIES[account_id]
        assert [(e["sequence"], e["kind"], e["timestamp"]) for e in ledger] == [
            (e.sequence, e.kind, e.timestamp) for e in expected
        ]
        assert [(e["available"], e["debt"]) for e in ledger] == [
            (e.available, e.debt) for e in expected
        ]

    retries: list[tuple[str, dict[str, Any], str]] = [
        ("/v1/accounts/acme/grants", {"amount": 100, "timestamp": 0, "expiry": 10}, "g-1"),
        ("/v1/accounts/acme/consumptions", {"amount": 120, "timestamp": 5}, "c-1"),
        (
            "/v1/batch",
            {
                "atomic": False,
                "operations": [
                    {"op": "grant", "account_id": "bat", "amount": 5, "timestamp": 2, "expiry": 6},
                    {"op": "consume", "account_id": "bat", "amount": 2, "timestamp": 3},
                    {"op": "balance", "account_id": "acme"},
                ],
            },
            "b-1",
        ),
    ]
    for path, body, key in retries:
        r = await client.post(path, json=body, headers={"Idempotency-Key": key})
        stored = next(k for k in data.KEYS if k[1] == key)
        assert r.headers.get("idempotent-replayed") == "true", (key, r.text)
        assert (r.status_code, r.content) == (stored[3], stored[4])

    r = await client.post("/v1/accounts/acme/consumptions", json={"amount": 5, "timestamp": 16})
    assert r.status_code == 200, r.text
    assert (r.json()["sequence"], r.json()["available"]) == (6, 10)
    r = await client.post(
        "/v1/accounts/acme/grants",
        json={"amount": 1, "timestamp": 16, "expiry": 50},
        headers={"Idempotency-Key": "after-upgrade"},
    )
    assert (r.status_code, r.json()["grant_id"], r.json()["sequence"]) == (201, 4, 7)
    again = await client.post(
        "/v1/accounts/acme/grants",
        json={"amount": 1, "timestamp": 16, "expiry": 50},
        headers={"Idempotency-Key": "after-upgrade"},
    )
    assert (again.headers.get("idempotent-replayed"), again.content) == ("true", r.content)


# -- gpu-credits migrate [--status] ---------------------------------------------------------


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [console_script(), "migrate", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_migrate_status_and_migrate_on_sqlite(tmp_path: Path) -> None:
    env = {"GPU_CREDITS_STORAGE": "sqlite", "GPU_CREDITS_DATA_DIR": str(tmp_path / "data")}
    make_v1_sqlite_file(tmp_path / "data" / DB_NAME, time.time())

    before = _cli("--status", env=env)
    assert before.returncode == 1, before
    assert before.stdout.splitlines() == [
        f"storage: sqlite {tmp_path / 'data' / DB_NAME}",
        "schema version: 1",
        f"known to this release: {_listed(SQLITE_VERSIONS)}",
        f"pending: {_listed(SQLITE_VERSIONS[1:])}",
    ]
    applied = _cli(env=env)
    assert applied.returncode == 0, applied
    assert f"applied migrations: {list(SQLITE_VERSIONS[1:])}" in applied.stderr
    after = _cli("--status", env=env)
    assert after.returncode == 0, after
    assert f"schema version: {SQLITE_VERSIONS[-1]}" in after.stdout
    assert "pending: none" in after.stdout
    again = _cli(env=env)
    assert (again.returncode, again.stderr.strip()) == (
        0,
        "applied migrations: none, the schema is current",
    )
    with sqlite3.connect(tmp_path / "data" / DB_NAME) as conn:
        assert conn.execute("SELECT count(*) FROM entries").fetchone() == (10,)


def test_migrate_status_of_a_sqlite_file_not_made_yet(tmp_path: Path) -> None:
    env = {"GPU_CREDITS_STORAGE": "sqlite", "GPU_CREDITS_DATA_DIR": str(tmp_path / "none")}
    status = _cli("--status", env=env)
    assert status.returncode == 1, status
    assert "schema version: 0 (empty database)" in status.stdout
    assert f"pending: {_listed(SQLITE_VERSIONS)}" in status.stdout
    assert not (tmp_path / "none").exists()  # --status creates nothing


def test_migrate_status_of_a_schema_newer_than_the_release(tmp_path: Path) -> None:
    path = tmp_path / DB_NAME
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY)")
        conn.execute("INSERT INTO schema_migrations VALUES (1), (2), (9)")
    env = {"GPU_CREDITS_STORAGE": "sqlite", "GPU_CREDITS_DATA_DIR": str(tmp_path)}
    for args in (("--status",), ()):
        result = _cli(*args, env=env)
        assert result.returncode == 2, result
        assert "version 9 is newer than this release knows" in result.stdout


def test_migrate_on_memory_has_nothing_to_do() -> None:
    result = _cli("--status", env={"GPU_CREDITS_STORAGE": "memory"})
    assert result.returncode == 0, result
    assert "no schema" in result.stdout


@pytest.fixture
def url_with_password(postgres_url: PostgresServer) -> tuple[str, str]:
    """A fresh database's URL carrying a password (the test server trusts its user, so any
    password connects): what must never be printed."""
    secret = f"pw-{uuid.uuid4().hex}"
    parts = urllib.parse.urlsplit(_fresh(postgres_url))
    netloc = f"{parts.username}:{secret}@{parts.hostname}:{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), secret


def test_migrate_status_and_migrate_on_postgres(url_with_password: tuple[str, str]) -> None:
    url, secret = url_with_password
    env = {"GPU_CREDITS_STORAGE": "postgres", "GPU_CREDITS_DATABASE_URL": url}

    before = _cli("--status", env=env)
    assert before.returncode == 1, before
    assert before.stdout.splitlines() == [
        f"storage: postgres {redacted_url(url)}",
        "schema version: 0 (empty database)",
        f"known to this release: {_listed(PG_VERSIONS)}",
        f"pending: {_listed(PG_VERSIONS)}",
    ]
    applied = _cli(env=env)
    assert applied.returncode == 0, applied
    assert f"applied migrations: {list(PG_VERSIONS)}" in applied.stderr
    after = _cli("--status", env=env)
    assert after.returncode == 0, after
    assert f"schema version: {PG_VERSIONS[-1]}" in after.stdout
    for result in (before, applied, after):
        assert secret not in result.stdout + result.stderr
    assert ":***@" in before.stdout


def test_migrate_status_of_an_unreachable_database_hides_the_password(tmp_path: Path) -> None:
    secret = f"pw-{uuid.uuid4().hex}"
    env = {
        "GPU_CREDITS_STORAGE": "postgres",
        # Port 1 on loopback: nothing listens there.
        "GPU_CREDITS_DATABASE_URL": f"postgresql://someone:{secret}@127.0.0.1:1/db",
    }
    result = _cli("--status", env=env)
    assert result.returncode == 2, result
    assert "cannot read the schema of postgres postgresql://someone:***@127.0.0.1:1/db" in (
        result.stderr
    )
    assert secret not in result.stdout + result.stderr


def test_redacted_url_keeps_where_and_drops_secrets() -> None:
    assert redacted_url(
        "postgresql://u:p%40ss@db.example:5433/ledger?password=x&sslmode=require"
    ) == ("postgresql://u:***@db.example:5433/ledger")
    assert redacted_url("postgresql://db.example/ledger") == "postgresql://db.example/ledger"
    assert redacted_url("postgresql://u@[::1]:5432/l") == "postgresql://u@[::1]:5432/l"
