"""Shared fixtures: an app per storage backend (memory, sqlite on a real file), driven in
process through httpx's ASGI transport with the lifespan running, and a real server process."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from tests.pg_server import PostgresServer, PostgresUnavailable, start_postgres
from tests.server_process import ServerProcess

BACKENDS = ["memory", "sqlite"]


def make_settings(storage: str, data_dir: Path) -> Settings:
    return Settings(storage=storage, data_dir=data_dir)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest.fixture
def app(backend: str, tmp_path: Path) -> FastAPI:
    return create_app(make_settings(backend, tmp_path / "data"))


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test") as c,
    ):
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
    """A throwaway PostgreSQL 15 server for the whole session (``tests.pg_server``): its
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
