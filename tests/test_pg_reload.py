"""PostgreSQL: a process whose cached account is stale (another process wrote to it, or it
was evicted) reloads it inside the next write. With provisional writes to replay (up to
10,000: 0.1 to 0.2 s of replay, and 50 ms to decode their rows) that work runs in a worker
thread, not on the event loop, which serves other requests meanwhile (measured: the
longest hold of the loop during such a write fell from 120-210 ms to 11-25 ms). The
answers are the same."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.service.journal import loaded_account
from app.storage import postgres as pg_storage
from tests.support.app_runner import make_settings, running

ACCOUNT = "acct-reload"
PROVISIONAL = 1_200  # more rows than are decoded on the loop


def _on_loop_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _recording(fn: Callable[..., Any], seen: list[bool]) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        seen.append(_on_loop_thread())
        return fn(*args, **kwargs)

    return wrapped


async def _balance(client: httpx.AsyncClient) -> dict[str, Any]:
    r = await client.get(f"/v1/accounts/{ACCOUNT}/balance")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


@pytest.mark.backends("postgres")
async def test_a_stale_account_is_replayed_off_the_event_loop(
    backend: str,
    tmp_path: Path,
    new_database_url: Callable[[], str | None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replayed: list[bool] = []
    decoded: list[bool] = []
    monkeypatch.setattr(
        "app.adapters.postgres.loaded_account", _recording(loaded_account, replayed)
    )
    monkeypatch.setattr(pg_storage, "_entry", _recording(pg_storage._entry, decoded))
    url = new_database_url()
    one = create_app(make_settings(backend, tmp_path / "one", url))
    two = create_app(make_settings(backend, tmp_path / "two", url))
    async with running(one) as a, running(two) as b:
        grant = {"amount": 10**9, "timestamp": 0, "expiry": 10**12}
        assert (await a.post(f"/v1/accounts/{ACCOUNT}/grants", json=grant)).status_code == 201
        r = await a.put(f"/v1/accounts/{ACCOUNT}/settings", json={"lateness_window": 10**9})
        assert r.status_code == 200, r.text
        uses = [
            {"op": "consume", "account_id": ACCOUNT, "amount": 1, "timestamp": 1 + i}
            for i in range(PROVISIONAL)
        ]
        r = await a.post("/v1/batch", json={"operations": uses})
        assert r.status_code == 200, r.text[:500]
        assert r.json()["failed"] == 0
        replayed.clear()
        decoded.clear()
        # Process two has not seen the account: its write loads it, replaying 1,200 writes.
        use = {"amount": 1, "timestamp": PROVISIONAL + 5}
        r = await b.post(f"/v1/accounts/{ACCOUNT}/consumptions", json=use)
        assert r.status_code == 200, r.text
        assert replayed == [False]  # off the loop's thread
        assert len(decoded) > PROVISIONAL
        assert not any(decoded)
        # Then each writes again, the other's last write making its copy stale: both reload.
        replayed.clear()
        r = await a.post(f"/v1/accounts/{ACCOUNT}/consumptions", json={**use, "timestamp": 1})
        assert r.status_code == 200, r.text  # a late write, restating what follows it
        r = await b.post(f"/v1/accounts/{ACCOUNT}/consumptions", json={**use, "timestamp": 2})
        assert r.status_code == 200, r.text
        assert replayed == [False, False]
        # Both processes answer alike.
        assert await _balance(a) == await _balance(b)
        assert (await _balance(a))["available"] == 10**9 - PROVISIONAL - 3
