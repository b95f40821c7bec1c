"""The probes and the version (issue 13): ``/livez``, ``/readyz``, ``/healthz`` (an alias of
readiness) and ``/version``, in process on every backend; public whatever the keys.

A real server whose SQLite directory is replaced under it is in
``tests/test_sqlite_file_identity.py``."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.service.ledger import Ledger
from app.storage import postgres as pg_storage
from app.storage import sqlite as sqlite_storage
from tests.support.api import assert_problem, ok
from tests.support.app_runner import running

PROBES = ("/livez", "/readyz", "/healthz")
READINESS = ("/readyz", "/healthz")
SCHEMA_VERSIONS = {
    "memory": None,
    "sqlite": max(v for v, _ in sqlite_storage.MIGRATIONS),
    "postgres": max(v for v, _ in pg_storage.MIGRATIONS),
}


@pytest.mark.parametrize("path", PROBES)
async def test_probes_answer_ok(client: httpx.AsyncClient, path: str) -> None:
    assert ok(await client.get(path)) == {"status": "ok"}


async def test_version(client: httpx.AsyncClient, backend: str) -> None:
    assert ok(await client.get("/version")) == {
        "version": importlib.metadata.version("gpu-credits"),
        "storage": backend,
        "schema_version": SCHEMA_VERSIONS[backend],
    }


async def test_the_openapi_version_is_the_package_version(client: httpx.AsyncClient) -> None:
    doc = ok(await client.get("/openapi.json"))
    assert doc["info"]["version"] == importlib.metadata.version("gpu-credits")


@pytest.mark.parametrize("path", [*PROBES, "/version"])
async def test_probes_and_version_need_no_key(
    keyed: tuple[httpx.AsyncClient, str, str], path: str
) -> None:
    client, _, _ = keyed
    assert (await client.get("/v1/accounts")).status_code == 401  # keys are in force
    r = await client.get(path, headers={"Authorization": "Bearer not-a-key"})
    assert r.status_code == 200, r.text
    assert (await client.get(path)).status_code == 200


def _ledger(app: FastAPI) -> Ledger:
    ledger = app.state.ledger
    assert isinstance(ledger, Ledger)
    return ledger


@pytest.mark.backends("sqlite")
async def test_a_replaced_database_makes_the_service_unready_not_dead(
    app: FastAPI, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    async with running(app) as client:
        data.rename(tmp_path / "data.old")
        data.mkdir()
        await _ledger(app).check_storage()  # what the once-a-second check does
        answers = []
        for path in READINESS:
            problem = assert_problem(await client.get(path), 503)
            assert problem["type"].endswith(":unavailable"), problem
            assert str(data / "gpu-credits.sqlite3") in problem["detail"], problem
            assert "restart" in problem["detail"], problem
            del problem["request_id"]  # each request's own
            answers.append(problem)
        assert answers[0] == answers[1], "/healthz answers what /readyz answers"
        assert ok(await client.get("/livez")) == {"status": "ok"}
        assert ok(await client.get("/version"))["schema_version"] == SCHEMA_VERSIONS["sqlite"]


@pytest.mark.backends("postgres")
async def test_an_unreachable_database_makes_the_service_unready_not_dead(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    pings: list[object] = []

    async def refused(self: pg_storage.PostgresStore) -> None:
        pings.append(self)
        raise ConnectionRefusedError("connection refused")

    async with running(app) as client:
        monkeypatch.setattr(pg_storage.PostgresStore, "ping", refused)
        for path in READINESS:
            problem = assert_problem(await client.get(path), 503)
            assert problem["detail"] == "the database is unreachable", problem
        assert len(pings) == 2
        assert ok(await client.get("/livez")) == {"status": "ok"}
        assert ok(await client.get("/version"))["schema_version"] == SCHEMA_VERSIONS["postgres"]
        assert len(pings) == 2, "neither /livez nor /version asks the database"
        monkeypatch.undo()
        assert ok(await client.get("/readyz")) == {"status": "ok"}
