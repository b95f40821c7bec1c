"""The one way the tests run the app in process: its lifespan (which opens and closes the
storage) around an ``httpx.AsyncClient`` that talks to it through ASGI, no socket."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from fastapi import FastAPI

from app.settings import Settings

BASE_URL = "http://test"


def make_settings(storage: str, data_dir: Path, database_url: str | None = None) -> Settings:
    return Settings(storage=storage, data_dir=data_dir, database_url=database_url)


@contextlib.asynccontextmanager
async def running(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` started (its lifespan entered) and a client for it; stopped on exit."""
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url=BASE_URL) as client,
    ):
        yield client
