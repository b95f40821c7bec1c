"""Shared fixtures.

- ``client``: the app in process (``tests.support.app_runner``) on one storage backend, once
  per backend: memory, SQLite on a real file, PostgreSQL on the session's throwaway server
  (an empty database per test, from a pool). A test marked ``@pytest.mark.backends(...)``
  runs on those only: tests of refusals that happen before anything reaches the storage
  (validation of paths, queries, headers and bodies; routing) run on memory alone.
- ``server``: a real ``gpu-credits serve`` process (SQLite), shared by a module's tests.
- ``postgres_url``: the session's PostgreSQL server; ``keyed``: the app with two API keys.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.keys import Scope, create_key
from app.main import create_app
from app.settings import Settings
from tests.support.app_runner import make_settings, running
from tests.support.pg_pool import DatabasePool
from tests.support.pg_server import PostgresServer, start_postgres_or_skip
from tests.support.server_process import ServerProcess

BACKENDS = ("memory", "sqlite", "postgres")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "backends(*names): run a test that takes `backend` on these backends only"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test that needs ``backend`` (through ``client``, ``app``...) runs once per
    backend of its ``backends`` mark, or of ``BACKENDS``."""
    if "backend" in metafunc.fixturenames:
        mark = metafunc.definition.get_closest_marker("backends")
        metafunc.parametrize("backend", mark.args if mark else BACKENDS)


@pytest.fixture
def new_database_url(
    backend: str, request: pytest.FixtureRequest
) -> Iterator[Callable[[], str | None]]:
    """Gives an empty database per call when the backend is postgres (None otherwise), for
    tests that run several apps one after the other."""
    taken: list[str] = []

    def make() -> str | None:
        if backend != "postgres":
            return None
        pool: DatabasePool = request.getfixturevalue("postgres_databases")
        taken.append(pool.take())
        return taken[-1]

    yield make
    if taken:
        pool: DatabasePool = request.getfixturevalue("postgres_databases")
        for url in taken:
            pool.give_back(url)


@pytest.fixture
def database_url(new_database_url: Callable[[], str | None]) -> str | None:
    """An empty database when the backend is postgres; None otherwise."""
    return new_database_url()


@pytest.fixture
def app(backend: str, tmp_path: Path, database_url: str | None) -> FastAPI:
    return create_app(make_settings(backend, tmp_path / "data", database_url))


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with running(app) as c:
        yield c


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A real ``gpu-credits serve`` process on a free port, sqlite storage, shared by the
    tests of a module (each uses accounts of its own)."""
    proc = ServerProcess(tmp_path_factory.mktemp("server") / "data")
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
    server = start_postgres_or_skip()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_databases(postgres_url: PostgresServer) -> DatabasePool:
    """Empty databases on the session's server, reused (``tests.support.pg_pool``)."""
    return DatabasePool(postgres_url)


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
