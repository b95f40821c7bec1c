"""Shared fixtures: an app per storage backend (memory, sqlite on a real file), driven in
process through httpx's ASGI transport with the lifespan running, and a real server process."""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.keys import Scope, create_key
from app.main import create_app
from app.settings import Settings
from tests.support.app_runner import make_settings, running
from tests.support.pg_server import PostgresServer, PostgresUnavailable, start_postgres
from tests.support.server_process import ServerProcess

# The backend-agnostic suite: every test that takes ``client`` runs against each of these,
# postgres on a real throwaway server (a fresh database per test).
BACKENDS = ["memory", "sqlite", "postgres"]
_database_counter = itertools.count()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def new_database_url(backend: str, request: pytest.FixtureRequest) -> Callable[[], str | None]:
    """Makes a fresh, empty database per call when the backend is postgres (None otherwise),
    for tests that run several apps one after the other."""

    def make() -> str | None:
        if backend != "postgres":
            return None
        server: PostgresServer = request.getfixturevalue("postgres_url")
        return server.create_database(f"t{os.getpid()}_{next(_database_counter)}")

    return make


@pytest.fixture
def database_url(new_database_url: Callable[[], str | None]) -> str | None:
    """A fresh, empty database when the backend is postgres; None otherwise."""
    return new_database_url()


@pytest.fixture
def app(backend: str, tmp_path: Path, database_url: str | None) -> FastAPI:
    return create_app(make_settings(backend, tmp_path / "data", database_url))


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with running(app) as c:
        yield c


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A real ``gpu-credits serve`` process on a free port, sqlite storage in tmp_path."""
    proc = ServerProcess(tmp_path / "data")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL 15 server for the whole session (``tests.support.pg_server``): its
    ``url`` is a default database, ``create_database(name)`` makes an empty one and returns
    its URL. Skips only when the binaries are not installed, and never in CI (CI=true)."""
    try:
        server = start_postgres()
    except PostgresUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but PostgreSQL is not installed: {exc}")
        pytest.skip(str(exc))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def keyed(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, str, str]]:
    """The app in process (memory) with two API keys, each holding every scope: the client
    and the two keys."""
    keys_file = tmp_path / "api-keys.json"
    first, _ = create_key(keys_file, "team-a", tuple(Scope), "")
    second, _ = create_key(keys_file, "team-b", tuple(Scope), "")
    app = create_app(Settings(storage="memory", data_dir=tmp_path, api_keys_file=keys_file))
    async with running(app) as client:
        yield client, first, second
