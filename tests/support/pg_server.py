"""A throwaway PostgreSQL server for the tests, started from the installed binaries.

- The binaries come from ``pg_config --bindir`` (fallback ``/usr/lib/postgresql/15/bin``).
- ``initdb`` refuses to run as root, and CI runs as root: when the effective uid is 0, initdb,
  postgres and pg_ctl run as the ``postgres`` system user through ``runuser -u postgres --``
  (or as ``gpucredits-pg``, created with ``useradd --system`` when there is no ``postgres``
  user), in a temporary directory owned by that user. Otherwise they run as the current user.
- Trust authentication for the superuser ``postgres``; the server listens on 127.0.0.1 on a
  free port and on a unix socket inside the temporary directory, with ``fsync`` on (the tests
  that use it are about durability) and ``max_connections=200``.
- Readiness is polled with ``pg_isready`` until a deadline; databases are made with the
  ``createdb`` binary, not a Python driver, so this module needs nothing but the standard
  library. ``stop()`` is ``pg_ctl stop -m immediate`` (no shutdown checkpoint: after a
  session's databases that would write for many seconds what is deleted next) and removes
  the temporary directory; ``restart(mode)`` stops with ``pg_ctl stop -m fast|immediate``
  and starts again.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from tests.support.server_process import free_port

FALLBACK_BINDIR = Path("/usr/lib/postgresql/15/bin")
REQUIRED_BINARIES = ("initdb", "postgres", "pg_ctl", "pg_isready", "createdb")
SYSTEM_USER_FALLBACK = "gpucredits-pg"
STARTUP_TIMEOUT_S = 60.0
COMMAND_TIMEOUT_S = 120.0
SUPERUSER = "postgres"
DEFAULT_DATABASE = "gpu_credits"
_DATABASE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class PostgresUnavailable(RuntimeError):
    """The PostgreSQL binaries are not installed (the only reason a test may skip)."""


def find_bindir() -> Path | None:
    """The directory holding initdb, postgres, pg_ctl, pg_isready and createdb, or None."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config is not None:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=30, check=True
            ).stdout.strip()
            if out:
                candidates.append(Path(out))
    candidates.append(FALLBACK_BINDIR)
    for bindir in candidates:
        if all(os.access(bindir / name, os.X_OK) for name in REQUIRED_BINARIES):
            return bindir
    return None


def _system_user() -> str:
    """The unprivileged user root runs the server as: ``postgres``, else a system user made
    for the purpose."""
    for name in (SUPERUSER, SYSTEM_USER_FALLBACK):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    result = subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
         SYSTEM_USER_FALLBACK],
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )  # fmt: skip
    try:
        pwd.getpwnam(SYSTEM_USER_FALLBACK)  # made now, or by a concurrent run
    except KeyError:
        raise RuntimeError(
            f"could not create the system user {SYSTEM_USER_FALLBACK}: {result.stderr.strip()}"
        ) from None
    return SYSTEM_USER_FALLBACK


def _traversable_by_others(path: Path) -> bool:
    """Whether every directory from / down to ``path`` lets other users pass through."""
    return all(part.stat().st_mode & stat.S_IXOTH for part in [path, *path.parents])


def _temp_root(run_as: str | None) -> Path:
    base = Path(tempfile.gettempdir()).resolve()
    if run_as is not None and not _traversable_by_others(base):
        base = Path("/tmp")  # TMPDIR is private to root; the server user could not reach it
    root = Path(tempfile.mkdtemp(prefix="gpu-credits-pg-", dir=base))
    if run_as is not None:
        user = pwd.getpwnam(run_as)
        os.chown(root, user.pw_uid, user.pw_gid)
    root.chmod(0o700)
    return root


@dataclass
class PostgresServer:
    """A running throwaway server; ``url`` is its default database."""

    bindir: Path
    root: Path
    port: int
    run_as: str | None
    process: subprocess.Popen[bytes] | None = None
    databases: list[str] = field(default_factory=list)

    host = "127.0.0.1"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "sock"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    @property
    def url(self) -> str:
        return self.url_for(DEFAULT_DATABASE)

    def url_for(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{database}"

    def create_database(self, name: str, icu_locale: str | None = None) -> str:
        """Create an empty database ``name`` on this server and return its URL. The server's
        collation is C (byte order); with ``icu_locale`` (``en-US``) the database's default
        collation is that ICU locale's instead, as production databases often have, so that
        a query that forgets ``COLLATE "C"`` where it needs byte order is caught."""
        if not _DATABASE_NAME.fullmatch(name):
            raise ValueError(f"database name {name!r} must match {_DATABASE_NAME.pattern}")
        if icu_locale is None:
            self._client("createdb", name)
        else:
            self._client(
                "createdb",
                "--template=template0",
                "--locale-provider=icu",
                f"--icu-locale={icu_locale}",
                name,
            )
        self.databases.append(name)
        return self.url_for(name)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return ""

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._as_server_user(
            "initdb",
            "-D", str(self.data_dir),
            "-U", SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-instructions",
        )  # fmt: skip
        self.socket_dir.mkdir()
        if self.run_as is not None:
            user = pwd.getpwnam(self.run_as)
            os.chown(self.socket_dir, user.pw_uid, user.pw_gid)
        self._spawn()
        self._client("createdb", DEFAULT_DATABASE)

    def restart(self, mode: Literal["fast", "immediate"]) -> None:
        """``pg_ctl stop -m MODE`` then start the same server again, and wait until it
        accepts connections. ``fast`` disconnects every client and shuts down cleanly;
        ``immediate`` kills every backend without a checkpoint (a crash: the next start
        replays the WAL). Not ``pg_ctl restart``: that would leave the new server detached
        from ``self.process``, and ``stop()`` could no longer reach it."""
        assert self.process is not None, "server is not started"
        self._as_server_user("pg_ctl", "stop", "-D", str(self.data_dir), "-m", mode)
        self.process.wait(timeout=COMMAND_TIMEOUT_S)
        self._spawn()

    def _spawn(self) -> None:
        """Run ``postgres`` on the data directory and wait until it accepts connections."""
        log = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                self._server_command(
                    "postgres",
                    "-D", str(self.data_dir),
                    "-c", f"listen_addresses={self.host}",
                    "-c", f"port={self.port}",
                    "-c", f"unix_socket_directories={self.socket_dir}",
                    "-c", "max_connections=200",
                    "-c", "fsync=on",
                    "-c", "synchronous_commit=on",
                    "-c", "full_page_writes=on",
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                env=_env(),
            )  # fmt: skip
        finally:
            log.close()
        self._wait_ready(STARTUP_TIMEOUT_S)

    def stop(self) -> None:
        """``pg_ctl stop -m immediate``, then remove everything the server wrote."""
        try:
            if self.process is not None and self.process.poll() is None:
                self._as_server_user("pg_ctl", "stop", "-D", str(self.data_dir), "-m", "immediate")
                try:
                    self.process.wait(timeout=COMMAND_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=COMMAND_TIMEOUT_S)
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"postgres exited with {self.process.returncode} while starting:\n{self.log()}"
                )
            ready = subprocess.run(
                [str(self.bindir / "pg_isready"), "-q", "-h", self.host, "-p", str(self.port),
                 "-U", SUPERUSER, "-d", "postgres", "-t", "1"],
                env=_env(),
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )  # fmt: skip
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"postgres not ready after {timeout_s} s:\n{self.log()}")
            time.sleep(0.05)  # polling interval while waiting for a condition

    # -- running the binaries ------------------------------------------------------------

    def _server_command(self, binary: str, *args: str) -> list[str]:
        command = [str(self.bindir / binary), *args]
        if self.run_as is None:
            return command
        return ["runuser", "-u", self.run_as, "--", *command]

    def _as_server_user(self, binary: str, *args: str) -> None:
        _run(self._server_command(binary, *args), cwd=self.root)

    def _client(self, binary: str, *args: str) -> None:
        """A client binary over TCP (trust auth: any OS user may connect as postgres)."""
        command = [
            str(self.bindir / binary), "-h", self.host, "-p", str(self.port), "-U", SUPERUSER,
            *args,
        ]  # fmt: skip
        _run(command, cwd=self.root)


def _env() -> dict[str, str]:
    """The environment without PG* variables (they would redirect the client binaries)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    env["LC_ALL"] = "C"
    return env


def _run(command: Sequence[str], cwd: Path) -> None:
    result = subprocess.run(
        list(command),
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} failed with {result.returncode}:\n"
            f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        )


def start_postgres() -> PostgresServer:
    """Start a throwaway server; raise ``PostgresUnavailable`` if the binaries are missing."""
    bindir = find_bindir()
    if bindir is None:
        raise PostgresUnavailable(
            "PostgreSQL server binaries not found (pg_config --bindir, "
            f"{FALLBACK_BINDIR}): install postgresql-15"
        )
    run_as = _system_user() if os.geteuid() == 0 else None
    root = _temp_root(run_as)
    server = PostgresServer(bindir=bindir, root=root, port=free_port(), run_as=run_as)
    try:
        server.start()
    except BaseException:
        server.stop()
        raise
    return server


def start_postgres_or_skip() -> PostgresServer:
    """``start_postgres`` for a test or fixture: skips it when the binaries are not
    installed, and fails it instead in CI (CI=true), where PostgreSQL must be there."""
    try:
        return start_postgres()
    except PostgresUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but PostgreSQL is not installed: {exc}")
        pytest.skip(str(exc))
