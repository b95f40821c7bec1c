"""A real service process, started the way the README starts it (the ``gpu-credits serve``
console script from the project's virtualenv), for end-to-end and crash tests."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT_S = 60.0


def console_script() -> str:
    """The installed ``gpu-credits`` next to this interpreter (the project's .venv)."""
    candidate = Path(sys.executable).parent / "gpu-credits"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("gpu-credits")
    assert found, "gpu-credits console script is not installed: run ./scripts/setup"
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ServerProcess:
    def __init__(
        self,
        data_dir: Path,
        storage: str = "sqlite",
        port: int | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        self.data_dir = data_dir
        self.extra_args = args  # after ``serve --host --port``
        self.extra_env = dict(env or {})
        self.storage = storage
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        # Tests that delete or replace the data directory keep the log elsewhere.
        self.log_path = log_path or data_dir / f"server-{self.port}.log"

    def start(self) -> float:
        """Start and wait until /healthz answers 200; return the seconds that took."""
        env = {
            **os.environ,
            "GPU_CREDITS_DATA_DIR": str(self.data_dir),
            "GPU_CREDITS_STORAGE": self.storage,
            **self.extra_env,
        }
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [
                console_script(),
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                *self.extra_args,
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        self.wait_healthy(STARTUP_TIMEOUT_S)
        return time.monotonic() - started

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.log()}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"server not healthy after {timeout_s} s: {self.log()}")
            time.sleep(0.02)  # polling interval while waiting for a condition

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no shutdown handlers run, exactly like a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM and wait: a graceful shutdown. Returns the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        return self.proc.returncode


@contextlib.contextmanager
def started(servers: list[ServerProcess]) -> Iterator[list[ServerProcess]]:
    """``servers`` started one after the other (the first one migrates a shared schema),
    stopped on exit whatever happened."""
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


def postgres_processes(
    tmp_path: Path, database_url: str, count: int, env: Mapping[str, str] | None = None
) -> list[ServerProcess]:
    """``count`` service processes (not started) sharing the PostgreSQL database at
    ``database_url``, each with its own data directory under ``tmp_path``."""
    shared = {
        "GPU_CREDITS_STORAGE": "postgres",
        "GPU_CREDITS_DATABASE_URL": database_url,
        **(env or {}),
    }
    return [
        ServerProcess(tmp_path / f"process-{i}", storage="postgres", env=shared)
        for i in range(count)
    ]
