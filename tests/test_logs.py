"""Logs and request ids (issue 13, item 2): one JSON line per request with its fields, JSON for
every other line (uvicorn's included) from a real server's stderr, the human-readable format,
``X-Request-ID`` taken when valid and made otherwise, echoed in the answer's header and in
problem documents."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.keys import Scope, create_key
from app.logs import REQUEST_ID, BufferedStreamHandler, JsonFormatter, TextFormatter
from app.main import create_app
from app.settings import Settings
from tests.support.api import assert_problem
from tests.support.app_runner import running
from tests.support.server_process import ROOT, console_script, free_port

GRANTS = "/v1/accounts/{account_id}/grants"
GRANT = {"amount": 5, "timestamp": 1, "expiry": 10}
GENERATED = re.compile(r"[0-9a-f]{32}")
WAIT_S = 30.0


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def keyed_client(tmp_path: Path) -> Any:
    keys_file = tmp_path / "api-keys.json"
    key, record = create_key(keys_file, "billing", tuple(Scope), "")
    settings = Settings(
        storage="memory", data_dir=tmp_path, api_keys_file=keys_file, access_log=True
    )
    async with running(create_app(settings)) as client:
        yield client, key, record.key_id


def request_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [r.fields for r in caplog.records if r.name == "app.requests"]  # type: ignore[attr-defined]


# -- the request line, in process ---------------------------------------------------------


async def test_one_line_per_request_with_its_fields(
    keyed_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    client, key, key_id = keyed_client
    with caplog.at_level(logging.INFO, logger="app.requests"):
        r = await client.post(
            "/v1/accounts/team-a:x/grants",
            json=GRANT,
            headers={**bearer(key), "X-Request-ID": "trace-42"},
        )
        assert r.status_code == 201, r.text
        refused = await client.get("/v1/accounts/team-a:x/balance")
        assert refused.status_code == 401
    first, second = request_lines(caplog)
    latency = first.pop("latency_ms")
    assert isinstance(latency, float)
    assert 0 < latency < 10_000
    assert first == {
        "request_id": "trace-42",
        "method": "POST",
        "route": GRANTS,
        "path": "/v1/accounts/team-a:x/grants",
        "account": "team-a:x",
        "status": 201,
        "key_id": key_id,
        "client": "127.0.0.1",
    }
    assert second["status"] == 401
    assert second["key_id"] is None  # no key was accepted
    assert second["request_id"] == refused.headers["x-request-id"]
    assert second["route"] == "/v1/accounts/{account_id}/balance"
    # As JSON: one line, the fields as members.
    record = next(r for r in caplog.records if r.name == "app.requests")
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["logger"] == "app.requests"
    assert parsed["level"] == "INFO"
    assert parsed["message"] == f"POST {GRANTS} 201"
    assert parsed["request_id"] == "trace-42"
    assert parsed["key_id"] == key_id
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", parsed["time"])


async def test_the_request_log_is_on_by_default_and_can_be_turned_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(storage="memory", data_dir=tmp_path)
    assert settings.access_log
    for access_log, expected in ((True, 1), (False, 0)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="app.requests"):
            app = create_app(settings.model_copy(update={"access_log": access_log}))
            async with running(app) as client:
                response = await client.post("/v1/accounts/a/grants", json=GRANT)
                assert response.status_code == 201
        assert len(request_lines(caplog)) == expected, access_log


class Formatted(logging.Handler):
    """Formats each record as it is emitted, as a real handler does (in the request's
    context)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


async def test_lines_logged_during_a_request_carry_its_id(keyed_client: Any) -> None:
    client, _, _ = keyed_client
    handler = Formatted()
    logger = logging.getLogger("app")
    logger.addHandler(handler)
    try:
        r = await client.get(
            "/v1/accounts/a/balance", headers={**bearer("gck_x_y"), "X-Request-ID": "auth-7"}
        )
    finally:
        logger.removeHandler(handler)
    assert r.status_code == 401
    (failure,) = [line for line in handler.lines if line["logger"] == "app.auth"]
    assert failure["request_id"] == "auth-7"
    assert REQUEST_ID.get() is None  # nothing left behind after a request


# -- request ids --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given",
    ["a", "x" * 128, "!~", "4bf92f3577b34da6a3ce929d0e0e4736", "trace:1/2;3=4"],
)
async def test_a_valid_request_id_is_kept(keyed_client: Any, given: str) -> None:
    client, _, _ = keyed_client
    r = await client.get("/livez", headers={"X-Request-ID": given})
    assert r.headers["x-request-id"] == given
    problem = assert_problem(await client.get("/nowhere", headers={"X-Request-ID": given}), 404)
    assert problem["request_id"] == given


@pytest.mark.parametrize(
    "given",
    [b"", b"x" * 129, b"has space", b"tab\there", b"caf\xc3\xa9", b"\x7f", b"new\x01line"],
)
async def test_an_invalid_request_id_is_replaced(keyed_client: Any, given: bytes) -> None:
    client, _, _ = keyed_client
    r = await client.get("/nowhere", headers=[(b"X-Request-ID", given)])
    problem = assert_problem(r, 404)
    made = r.headers["x-request-id"]
    assert GENERATED.fullmatch(made), made
    assert problem["request_id"] == made


async def test_a_repeated_request_id_is_replaced(keyed_client: Any) -> None:
    client, _, _ = keyed_client
    r = await client.get("/livez", headers=[(b"X-Request-ID", b"one"), (b"X-Request-ID", b"two")])
    assert GENERATED.fullmatch(r.headers["x-request-id"])


async def test_every_answer_carries_an_id_of_its_own(keyed_client: Any) -> None:
    client, key, _ = keyed_client
    answers = [
        await client.get("/livez"),
        await client.get("/openapi.json"),
        await client.get("/docs"),
        await client.post("/v1/accounts/a/grants", json=GRANT, headers=bearer(key)),
        await client.post("/v1/accounts/a/grants", json=GRANT),  # 401
        await client.post(
            "/v1/accounts/a/grants", content=b"{", headers={**bearer(key), "Content-Type": "x"}
        ),  # 415
        await client.post(
            "/v1/accounts/a/grants",
            content=b"{" + b" " * 70_000 + b"}",
            headers={**bearer(key), "Content-Type": "application/json"},
        ),  # 413, from the limits in front of the routes
        await client.delete("/v1/accounts/a/grants", headers=bearer(key)),  # 405
    ]
    assert [r.status_code for r in answers] == [200, 200, 200, 201, 401, 415, 413, 405]
    ids = [r.headers["x-request-id"] for r in answers]
    assert all(GENERATED.fullmatch(i) for i in ids), ids
    assert len(set(ids)) == len(ids)
    for r in answers[4:]:
        assert assert_problem(r, r.status_code)["request_id"] == r.headers["x-request-id"]


async def test_batch_results_carry_no_request_id_of_their_own(keyed_client: Any) -> None:
    client, key, _ = keyed_client
    ops = {"operations": [{"op": "balance", "account_id": "nobody"}]}
    r = await client.post("/v1/batch", json=ops, headers=bearer(key))
    assert r.status_code == 200, r.text
    (result,) = r.json()["results"]
    assert result["status"] == 404
    assert "request_id" not in result["body"]
    aborted = await client.post("/v1/batch", json={**ops, "atomic": True}, headers=bearer(key))
    problem = assert_problem(aborted, 404)
    assert problem["request_id"] == aborted.headers["x-request-id"]
    assert "request_id" not in problem["operation_problem"]


# -- the formatters -------------------------------------------------------------------------


def _record(message: str, *args: object, **extra: Any) -> logging.LogRecord:
    return logging.getLogger("tests.logs").makeRecord(
        "tests.logs", logging.WARNING, __file__, 1, message, args, None, extra=extra
    )


def test_json_lines_escape_what_could_forge_a_line() -> None:
    line = JsonFormatter().format(_record("client sent %r", 'x\n{"level": "ERROR"}\r\x1b[2J'))
    for raw in ("\n", "\r", "\x1b"):
        assert raw not in line
    parsed = json.loads(line)
    assert parsed["level"] == "WARNING"
    assert parsed["message"].startswith("client sent ")
    assert "request_id" not in parsed  # logged outside any request


def test_a_traceback_stays_inside_its_json_line() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.getLogger("tests.logs").makeRecord(
            "tests.logs", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    line = JsonFormatter().format(record)
    assert "\n" not in line
    parsed = json.loads(line)
    assert parsed["message"] == "failed"
    assert "ValueError: boom" in parsed["exception"]


def test_text_lines_show_the_fields() -> None:
    fields = {"request_id": "r-1", "route": GRANTS, "status": 201, "key_id": None}
    text = TextFormatter().format(_record("POST %s %d", GRANTS, 201, fields=fields))
    expected = f"WARNING tests.logs: POST {GRANTS} 201 request_id=r-1 route={GRANTS} status=201"
    assert text.endswith(expected)
    token = REQUEST_ID.set("r-2")
    try:
        assert TextFormatter().format(_record("plain")).endswith("plain request_id=r-2")
    finally:
        REQUEST_ID.reset(token)


# -- buffered writes (app.logs.BufferedStreamHandler) -----------------------------------------


class _CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


def _buffered(interval_s: float, capacity_bytes: int = 64 * 1024) -> tuple[Any, _CountingStream]:
    stream = _CountingStream()
    handler = BufferedStreamHandler(stream, interval_s, capacity_bytes)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    return handler, stream


def _at(level: int, message: str) -> logging.LogRecord:
    return logging.LogRecord("tests.logs", level, __file__, 1, message, None, None)


NEVER_S = 3600.0  # a flush interval that does not run out during a test


def test_lines_below_warning_wait_and_a_warning_writes_them_first_in_one_write() -> None:
    handler, stream = _buffered(NEVER_S)
    try:
        handler.handle(_at(logging.INFO, "one"))
        handler.handle(_at(logging.DEBUG, "two"))
        assert stream.getvalue() == ""
        handler.handle(_at(logging.WARNING, "three"))
        assert stream.getvalue() == "INFO one\nDEBUG two\nWARNING three\n"
        assert stream.writes == 1
        handler.handle(_at(logging.ERROR, "four"))
        assert stream.getvalue().endswith("WARNING three\nERROR four\n")
    finally:
        handler.close()


def test_waiting_lines_are_written_by_the_timer_together() -> None:
    handler, stream = _buffered(0.05)
    try:
        for i in range(100):
            handler.handle(_at(logging.INFO, f"line {i}"))
        deadline = time.monotonic() + WAIT_S
        while stream.getvalue().count("\n") < 100:
            assert time.monotonic() < deadline, stream.getvalue()
            time.sleep(0.01)  # polling interval while waiting for the flusher thread
        assert stream.getvalue() == "".join(f"INFO line {i}\n" for i in range(100))
        assert stream.writes < 100  # batched, not one write a line
        handler.handle(_at(logging.INFO, "later"))  # the flusher serves the next lines too
        while not stream.getvalue().endswith("INFO later\n"):
            assert time.monotonic() < deadline, stream.getvalue()
            time.sleep(0.01)
    finally:
        handler.close()


def test_a_full_buffer_is_written_at_once() -> None:
    handler, stream = _buffered(NEVER_S, capacity_bytes=40)
    try:
        handler.handle(_at(logging.INFO, "a" * 20))
        assert stream.getvalue() == ""
        handler.handle(_at(logging.INFO, "b" * 20))  # 2 lines of 26 characters: over 40
        assert stream.getvalue() == f"INFO {'a' * 20}\nINFO {'b' * 20}\n"
    finally:
        handler.close()


def test_flush_and_close_write_what_waits_and_a_closed_handler_writes_at_once() -> None:
    handler, stream = _buffered(NEVER_S)
    handler.handle(_at(logging.INFO, "one"))
    handler.flush()  # what logging.shutdown() does at exit, before close()
    assert stream.getvalue() == "INFO one\n"
    handler.handle(_at(logging.INFO, "two"))
    handler.close()
    assert stream.getvalue() == "INFO one\nINFO two\n"
    handler.handle(_at(logging.INFO, "three"))  # a line logged during shutdown
    assert stream.getvalue().endswith("INFO three\n")


def test_a_zero_interval_writes_every_line_at_once() -> None:
    handler, stream = _buffered(0.0)
    try:
        handler.handle(_at(logging.INFO, "one"))
        assert stream.getvalue() == "INFO one\n"
    finally:
        handler.close()


# -- a real server's stderr -----------------------------------------------------------------


@dataclass
class Served:
    base_url: str
    key: str
    key_id: str
    stdout: Path
    stderr: Path


@contextlib.contextmanager
def _serve(tmp_path: Path, log_format: str) -> Iterator[Served]:
    """``gpu-credits serve`` as the README says, stdout and stderr apart; stopped (SIGTERM)
    before the test reads them, so the shutdown lines are there too."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    key, record = create_key(data_dir / "api-keys.json", "billing", tuple(Scope), "")
    port = free_port()
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    env = {
        **os.environ,
        "GPU_CREDITS_DATA_DIR": str(data_dir),
        "GPU_CREDITS_LOG_FORMAT": log_format,
        "GPU_CREDITS_ACCESS_LOG": "true",
    }
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [console_script(), "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=stdout,
            stderr=stderr,
            cwd=ROOT,
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + WAIT_S
        while True:
            assert proc.poll() is None, err.read_text()
            try:
                if httpx.get(f"{base_url}/readyz", timeout=1.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, err.read_text()
            time.sleep(0.02)  # polling interval while waiting for the server
        yield Served(base_url, key, record.key_id, out, err)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


def test_a_real_server_writes_json_lines_to_stderr(tmp_path: Path) -> None:
    with (
        _serve(tmp_path, "json") as server,
        httpx.Client(base_url=server.base_url, timeout=10.0) as http,
    ):
        ok = http.post(
            "/v1/accounts/team-a:x/grants",
            json=GRANT,
            headers={**bearer(server.key), "X-Request-ID": "e2e-1"},
        )
        assert ok.status_code == 201, ok.text
        bad = http.get("/v1/accounts/team-a:x/balance", headers=bearer("gck_0123456789ab_nope"))
        assert bad.status_code == 401
    # Stopped (SIGTERM): the process has exited and written everything.

    stderr = server.stderr.read_text()
    assert server.stdout.read_text() == "", (server.stdout.read_text(), stderr)
    lines = [json.loads(line) for line in stderr.splitlines()]
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line), line
    loggers = {line["logger"] for line in lines}
    assert {"uvicorn.error", "app", "app.auth", "app.requests"} <= loggers, loggers
    messages = [line["message"] for line in lines]
    assert any("Application startup complete" in m for m in messages), messages
    assert any("Application shutdown complete" in m for m in messages), messages
    requests = {line["request_id"]: line for line in lines if line["logger"] == "app.requests"}
    granted = requests["e2e-1"]
    assert granted["latency_ms"] > 0, granted
    del granted["latency_ms"], granted["time"]
    assert granted == {
        "level": "INFO",
        "logger": "app.requests",
        "message": f"POST {GRANTS} 201",
        "request_id": "e2e-1",
        "method": "POST",
        "route": GRANTS,
        "path": "/v1/accounts/team-a:x/grants",
        "account": "team-a:x",
        "status": 201,
        "key_id": server.key_id,
        "client": "127.0.0.1",
    }
    refused = requests[bad.headers["x-request-id"]]
    assert (refused["status"], refused["key_id"]) == (401, None), refused
    (failure,) = [
        line for line in lines if line["logger"] == "app.auth" and line["level"] == "WARNING"
    ]
    assert "key id 0123456789ab" in failure["message"]
    assert failure["request_id"] == bad.headers["x-request-id"], failure  # that request's
    assert server.key.split("_", 2)[2] not in stderr  # the secret (it may hold "_" too)


def test_a_real_server_writes_text_for_development(tmp_path: Path) -> None:
    with (
        _serve(tmp_path, "text") as server,
        httpx.Client(base_url=server.base_url, timeout=10.0) as http,
    ):
        r = http.post(
            "/v1/accounts/a/grants",
            json=GRANT,
            headers={**bearer(server.key), "X-Request-ID": "dev-1"},
        )
        assert r.status_code == 201, r.text
    text = server.stderr.read_text()
    (line,) = [ln for ln in text.splitlines() if "request_id=dev-1" in ln]
    assert f"INFO app.requests: POST {GRANTS} 201 request_id=dev-1 method=POST" in line
    assert f"key_id={server.key_id}" in line
    startup = next(ln for ln in text.splitlines() if "Application startup complete" in ln)
    assert "INFO uvicorn.error: Application startup complete" in startup
    assert not startup.startswith("{")


def test_text_lines_show_request_fields_escaped() -> None:
    """A path is percent-decoded before it is logged (``%0A`` is a newline): in the text
    format a caller must not be able to start a line of its own."""
    record = logging.LogRecord("app.requests", logging.INFO, "", 0, "GET x 404", None, None)
    record.fields = {"path": "/v1/accounts/a\nFORGED ERROR line/ledger", "status": 404}
    line = TextFormatter().format(record)
    assert "\n" not in line
    assert "path=/v1/accounts/a\\nFORGED ERROR line/ledger" in line
