"""The processes the benchmarks start: ``gpu-credits serve`` and a throwaway PostgreSQL.

Kept small on purpose (the tests have fuller versions under ``tests/support``, with crash
and restart control; the benchmarks do not import the tests): a server is started, waited
for until ``/healthz`` answers, and stopped with SIGTERM; PostgreSQL is ``initdb`` and
``pg_ctl start -w`` in a temporary directory, run as the ``postgres`` user when we are root
(initdb refuses root), with trust authentication on 127.0.0.1.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_until_up(url: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Poll ``url`` until it answers 200; fail if ``proc`` exits first or time runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url} not up after {timeout_s} s")
        time.sleep(0.05)


class Server:
    """``gpu-credits serve`` on a free port of 127.0.0.1, its output in ``data_dir``. With
    ``src``, the service of another checkout of the repository (``python -m app serve`` run
    there: an earlier version, to compare with in the same run)."""

    def __init__(
        self,
        data_dir: Path,
        storage: str = "sqlite",
        env: dict[str, str] | None = None,
        src: Path | None = None,
    ):
        self.data_dir = data_dir
        self.src = src
        self.env = {
            **os.environ,
            "GPU_CREDITS_DATA_DIR": str(data_dir),
            "GPU_CREDITS_STORAGE": storage,
            **(env or {}),
        }
        if src is None:
            # This checkout's service, whatever checkout the virtualenv was installed from:
            # the console script imports ``app`` through the editable install's finder,
            # which names the checkout that ran ``pip install -e``; a second worktree
            # sharing that virtualenv would otherwise measure the first one's code as its
            # own. Paths on PYTHONPATH are searched before that finder.
            self.env["PYTHONPATH"] = os.pathsep.join(
                p for p in (str(ROOT), self.env.get("PYTHONPATH", "")) if p
            )
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start and wait until healthy; return the seconds that took."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        command = [str(Path(sys.executable).parent / "gpu-credits"), "serve"]
        if self.src is not None:  # ``-m`` puts the working directory first on the path
            command = [sys.executable, "-m", "app", "serve"]
        started = time.monotonic()
        with (self.data_dir / f"server-{self.port}.log").open("ab") as log:
            self.proc = subprocess.Popen(
                [*command, "--host", "127.0.0.1", "--port", str(self.port)],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.src or ROOT,
            )
        wait_until_up(f"{self.base_url}/healthz", self.proc, STARTUP_TIMEOUT_S)
        return time.monotonic() - started

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)


class Postgres:
    """A throwaway PostgreSQL server; ``create_database(name)`` returns its URL."""

    def __init__(self) -> None:
        found = shutil.which("pg_config")
        out = subprocess.run([found, "--bindir"], capture_output=True, text=True) if found else None
        self.bindir = Path(out.stdout.strip() if out else "/usr/lib/postgresql/15/bin")
        self.run_as = "postgres" if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix="bench-pg-", dir="/tmp"))
        self.port = free_port()
        if self.run_as is not None:
            user = pwd.getpwnam(self.run_as)  # made by Debian's postgresql package
            os.chown(self.root, user.pw_uid, user.pw_gid)

    def _run(self, binary: str, *args: str) -> None:
        command = [str(self.bindir / binary), *args]
        if self.run_as is not None:
            command = ["runuser", "-u", self.run_as, "--", *command]
        done = subprocess.run(command, cwd=self.root, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")

    def start(self) -> None:
        data = str(self.root / "data")
        self._run("initdb", "-D", data, "-U", "postgres", "--auth=trust", "--no-instructions")
        options = f"-c listen_addresses=127.0.0.1 -c port={self.port} -c max_connections=200"
        options += f" -c unix_socket_directories={self.root}"
        self._run("pg_ctl", "start", "-w", "-D", data, "-l", f"{data}.log", "-o", options)

    def create_database(self, name: str) -> str:
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name)
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "stop", "-w", "-D", str(self.root / "data"), "-m", "fast")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
