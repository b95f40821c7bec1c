"""The SQLite file is known by its identity (device and inode), not by its path (issue 9,
items 5 and 6).

- One server per database file, however the file is reached: a second server that gets to
  the same file through a symlink (to the directory or to the file), a hard link or a bind
  mount must refuse to start, with a clear message and a non-zero exit, while the first one
  keeps serving. The path-keyed ``<file>.lock`` of before let the file-level aliases through.
- A database whose file is no longer the one at its path (deleted, its directory removed,
  renamed or replaced, its WAL deleted) is noticed within seconds: writes are refused with
  503, ``/readyz`` and ``/healthz`` answer 503 with the reason while ``/livez`` answers 200,
  and the reason is logged once at ERROR.
  Before, writes were acknowledged into deleted files and everything was lost at restart.

Every wait polls a condition with a bound in time; nothing sleeps for luck.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from app.domain import LiveGrant
from app.storage.base import AccountRow, Change, StorageError
from app.storage.memory import MemoryStore
from app.storage.sqlite import SqliteStore
from tests.support.api import observed
from tests.support.server_process import ServerProcess, console_script, free_port

DB_NAME = "gpu-credits.sqlite3"  # the default GPU_CREDITS_SQLITE_FILE
SECOND_SERVER_TIMEOUT_S = 30.0  # a refused second server exits well within this
DETECTION_BOUND_S = 5.0  # the promise: a vanished database is noticed within this
DETECTION_WAIT_S = 15.0  # how long the test waits before calling it a failure
POLL_INTERVAL_S = 0.05  # polling interval while waiting for a condition
GRANT = {"amount": 5, "timestamp": 0, "expiry": 100}


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Poll ``condition`` until true; return the seconds it took. Bounded in time."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(POLL_INTERVAL_S)
    return time.monotonic() - started


def serve_with_one_grant(directory: Path) -> Iterator[ServerProcess]:
    """A server on ``directory/data`` that has acknowledged one grant on account ``a``; its
    log is outside the data directory, which some tests delete."""
    server = ServerProcess(directory / "data", log_path=directory / "first.log")
    server.start()
    try:
        r = httpx.post(f"{server.base_url}/v1/accounts/a/grants", json=GRANT)
        assert r.status_code == 201, r.text
        yield server
    finally:
        server.stop()


@pytest.fixture
def first(tmp_path: Path) -> Iterator[ServerProcess]:
    yield from serve_with_one_grant(tmp_path)


@pytest.fixture(scope="module")
def shared_first(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One first server for every alias case (each only adds a refused second server)."""
    yield from serve_with_one_grant(tmp_path_factory.mktemp("shared"))


# -- item 5: one server per database file, however it is reached --------------------------


def run_second_server(
    tmp_path: Path, data_dir: Path, sqlite_file: str, prefix: tuple[str, ...] = ()
) -> tuple[int | None, str]:
    """Start another server on ``data_dir/sqlite_file`` and wait until it exits or serves.
    Returns (exit code, output); the exit code is None when it started serving (it is then
    killed: that is the defect)."""
    port = free_port()
    env = {
        **os.environ,
        "GPU_CREDITS_DATA_DIR": str(data_dir),
        "GPU_CREDITS_SQLITE_FILE": sqlite_file,
    }
    log_path = tmp_path / f"second-{port}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [*prefix, console_script(), "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + SECOND_SERVER_TIMEOUT_S
        while proc.poll() is None:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0).status_code == 200:
                    return None, log_path.read_text(errors="replace")
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "second server neither served nor exited"
            time.sleep(POLL_INTERVAL_S)
        return proc.returncode, log_path.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def bind_mount_prefix(source: Path, target: Path) -> tuple[str, ...]:
    """A command prefix that runs the rest in a private mount namespace where ``target`` is a
    bind mount of ``source`` (nothing changes outside; the mount ends with the process)."""
    script = 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
    unshare = ("unshare", "--mount", "--propagation", "private")
    return (*unshare, "sh", "-c", script, "sh", str(source), str(target))


def can_bind_mount(tmp_path: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    src, dst = tmp_path / "probe-src", tmp_path / "probe-dst"
    src.touch()
    dst.touch()
    probe = subprocess.run(
        [*bind_mount_prefix(src, dst), "true"],
        capture_output=True,
        timeout=30,
    )
    return probe.returncode == 0


@pytest.mark.parametrize(
    "alias", ["directory-symlink", "file-symlink", "hard-link", "file-bind-mount"]
)
def test_a_second_server_reaching_the_same_file_another_way_is_refused(
    tmp_path: Path, shared_first: ServerProcess, alias: str
) -> None:
    first = shared_first
    database = (first.data_dir / DB_NAME).resolve()
    other = tmp_path / "other"
    other.mkdir()
    prefix: tuple[str, ...] = ()
    if alias == "directory-symlink":
        (tmp_path / "data-link").symlink_to(first.data_dir, target_is_directory=True)
        data_dir, sqlite_file = tmp_path / "data-link", DB_NAME
    elif alias == "file-symlink":
        (other / "alias.sqlite3").symlink_to(database)
        data_dir, sqlite_file = other, "alias.sqlite3"
    elif alias == "hard-link":
        (other / "alias.sqlite3").hardlink_to(database)
        data_dir, sqlite_file = other, "alias.sqlite3"
    else:
        if not can_bind_mount(tmp_path):
            pytest.skip("bind mounts need unshare and CAP_SYS_ADMIN")
        (other / "alias.sqlite3").touch()
        prefix = bind_mount_prefix(database, other / "alias.sqlite3")
        data_dir, sqlite_file = other, "alias.sqlite3"

    code, output = run_second_server(tmp_path, data_dir, sqlite_file, prefix)

    assert code is not None, f"a second server started on the same file: {output}"
    assert code != 0
    assert "in use by another gpu-credits process" in output, output
    # The message names the file the alias resolves to, so the operator can find it.
    resolved = (data_dir / sqlite_file).resolve() if alias != "file-bind-mount" else None
    if resolved is not None:
        assert str(resolved) in output, output
    # The first server is unaffected and keeps acknowledging writes.
    consumption = {"amount": 2, "timestamp": 1}
    r = httpx.post(f"{first.base_url}/v1/accounts/a/consumptions", json=consumption)
    assert r.status_code == 200, r.text
    assert httpx.get(f"{first.base_url}/healthz").status_code == 200


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


def test_the_lock_dies_with_a_killed_server(tmp_path: Path, first: ServerProcess) -> None:
    """The lock is the kernel's: after SIGKILL another server opens the file at once, here
    through a symlink, and finds everything the first one acknowledged."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "alias.sqlite3").symlink_to(tmp_path / "data" / DB_NAME)
    first.kill()
    second = ServerProcess(
        other, log_path=tmp_path / "second.log", env={"GPU_CREDITS_SQLITE_FILE": "alias.sqlite3"}
    )
    second.start()
    try:
        balance = httpx.get(f"{second.base_url}/v1/accounts/a/balance").json()
        assert balance["balance"] == GRANT["amount"]
    finally:
        second.stop()


# -- item 6: a database that is no longer the file at its path -----------------------------


def health(server: ServerProcess) -> httpx.Response:
    return httpx.get(f"{server.base_url}/healthz", timeout=2.0)


def storage_errors_logged(log: str) -> list[str]:
    """The ERROR lines of the SQLite store (the server logs one JSON object a line)."""
    errors = []
    for line in log.splitlines():
        if '"app.storage.sqlite"' in line:
            record = json.loads(line)
            if record["level"] == "ERROR":
                errors.append(record["message"])
    return errors


@pytest.mark.parametrize("how", ["deleted", "renamed-and-replaced"])
def test_a_vanished_database_is_noticed_within_seconds(
    tmp_path: Path, first: ServerProcess, how: str
) -> None:
    data = tmp_path / "data"
    if how == "deleted":
        shutil.rmtree(data)
    else:
        data.rename(tmp_path / "data.old")
        data.mkdir()
    # No request arrives meanwhile: the periodic check alone must notice.
    took_s = wait_for(lambda: health(first).status_code == 503, DETECTION_WAIT_S, "healthz 503")
    print(f"{how}: noticed after {took_s:.2f} s")
    assert took_s <= DETECTION_BOUND_S, f"noticed after {took_s:.1f} s"

    problem = health(first).json()
    assert str(data / DB_NAME) in problem["detail"], problem
    assert "restart" in problem["detail"], problem
    r = httpx.post(f"{first.base_url}/v1/accounts/a/grants", json={**GRANT, "timestamp": 1})
    assert r.status_code == 503, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert str(data / DB_NAME) in r.json()["detail"]
    # Reads answer 503 too: the service looks unhealthy as a whole, it does not half-serve.
    assert httpx.get(f"{first.base_url}/v1/accounts/a/balance").status_code == 503
    assert httpx.get(f"{first.base_url}/v1/accounts").status_code == 503
    errors = storage_errors_logged(first.log())
    assert len(errors) == 1, first.log()
    assert str(data / DB_NAME) in errors[0]


def test_a_server_whose_database_was_replaced_is_unready_but_alive(
    tmp_path: Path, first: ServerProcess
) -> None:
    """The probes of issue 13 on a real process: storage unreachable makes the service
    unready (``/readyz`` and its alias ``/healthz``: 503 saying why), not dead (``/livez``
    200, and ``/version`` still answers): a restart is the operator's call, with the data
    put back first."""
    with httpx.Client(base_url=first.base_url, timeout=2.0) as probe:
        assert probe.get("/readyz").status_code == 200
        data = tmp_path / "data"
        data.rename(tmp_path / "data.old")
        data.mkdir()
        wait_for(lambda: probe.get("/readyz").status_code == 503, DETECTION_WAIT_S, "readyz 503")
        ready, health = probe.get("/readyz"), probe.get("/healthz")
        assert health.status_code == 503
        assert ready.headers["content-type"] == "application/problem+json"
        assert observed(ready) == observed(health)  # bar each request's own id
        assert str(data / DB_NAME) in ready.json()["detail"], ready.json()
        live = probe.get("/livez")
        assert (live.status_code, live.json()) == (200, {"status": "ok"})
        version = probe.get("/version")
        assert version.status_code == 200, version.text
        assert version.json()["storage"] == "sqlite"


def test_the_first_write_after_the_directory_is_replaced_is_refused(
    tmp_path: Path, first: ServerProcess
) -> None:
    """Writes do not wait for the periodic check: each commit checks the file first (and
    again before it is acknowledged), so nothing reaches the old file once it is gone."""
    data = tmp_path / "data"
    data.rename(tmp_path / "data.old")
    data.mkdir()
    r = httpx.post(f"{first.base_url}/v1/accounts/a/grants", json={**GRANT, "timestamp": 1})
    assert r.status_code == 503, r.text
    assert health(first).status_code == 503
    first.stop()  # graceful: the store closes (and checkpoints into the old file)
    assert "Application shutdown complete" in first.log(), first.log()
    # The refused grant is in neither directory: the old file holds the acknowledged grant
    # only, and the server created nothing in the replacement.
    assert list(data.iterdir()) == []
    with sqlite3.connect(tmp_path / "data.old" / DB_NAME) as conn:
        assert conn.execute("SELECT count(*) FROM entries").fetchone() == (1,)


# -- the store's check, in process ---------------------------------------------------------


def one_change(account_id: str = "a") -> list[Change]:
    row = AccountRow(account_id, clock=0, debt=0, next_grant_id=2, next_sequence=1)
    return [Change(row, upserted_live_grants=[LiveGrant(1, 10, 1)])]


async def test_a_healthy_store_reports_no_problem(tmp_path: Path) -> None:
    assert await MemoryStore().check() is None
    store = SqliteStore(tmp_path / DB_NAME)
    await store.open(0.0)
    try:
        await store.submit(one_change())
        assert await store.check() is None
    finally:
        await store.close()
    assert await store.check() is None  # closed: nothing left to watch


@pytest.mark.parametrize("how", ["wal-deleted", "file-replaced"])
async def test_the_store_notices_its_files_are_gone(tmp_path: Path, how: str) -> None:
    path = tmp_path / DB_NAME
    store = SqliteStore(path)
    await store.open(0.0)
    try:
        await store.submit(one_change())
        if how == "wal-deleted":
            # Commits would go on into the deleted WAL and be lost at restart.
            os.unlink(f"{path}-wal")
        else:
            replacement = tmp_path / "replacement"
            replacement.write_bytes(b"")
            os.replace(replacement, path)
        reason = await store.check()
        assert reason is not None
        assert str(tmp_path) in reason
        with pytest.raises(StorageError, match=str(tmp_path)):
            await store.submit(one_change("b"))
    finally:
        await store.close()
