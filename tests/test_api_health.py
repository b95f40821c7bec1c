"""``GET /healthz``."""

from __future__ import annotations

import httpx

from tests.support.api import ok


async def test_healthz(client: httpx.AsyncClient) -> None:
    r = await client.get("/healthz")
    assert ok(r) == {"status": "ok"}
