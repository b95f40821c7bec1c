"""Failed authentication is logged (issue 9, item 8): each 401 with the key id the caller
claimed (never its secret) and the client address, rate-limited so that a flood of bad keys
cannot flood the log."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest

from app.api.auth import AuthFailureLog
from tests.support.clock import ManualClock
from tests.support.server_process import ServerProcess
from tests.test_security import create_key

LOG_WAIT_S = 10.0


def _failure_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "app.auth"]


def test_each_failure_is_logged_with_key_id_and_client_never_the_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = AuthFailureLog(max_lines=10, window_s=10.0, monotonic_s=ManualClock())
    secret = "s3cr3t-value-that-must-not-leak"
    with caplog.at_level(logging.WARNING, logger="app.auth"):
        log.record("unknown key", f"Bearer gck_0123456789ab_{secret}", "10.1.2.3:5555")
        log.record("not a Bearer token", f"Basic {secret}", "10.1.2.4:1")
        log.record("no Authorization header", None, "10.1.2.5:2")
        # A header crafted to forge a log line gets no further than "key id none".
        log.record("unknown key", "Bearer gck_x\nFAKE LINE_y", "10.1.2.6:3")
    lines = _failure_lines(caplog)
    assert lines == [
        "authentication failed (401): unknown key; key id 0123456789ab; client 10.1.2.3:5555",
        "authentication failed (401): not a Bearer token; key id none; client 10.1.2.4:1",
        "authentication failed (401): no Authorization header; key id none; client 10.1.2.5:2",
        "authentication failed (401): unknown key; key id none; client 10.1.2.6:3",
    ]
    assert all(secret not in line for line in lines)


def test_a_flood_is_capped_per_window_and_summarised(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    log = AuthFailureLog(max_lines=10, window_s=10.0, monotonic_s=clock)
    with caplog.at_level(logging.WARNING, logger="app.auth"):
        for i in range(5_000):
            clock.now_s += 0.001  # 5,000 failures within 5 s: one window
            log.record("unknown key", None, f"127.0.0.1:{i}")
        assert len(_failure_lines(caplog)) == 10
        clock.now_s += 10.0  # the next window opens with a summary of what was dropped
        log.record("unknown key", None, "127.0.0.1:1")
    lines = _failure_lines(caplog)
    assert len(lines) == 12
    assert lines[10].startswith("4990 more failed authentications in the last 10 s")
    assert lines[11].startswith("authentication failed (401)")


def test_a_real_server_logs_failed_keys_capped(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    key = create_key(data_dir, "billing", "credits:read")
    wrong = f"gck_{key.key_id}_{'x' * 43}"
    server = ServerProcess(data_dir)
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=10.0) as http:
            for _ in range(200):
                r = http.get("/v1/accounts/a/balance", headers={"Authorization": f"Bearer {wrong}"})
                assert r.status_code == 401
            ok = http.get("/v1/accounts/a/balance", headers=key.bearer)
            assert ok.status_code == 404  # authenticated; the account does not exist
        # Wait for the lines to reach the log file (the server writes them as it answers).
        deadline = time.monotonic() + LOG_WAIT_S
        lines: list[str] = []
        while time.monotonic() < deadline:
            text = server.log_path.read_text(errors="replace")
            lines = [ln for ln in text.splitlines() if "authentication failed (401)" in ln]
            if len(lines) >= 10:
                break
            time.sleep(0.05)
    finally:
        server.stop()
    text = server.log_path.read_text(errors="replace")
    lines = [ln for ln in text.splitlines() if "authentication failed (401)" in ln]
    assert len(lines) == 10, lines  # 200 failures within one 10 s window: 10 lines
    assert all(f"key id {key.key_id}" in ln and "client 127.0.0.1:" in ln for ln in lines)
    assert key.secret not in text
    assert wrong not in text
