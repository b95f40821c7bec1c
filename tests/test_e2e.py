"""End-to-end tests against a real ``gpu-credits serve`` process over TCP, with plain httpx:
the SPEC examples, many concurrent writes on one account (linearizable), a graceful restart
(state and idempotency keys survive), and ``python -m app`` as an entry point."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.model import Account
from tests.support.server_process import ROOT, ServerProcess, free_port
from tests.support.spec_examples import EXAMPLES, Example

JsonObject = dict[str, Any]

FAR_EXPIRY = 10**12


def _url(server: ServerProcess, account: str, what: str) -> str:
    return f"{server.base_url}/v1/accounts/{account}/{what}"


def _grant(
    http: httpx.Client, server: ServerProcess, account: str, amount: int, ts: int, expiry: int
) -> JsonObject:
    r = http.post(
        _url(server, account, "grants"),
        json={"amount": amount, "timestamp": ts, "expiry": expiry},
    )
    assert r.status_code == 201, r.text
    body: JsonObject = r.json()
    assert r.headers["Location"] == f"/v1/accounts/{account}/grants/{body['grant_id']}"
    return body


def _consume(
    http: httpx.Client, server: ServerProcess, account: str, amount: int, ts: int
) -> JsonObject:
    r = http.post(_url(server, account, "consumptions"), json={"amount": amount, "timestamp": ts})
    assert r.status_code == 200, r.text
    body: JsonObject = r.json()
    return body


def _balance(
    http: httpx.Client, server: ServerProcess, account: str, ts: int | None = None
) -> JsonObject:
    params = {} if ts is None else {"timestamp": ts}
    r = http.get(_url(server, account, "balance"), params=params)
    assert r.status_code == 200, r.text
    body: JsonObject = r.json()
    return body


def _ledger(http: httpx.Client, server: ServerProcess, account: str) -> list[JsonObject]:
    """Every ledger entry of the account, following the cursor through all pages."""
    entries: list[JsonObject] = []
    after = 0
    while True:
        r = http.get(_url(server, account, "ledger"), params={"after": after, "limit": 100})
        assert r.status_code == 200, r.text
        page = r.json()
        assert page["account_id"] == account
        entries.extend(page["entries"])
        if page["next_after"] is None:
            return entries
        after = page["next_after"]


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=30.0) as c:
        yield c


# -- SPEC examples -----------------------------------------------------------------------


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_spec_example(server: ServerProcess, http: httpx.Client, example: Example) -> None:
    acct = example.name
    for step in example.steps:
        sent = step.send(
            partial(_grant, http, server, acct),
            partial(_consume, http, server, acct),
            partial(_balance, http, server, acct),
        )
        assert sent == step.body(acct), step
    # Without a timestamp: answered at the account's latest time, changing nothing.
    assert _balance(http, server, acct) == example.last.body(acct)
    assert _ledger(http, server, acct) == example.ledger()


def test_regression_and_unknown_account(server: ServerProcess, http: httpx.Client) -> None:
    acct = "regress"
    _grant(http, server, acct, 10, 7, 100)
    r = http.post(_url(server, acct, "consumptions"), json={"amount": 1, "timestamp": 6})
    assert r.status_code == 409
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["account_timestamp"] == 7
    assert _balance(http, server, acct) == {
        "account_id": acct,
        "timestamp": 7,
        "balance": 10,
        "available": 10,
        "debt": 0,
        "resource": None,
        "watermark": 7,
        "final": False,
    }
    r = http.get(_url(server, "nobody", "balance"), params={"timestamp": 1})
    assert r.status_code == 404
    assert r.json()["status"] == 404


# -- concurrency: linearizable writes on one account --------------------------------------


CONCURRENT_REQUESTS = 320
POOL_SIZE = 64


async def _fire(
    base_url: str, account: str, ops: list[tuple[str, int]], ts: int
) -> list[tuple[str, int, JsonObject]]:
    limits = httpx.Limits(max_connections=POOL_SIZE, max_keepalive_connections=POOL_SIZE)
    timeout = httpx.Timeout(60.0, pool=60.0)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=timeout) as client:

        async def one(kind: str, amount: int) -> tuple[str, int, JsonObject]:
            if kind == "grant":
                body = {"amount": amount, "timestamp": ts, "expiry": FAR_EXPIRY}
                r = await client.post(f"/v1/accounts/{account}/grants", json=body)
                assert r.status_code == 201, r.text
            else:
                body = {"amount": amount, "timestamp": ts}
                r = await client.post(f"/v1/accounts/{account}/consumptions", json=body)
                assert r.status_code == 200, r.text
            result: JsonObject = r.json()
            return kind, amount, result

        return await asyncio.gather(*(one(kind, amount) for kind, amount in ops))


def test_concurrent_writes_on_one_account_are_linearizable(
    server: ServerProcess, http: httpx.Client
) -> None:
    acct = "hot-account"
    ts = 1_000
    rng = random.Random(20240601)
    amounts = rng.sample(range(1, 1_000_000), CONCURRENT_REQUESTS)
    ops = [(rng.choice(("grant", "consume")), a) for a in amounts]
    assert {k for k, _ in ops} == {"grant", "consume"}

    results = asyncio.run(_fire(server.base_url, acct, ops, ts))

    ordered = sorted(results, key=lambda r: int(r[2]["sequence"]))
    assert [r[2]["sequence"] for r in ordered] == list(range(1, len(ops) + 1))

    # Replayed in sequence order, the reference model predicts every answer exactly.
    model = Account(acct)
    for kind, amount, body in ordered:
        if kind == "grant":
            expected = model.grant(amount, ts, FAR_EXPIRY)
        else:
            expected = model.consume(amount, ts)
        assert body == expected, f"sequence {body['sequence']}"

    final = _balance(http, server, acct)
    assert final == model.read_balance()

    entries = _ledger(http, server, acct)
    assert len(entries) == len(ops)
    assert entries == model.entries

    r = http.get(_url(server, acct, "grants"))
    assert r.status_code == 200, r.text
    assert r.json() == model.live_grants()


# -- graceful restart --------------------------------------------------------------------


# uvicorn re-raises the signal once its graceful shutdown is done, so a clean SIGTERM exit is
# reported as -SIGTERM (like any process that the signal ended), not as 0.
CLEAN_EXITS = (0, -signal.SIGTERM)


def _assert_clean_exit(code: int, log: str) -> None:
    assert code in CLEAN_EXITS, log
    assert "Application shutdown complete" in log, log


def _snapshot(http: httpx.Client, server: ServerProcess, account: str) -> JsonObject:
    grants = http.get(_url(server, account, "grants"))
    assert grants.status_code == 200, grants.text
    details = []
    for gid in range(1, 5):
        r = http.get(_url(server, account, f"grants/{gid}"))
        assert r.status_code == 200, r.text
        details.append(r.json())
    assert http.get(_url(server, account, "grants/5")).status_code == 404
    listed = http.get(f"{server.base_url}/v1/accounts", params={"prefix": account})
    assert listed.status_code == 200, listed.text
    return {
        "balance": _balance(http, server, account),
        "ledger": _ledger(http, server, account),
        "grants": grants.json(),
        "grant_details": details,
        "listed": listed.json(),
    }


def test_state_and_idempotency_keys_survive_a_graceful_restart(
    tmp_path: Path, http: httpx.Client
) -> None:
    data_dir = tmp_path / "restart-data"
    acct = "durable"
    key = "restart-key-1"
    keyed_body = {"amount": 50, "timestamp": 1, "expiry": 20}

    first = ServerProcess(data_dir)
    first.start()
    try:
        _grant(http, first, acct, 100, 0, 10)
        r = http.post(
            _url(first, acct, "grants"), json=keyed_body, headers={"Idempotency-Key": key}
        )
        assert r.status_code == 201, r.text
        assert "Idempotent-Replayed" not in r.headers
        keyed_response = r.json()
        assert keyed_response["grant_id"] == 2
        _consume(http, first, acct, 30, 5)  # 70 left of grant 1, 50 of grant 2
        assert _balance(http, first, acct, 12)["available"] == 50  # grant 1 expired: 70 gone
        _consume(http, first, acct, 70, 13)  # 50 consumed, 20 debt
        g = _grant(http, first, acct, 45, 14, 30)  # settles 20, keeps 25
        assert (g["settled_debt"], g["retained"], g["balance"]) == (20, 25, 25)
        _grant(http, first, acct, 5, 14, 40)
        before = _snapshot(http, first, acct)
    finally:
        exit_code = first.stop()
    _assert_clean_exit(exit_code, first.log())

    assert before["balance"] == {
        "account_id": acct,
        "timestamp": 14,
        "balance": 30,
        "available": 30,
        "debt": 0,
        "resource": None,
        "watermark": 14,
        "final": False,
    }
    assert [e["kind"] for e in before["ledger"]] == [
        "grant",
        "grant",
        "consumption",
        "expiration",
        "consumption",
        "grant",
        "grant",
    ]
    assert [(g["grant_id"], g["remaining"]) for g in before["grants"]["grants"]] == [
        (3, 25),
        (4, 5),
    ]
    assert before["listed"] == {"accounts": [before["balance"]], "next_after": None}

    second = ServerProcess(data_dir)
    second.start()
    try:
        assert _snapshot(http, second, acct) == before

        # The retry replays the stored response (its timestamp 1 is long past: no 409).
        r = http.post(
            _url(second, acct, "grants"), json=keyed_body, headers={"Idempotency-Key": key}
        )
        assert r.status_code == 201, r.text
        assert r.headers.get("Idempotent-Replayed") == "true"
        assert r.json() == keyed_response
        assert r.headers["Location"] == f"/v1/accounts/{acct}/grants/2"

        # The same key with another body is rejected.
        other = {**keyed_body, "amount": 51}
        r = http.post(_url(second, acct, "grants"), json=other, headers={"Idempotency-Key": key})
        assert r.status_code == 422, r.text

        assert _snapshot(http, second, acct) == before
    finally:
        exit_code = second.stop()
    _assert_clean_exit(exit_code, second.log())


# -- python -m app -----------------------------------------------------------------------


def _venv_python() -> str:
    candidate = ROOT / ".venv" / "bin" / "python"
    return str(candidate) if candidate.exists() else sys.executable


def test_python_dash_m_app_serves(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "GPU_CREDITS_STORAGE": "memory",
        "GPU_CREDITS_DATA_DIR": str(tmp_path / "unused"),
    }
    log_path = tmp_path / "python-m-app.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [_venv_python(), "-m", "app", "--port", str(port)],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60.0
        with httpx.Client(base_url=base, timeout=5.0) as c:
            while True:
                assert proc.poll() is None, f"exited {proc.returncode}: {log_path.read_text()}"
                try:
                    if c.get("/healthz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"not healthy: {log_path.read_text()}"
                time.sleep(0.02)  # polling interval while waiting for a condition

            assert c.get("/healthz").json() == {"status": "ok"}
            r = c.post("/v1/accounts/m-app/grants", json={"amount": 5, "timestamp": 0, "expiry": 9})
            assert r.status_code == 201, r.text
            assert c.get("/v1/accounts/m-app/balance").json()["balance"] == 5
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    _assert_clean_exit(proc.returncode, log_path.read_text())
