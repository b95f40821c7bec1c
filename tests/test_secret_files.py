"""Secrets from files (issue 13): ``GPU_CREDITS_<NAME>_FILE`` for every secret setting (the
database URL and the database password), so a container's secret file (``/run/secrets/...``)
reaches the service and no password sits in its environment.

- In process: what ``Settings`` reads, and every way a ``_FILE`` can be unusable.
- The real command: an unusable ``_FILE`` or an invalid setting is one line on stderr, exit
  2, no traceback and no secret, for ``serve``, ``migrate`` and ``keys``.
- A real server on PostgreSQL: the URL from a file; and the compose setup, a URL without a
  password plus ``GPU_CREDITS_DATABASE_PASSWORD_FILE``, against a role that must give its
  password (scram-sha-256), which a wrong password file does not open.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest
from pydantic import ValidationError

from app.settings import SECRET_FILE_MAX_BYTES, SecretFileError, Settings
from tests.support.pg_server import PostgresServer
from tests.support.server_process import ServerProcess, console_script

# Characters a URL must percent-encode, and one that is not ASCII.
PASSWORD = "p@ss:w/rd?#%20 ü"
URL = "postgresql://ledger@db.example:5432/credits"
CLI_TIMEOUT_S = 60.0


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, str):
        content = content.encode()
    path.write_bytes(content)
    return path


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No GPU_CREDITS_ variable of the test process's own reaches ``Settings``."""
    for name in list(os.environ):
        if name.upper().startswith("GPU_CREDITS_"):
            monkeypatch.delenv(name)
    return monkeypatch


# -- Settings, in process ------------------------------------------------------------------


def test_the_url_from_a_file(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    url = "postgresql://ledger:s3cret@db.example:5432/credits"
    clean_env.setenv("GPU_CREDITS_STORAGE", "postgres")
    clean_env.setenv("GPU_CREDITS_DATABASE_URL_FILE", str(write(tmp_path / "url", url + "\n")))
    settings = Settings()
    assert settings.database_url_value() == url  # the newline `echo` leaves is dropped
    assert "s3cret" not in repr(settings)


def test_the_password_from_a_file_goes_into_the_url(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("GPU_CREDITS_STORAGE", "postgres")
    clean_env.setenv("GPU_CREDITS_DATABASE_URL", URL)
    clean_env.setenv("gpu_credits_database_password_file", str(write(tmp_path / "pw", PASSWORD)))
    settings = Settings()
    assert settings.database_url_value() == (
        "postgresql://ledger:p%40ss%3Aw%2Frd%3F%23%2520%20%C3%BC@db.example:5432/credits"
    )
    assert PASSWORD not in repr(settings)


def test_a_password_alone_in_the_environment_works_too(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("GPU_CREDITS_DATABASE_PASSWORD", "pw")
    settings = Settings(storage="postgres", database_url=URL)
    assert settings.database_url_value() == "postgresql://ledger:pw@db.example:5432/credits"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://ledger:other@db.example/credits",
        "postgresql://ledger@db.example/credits?password=other",
    ],
    ids=["in-userinfo", "in-query"],
)
def test_a_password_given_twice_is_refused(clean_env: pytest.MonkeyPatch, url: str) -> None:
    with pytest.raises(ValidationError, match="password is given twice"):
        Settings(storage="postgres", database_url=url, database_password="pw")


def test_a_value_and_its_file_together_are_refused(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("GPU_CREDITS_DATABASE_URL", URL)
    clean_env.setenv("GPU_CREDITS_DATABASE_URL_FILE", str(write(tmp_path / "url", URL)))
    with pytest.raises(SecretFileError, match="are both set"):
        Settings()


def test_only_secret_settings_have_a_file_variable(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("GPU_CREDITS_PORT_FILE", str(write(tmp_path / "port", "9")))
    assert Settings().port == 8000


@dataclass(frozen=True)
class Unusable:
    name: str
    path: str  # "{tmp}" is the test's directory
    content: bytes | None  # written to the path when not None
    reason: str


UNUSABLE = [
    Unusable("missing", "{tmp}/nothing-here", None, "cannot read the file: No such file"),
    Unusable("directory", "{tmp}", None, "cannot read the file: Is a directory"),
    Unusable("empty-file", "{tmp}/secret", b"\n", "the file is empty"),
    Unusable("not-utf8", "{tmp}/secret", b"\xff\xfe", "the file is not UTF-8 text"),
    Unusable(
        "too-large",
        "{tmp}/secret",
        b"x" * (SECRET_FILE_MAX_BYTES + 1),
        f"larger than {SECRET_FILE_MAX_BYTES} bytes",
    ),
    Unusable("empty-variable", "", None, "is set but empty"),
]


def _unusable_path(case: Unusable, tmp_path: Path) -> str:
    path = case.path.format(tmp=tmp_path)
    if case.content is not None:
        write(Path(path), case.content)
    return path


@pytest.mark.parametrize("case", UNUSABLE, ids=[c.name for c in UNUSABLE])
def test_an_unusable_file_is_one_clear_error(
    clean_env: pytest.MonkeyPatch, tmp_path: Path, case: Unusable
) -> None:
    path = _unusable_path(case, tmp_path)
    clean_env.setenv("GPU_CREDITS_DATABASE_PASSWORD_FILE", path)
    with pytest.raises(SecretFileError) as raised:
        Settings()
    message = str(raised.value)
    assert message.startswith(f"GPU_CREDITS_DATABASE_PASSWORD_FILE{'=' if path else ' '}")
    assert case.reason in message
    assert "\n" not in message


# -- the real command ------------------------------------------------------------------------


def run_cli(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.upper().startswith("GPU_CREDITS_")}
    return subprocess.run(
        [console_script(), *args],
        env={**base, "GPU_CREDITS_DATA_DIR": str(cwd / "data"), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
    )


def assert_refused(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    assert result.returncode == 2, result
    assert result.stdout == "", result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu-credits: "), lines
    for text in expected:
        assert text in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("case", UNUSABLE, ids=[c.name for c in UNUSABLE])
def test_serve_with_an_unusable_file_exits_2_with_one_line(tmp_path: Path, case: Unusable) -> None:
    path = _unusable_path(case, tmp_path)
    env = {"GPU_CREDITS_STORAGE": "postgres", "GPU_CREDITS_DATABASE_URL_FILE": path}
    assert_refused(run_cli(["serve"], env, tmp_path), "GPU_CREDITS_DATABASE_URL_FILE", case.reason)
    assert not (tmp_path / "data").exists(), "nothing may start"


@pytest.mark.parametrize(
    "command", [["migrate", "--status"], ["migrate"], ["keys", "list"]], ids=" ".join
)
def test_every_command_refuses_an_unusable_file(tmp_path: Path, command: list[str]) -> None:
    env = {"GPU_CREDITS_DATABASE_PASSWORD_FILE": str(tmp_path / "missing")}
    assert_refused(run_cli(command, env, tmp_path), "No such file")


def test_an_invalid_setting_is_one_line_without_the_secret(tmp_path: Path) -> None:
    secret = f"pw-{uuid.uuid4().hex}"
    env = {
        "GPU_CREDITS_STORAGE": "postgres",
        "GPU_CREDITS_DATABASE_URL": f"postgresql://u:{secret}@127.0.0.1:1/db",
        "GPU_CREDITS_PG_MIN_CONNECTIONS": "9",
        "GPU_CREDITS_PG_MAX_CONNECTIONS": "3",
    }
    line = assert_refused(run_cli(["serve"], env, tmp_path), "pg_min_connections")
    assert secret not in line
    env = {"GPU_CREDITS_PORT": "eighty"}
    assert_refused(run_cli(["serve"], env, tmp_path), "GPU_CREDITS_PORT: ")


# -- a real server on PostgreSQL ---------------------------------------------------------------


@dataclass(frozen=True)
class PasswordRole:
    """A role that must give its password over TCP, and an empty database it owns."""

    url: str  # without the password
    password: str


HBA_RELOAD_TIMEOUT_S = 10.0


async def _make_role(server: PostgresServer, role: str, password: str, database: str) -> None:
    conn = await asyncpg.connect(server.url)
    try:
        literal = await conn.fetchval("SELECT quote_literal($1)", password)
        await conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD {literal}")
        await conn.execute(f"ALTER DATABASE {database} OWNER TO {role}")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()


async def _password_required(url: str) -> bool:
    try:
        conn = await asyncpg.connect(url, password="wrong")
    except asyncpg.InvalidPasswordError:
        return True
    await conn.close()
    return False


@pytest.fixture
def password_role(postgres_url: PostgresServer) -> PasswordRole:
    """The session's server trusts every connection; this role alone is made to give its
    password (scram-sha-256), by a pg_hba.conf line ahead of the others."""
    suffix = uuid.uuid4().hex[:12]
    role, database = f"pw_{suffix}", f"pwdb_{suffix}"
    postgres_url.create_database(database)
    hba = postgres_url.data_dir / "pg_hba.conf"
    rule = f"host {database} {role} {postgres_url.host}/32 scram-sha-256\n"
    hba.write_text(rule + hba.read_text())
    asyncio.run(_make_role(postgres_url, role, PASSWORD, database))
    url = f"postgresql://{role}@{postgres_url.host}:{postgres_url.port}/{database}"
    deadline = time.monotonic() + HBA_RELOAD_TIMEOUT_S
    while not asyncio.run(_password_required(url)):  # the reload is asynchronous
        assert time.monotonic() < deadline, "pg_hba.conf was not reloaded"
        time.sleep(0.05)
    return PasswordRole(url, PASSWORD)


def test_a_server_reads_the_database_url_from_a_file(
    postgres_url: PostgresServer, tmp_path: Path
) -> None:
    url = postgres_url.create_database(f"url_{uuid.uuid4().hex[:12]}")
    url_file = write(tmp_path / "database-url", url + "\n")
    server = ServerProcess(
        tmp_path / "data",
        storage="postgres",
        env={"GPU_CREDITS_DATABASE_URL_FILE": str(url_file)},
    )
    server.start()
    try:
        assert httpx.get(f"{server.base_url}/readyz").status_code == 200
        r = httpx.post(
            f"{server.base_url}/v1/accounts/a/grants",
            json={"amount": 5, "timestamp": 0, "expiry": 9},
        )
        assert r.status_code == 201, r.text
    finally:
        server.stop()


def test_a_server_connects_with_the_password_file_as_compose_sets_it(
    password_role: PasswordRole, tmp_path: Path
) -> None:
    secret = write(tmp_path / "postgres_password", password_role.password + "\n")
    env = {
        "GPU_CREDITS_DATABASE_URL": password_role.url,
        "GPU_CREDITS_DATABASE_PASSWORD_FILE": str(secret),
    }
    server = ServerProcess(tmp_path / "data", storage="postgres", env=env)
    server.start()
    try:
        r = httpx.post(
            f"{server.base_url}/v1/accounts/a/grants",
            json={"amount": 5, "timestamp": 0, "expiry": 9},
        )
        assert r.status_code == 201, r.text
        version = httpx.get(f"{server.base_url}/version").json()
        assert version["storage"] == "postgres"
        assert version["schema_version"] is not None
    finally:
        server.stop()
    assert password_role.password not in server.log()


def test_a_wrong_password_file_does_not_open_the_database(
    password_role: PasswordRole, tmp_path: Path
) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    env = {
        "GPU_CREDITS_STORAGE": "postgres",
        "GPU_CREDITS_DATABASE_URL": password_role.url,
        "GPU_CREDITS_DATABASE_PASSWORD_FILE": str(write(tmp_path / "pw", wrong)),
    }
    result = run_cli(["migrate", "--status"], env, tmp_path)
    assert result.returncode == 2, result
    assert "password authentication failed" in result.stderr, result.stderr
    assert wrong not in result.stdout + result.stderr
