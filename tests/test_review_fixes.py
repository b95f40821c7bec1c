"""Regression tests for defects an adversarial review found (each fixed):

- a second process on the same SQLite file silently corrupted the ledger (now refused);
- the duplicate-member check was quadratic: one large body stalled the service for minutes;
- a duplicated member name holding a lone surrogate gave a 500;
- concurrent `keys create` / `keys revoke` lost updates;
- batch Idempotency-Keys were one namespace across API keys (an existence oracle);
- connections that never finished their headers were kept forever (slow-loris).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from app.keys import Scope, create_key, load_records
from app.main import create_app
from app.settings import Settings
from tests.support.app_runner import running
from tests.support.server_process import ServerProcess, console_script

PROBLEM_JSON = "application/problem+json"


@pytest.fixture
async def keyed(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, str, str]]:
    """An app with two API keys holding every scope."""
    keys_file = tmp_path / "api-keys.json"
    first, _ = create_key(keys_file, "team-a", tuple(Scope), "")
    second, _ = create_key(keys_file, "team-b", tuple(Scope), "")
    app = create_app(Settings(storage="memory", data_dir=tmp_path, api_keys_file=keys_file))
    async with running(app) as client:
        yield client, first, second


def test_a_second_process_on_the_same_sqlite_file_is_refused(tmp_path: Path) -> None:
    first = ServerProcess(tmp_path / "data")
    first.start()
    try:
        env = {**os.environ, "GPU_CREDITS_DATA_DIR": str(tmp_path / "data")}
        second = subprocess.run(
            [console_script(), "serve", "--port", "0"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode != 0
        assert "in use by another gpu-credits process" in second.stdout + second.stderr
        # The first one is unaffected.
        r = httpx.post(
            f"{first.base_url}/v1/accounts/a/grants",
            json={"amount": 1, "timestamp": 0, "expiry": 5},
        )
        assert r.status_code == 201
    finally:
        first.stop()
    # Once the first is gone, the file opens again (the lock dies with its process).
    again = ServerProcess(tmp_path / "data")
    again.start()
    try:
        assert httpx.get(f"{again.base_url}/v1/accounts/a/balance").json()["balance"] == 1
    finally:
        again.stop()


@pytest.mark.timeout(120)
async def test_a_huge_body_with_one_duplicate_member_is_a_quick_400(
    keyed: tuple[httpx.AsyncClient, str, str],
) -> None:
    client, key, _ = keyed
    members = ",".join(f'"k{i}":0' for i in range(300_000))  # about 3.3 MB, under the cap
    body = ("{" + members + ',"k0":1}').encode()
    r = await client.post(
        "/v1/batch",
        content=body,
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
    )
    assert r.status_code == 400, r.text
    assert "duplicate member" in r.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/accounts/a/grants", "/v1/batch"])
async def test_duplicate_names_with_lone_surrogates_are_400_not_500(
    keyed: tuple[httpx.AsyncClient, str, str], path: str
) -> None:
    client, key, _ = keyed
    r = await client.post(
        path,
        content=b'{"\\ud800":1,"\\ud800":2}',
        headers={"content-type": "application/json", "authorization": f"Bearer {key}"},
    )
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith(PROBLEM_JSON)
    json.loads(r.content)  # a well-formed document


def test_concurrent_key_commands_lose_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "GPU_CREDITS_DATA_DIR": str(tmp_path)}

    def create(i: int) -> str:
        done = subprocess.run(
            [console_script(), "keys", "create", "--name", f"n{i}", "--scope", "credits:read"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    with ThreadPoolExecutor(max_workers=12) as pool:
        keys = list(pool.map(create, range(12)))
    records = load_records(tmp_path / "api-keys.json")
    assert len(records) == 12
    assert {k.split("_")[1] for k in keys} == {r.key_id for r in records}


async def test_batch_keys_are_scoped_to_the_api_key(
    keyed: tuple[httpx.AsyncClient, str, str],
) -> None:
    client, first, second = keyed

    def post(key: str, account: str) -> dict[str, object]:
        return {
            "json": {
                "operations": [
                    {"op": "grant", "account_id": account, "amount": 1, "timestamp": 0, "expiry": 9}
                ]
            },
            "headers": {"authorization": f"Bearer {key}", "idempotency-key": "nightly"},
        }

    a = await client.post("/v1/batch", **post(first, "a"))  # type: ignore[arg-type]
    assert a.status_code == 200
    # Another API key may use the same key name with another body: no 422, no oracle.
    b = await client.post("/v1/batch", **post(second, "b"))  # type: ignore[arg-type]
    assert b.status_code == 200, b.text
    assert b.headers.get("idempotent-replayed") is None
    # Each still replays its own.
    again = await client.post("/v1/batch", **post(first, "a"))  # type: ignore[arg-type]
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.content == a.content


def test_slow_headers_are_cut_off_and_overload_is_a_problem_document(tmp_path: Path) -> None:
    """Connections that never finish their headers used to be kept forever and, at
    limit_concurrency, lock everyone out; the over-limit 503 was plain text."""
    env = {"GPU_CREDITS_HEADER_TIMEOUT_S": "1", "GPU_CREDITS_LIMIT_CONCURRENCY": "3"}
    server = ServerProcess(tmp_path / "data", storage="memory", env=env)
    server.start()
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(2)]
    slow = socket.create_connection(("127.0.0.1", server.port))
    try:
        slow.sendall(b"GET /healthz HTTP/1.1\r\n")  # and never the rest
        full = httpx.get(f"{server.base_url}/healthz")
        assert full.status_code == 503
        assert full.headers["content-type"].startswith(PROBLEM_JSON)
        slow.settimeout(30)  # a bound on the wait, not a sleep: the answer comes at 1 s
        answer = slow.recv(4096)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"headers-timeout" in answer
        # The idle connections are reaped too, so the service serves again.
        deadline = time.monotonic() + 30
        while httpx.get(f"{server.base_url}/healthz").status_code != 200:
            assert time.monotonic() < deadline, "idle connections were never reaped"
            time.sleep(0.05)  # polling interval while waiting for a condition
    finally:
        for s in [*idle, slow]:
            s.close()
        server.stop()
