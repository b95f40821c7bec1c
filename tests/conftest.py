"""Shared fixtures: an app per storage backend (memory, sqlite on a real file), driven in
process through httpx's ASGI transport with the lifespan running, and a real server process."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
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
