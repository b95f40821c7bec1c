"""The ``gpu-credits`` command as a user runs it: the installed console script in a
subprocess, against real SQLite files (and PostgreSQL for the offline commands) and a real
``gpu-credits serve`` process for the client commands (issue 13, item 5).

- ``--version`` is the version ``GET /version`` answers; every command and subcommand has a
  full ``--help`` (every option described).
- Configuration errors are one line on stderr and exit 2, never a traceback, for every
  command; a ``GPU_CREDITS_*`` variable nothing reads is one warning line.
- The default data directory does not depend on the working directory; ``--data-dir`` on
  every command that uses it; data left in ``./data`` by earlier releases is not silently
  left behind.
- ``keys list``: a header, creation time and last use (recorded by the service).
- ``grant``, ``consume``, ``balance``, ``ledger`` over HTTP; problem documents, exit codes.
- ``export`` as JSON lines and CSV; ``check`` replays and reconciles, and finds tampering.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.api.auth import KeyUsage
from app.cli import _parser
from app.cli_offline import CSV_COLUMNS
from app.domain import LedgerError
from app.keys import last_used_path, load_last_used
from app.main import embedded_ledger
from app.service.errors import GrantAlreadyVoided, GrantNotFound
from app.service.limits import Limits
from app.settings import Settings, unknown_variable_warnings, variable_names
from app.storage.sqlite import SqliteStore
from tests.support.pg_pool import DatabasePool
from tests.support.server_process import ROOT, ServerProcess, console_script, free_port

CLI_TIMEOUT_S = 120.0
KEY_RE = re.compile(r"^gck_[0-9a-f]{12}_\S+$")
ALL_SCOPES = ("credits:grant", "credits:consume", "credits:read", "credits:admin")


# -- running the command -------------------------------------------------------------------


@dataclass
class Cli:
    """The console script with a clean environment: no GPU_CREDITS_* variable of the
    caller's, and a home directory of the test's own (the default data directory is under
    it)."""

    home: Path
    cwd: Path

    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.upper().startswith("GPU_CREDITS_") and k != "XDG_DATA_HOME"
        }
        env["HOME"] = str(self.home)
        env["COLUMNS"] = "100"  # help text wraps the same way everywhere
        return {**env, **(extra or {})}

    def __call__(
        self, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [console_script(), *args],
            env=self.env(env),
            cwd=cwd or self.cwd,
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    return Cli(home, cwd)


def assert_clean(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stdout + result.stderr, result


def one_line_error(result: subprocess.CompletedProcess[str], code: int, *expected: str) -> str:
    """The command failed with ``code`` and said why in exactly one line on stderr."""
    assert_clean(result)
    assert result.returncode == code, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpu-credits: "), lines
    for text in expected:
        assert text in lines[0], (text, lines[0])
    return lines[0]


def succeeded(result: subprocess.CompletedProcess[str]) -> str:
    assert_clean(result)
    assert result.returncode == 0, result
    return result.stdout


def create_key(cli: Cli, data_dir: Path, name: str, *scopes: str, prefix: str = "") -> str:
    args = ["keys", "create", "--name", name, "--data-dir", str(data_dir)]
    for scope in scopes:
        args += ["--scope", scope]
    if prefix:
        args += ["--account-prefix", prefix]
    key = succeeded(cli(*args)).strip()
    assert KEY_RE.match(key), key
    return key


# -- version and help ----------------------------------------------------------------------


def test_version_is_the_one_the_service_answers(tmp_path: Path, cli: Cli) -> None:
    printed = succeeded(cli("--version")).strip()
    assert (
        printed
        == succeeded(
            subprocess.run(
                [str(Path(console_script()).parent / "python"), "-m", "app", "--version"],
                env=cli.env(),
                capture_output=True,
                text=True,
                timeout=CLI_TIMEOUT_S,
                check=False,
            )
        ).strip()
    )
    server = ServerProcess(tmp_path / "data", storage="memory")
    server.start()
    try:
        answered = httpx.get(f"{server.base_url}/version", timeout=10).json()["version"]
    finally:
        server.stop()
    assert printed == f"gpu-credits {answered}"


def _subcommands(parser: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, parser
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            for name, sub in action.choices.items():
                yield from _subcommands(sub, (*path, name))


COMMANDS = [path for path, _ in _subcommands(_parser())]
DATA_DIR_COMMANDS = {
    ("serve",),
    ("migrate",),
    ("check",),
    ("export",),
    ("keys", "create"),
    ("keys", "list"),
    ("keys", "revoke"),
}


def test_every_option_of_every_command_is_described() -> None:
    assert len(COMMANDS) == 13, COMMANDS  # the top, its 9 commands, the 3 of keys
    for path, parser in _subcommands(_parser()):
        assert parser.description, path
        for action in parser._actions:
            if action.help == "==SUPPRESS==":
                continue
            assert action.help, (path, action.dest)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "gpu-credits")
def test_help(cli: Cli, path: tuple[str, ...]) -> None:
    out = succeeded(cli(*path, "--help"))
    assert out.startswith(f"usage: gpu-credits {' '.join(path)}".rstrip()), out
    parser = dict(_subcommands(_parser()))[path]
    for action in parser._actions:
        for flag in action.option_strings:
            assert flag in out, (path, flag)
    if path in DATA_DIR_COMMANDS:
        assert "--data-dir" in out, path
    if path[:1] in (("grant",), ("consume",), ("balance",), ("ledger",)):
        for flag in ("--url", "--key", "--key-file"):
            assert flag in out, (path, flag)
    if path not in ((), ("keys",)):  # every command (not the groups) says its exit codes
        assert "exit codes:" in out, path


def test_serve_help_says_how_a_stop_by_signal_ends(cli: Cli, tmp_path: Path) -> None:
    """``serve --help`` lists its exit codes: a stop by SIGTERM (docker stop, systemd) ends,
    after the graceful shutdown, by that signal (uvicorn re-raises it), not with 0; the help
    said "0 stopped" (found by the README audit)."""
    out = succeeded(cli("serve", "--help"))
    assert "0 stopped" not in out, out
    assert "SIGTERM" in out, out
    assert "143" in out, out
    server = ServerProcess(tmp_path / "data", storage="memory")
    server.start()
    assert server.stop() == -signal.SIGTERM  # 128 + 15 = 143 in a shell


# -- configuration errors and warnings -----------------------------------------------------

DATA_COMMANDS = [
    ["serve"],
    ["migrate"],
    ["migrate", "--status"],
    ["keys", "list"],
    ["keys", "create", "--name", "n", "--scope", "credits:read"],
    ["keys", "revoke", "000000000000"],
    ["check"],
    ["export", "acct"],
]


@pytest.mark.parametrize("command", DATA_COMMANDS, ids=" ".join)
def test_an_invalid_setting_is_one_line_and_exit_2(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    data_dir = tmp_path / "data"
    env = {"GPU_CREDITS_PORT": "abc", "GPU_CREDITS_DATA_DIR": str(data_dir)}
    one_line_error(
        cli(*command, env=env), 2, "invalid configuration", "GPU_CREDITS_PORT", "integer"
    )
    assert not data_dir.exists(), "nothing may start"
    one_line_error(cli(*command, env={"GPU_CREDITS_STORAGE": "floppy"}), 2, "GPU_CREDITS_STORAGE")


@pytest.mark.parametrize("command", [["serve"], ["keys", "list"]], ids=" ".join)
def test_a_broken_key_file_is_one_line_and_exit_2(
    cli: Cli, tmp_path: Path, command: list[str]
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "api-keys.json").write_text("{not json")
    one_line_error(cli(*command, "--data-dir", str(data_dir)), 2, "api-keys.json", "unreadable")


def test_serve_with_a_data_directory_it_cannot_use_is_one_line(cli: Cli, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    one_line_error(
        cli("serve", "--data-dir", str(blocker / "data")), 2, "data directory", "cannot be made"
    )


def test_client_configuration_errors_are_one_line(cli: Cli, tmp_path: Path) -> None:
    one_line_error(cli("balance", "a", env={"GPU_CREDITS_URL": "ftp://x"}), 2, "http(s)://")
    one_line_error(cli("balance", "a", "--key", "k", "--key-file", "f"), 2, "not both")
    one_line_error(cli("balance", "a", "--key-file", str(tmp_path / "none")), 2, "key file")
    one_line_error(
        cli(
            "grant",
            "a",
            "--amount",
            "1",
            "--timestamp",
            "0",
            "--expiry",
            "5",
            "--metadata",
            "novalue",
        ),
        2,
        "KEY=VALUE",
    )


def test_usage_errors_exit_2_without_a_traceback(cli: Cli) -> None:
    for args in (["grant", "a", "--amount", "1.5"], ["nonsense"], ["keys"], []):
        result = cli(*args)
        assert_clean(result)
        assert result.returncode == 2, (args, result)
        assert "usage: gpu-credits" in result.stderr


def test_an_unknown_variable_is_one_warning_line(cli: Cli, tmp_path: Path) -> None:
    env = {
        "GPU_CREDITS_PROT": "9000",
        "GPU_CREDITS_DATABASE_PASWORD_FILE": "/run/secrets/x",
        "GPU_CREDITS_PORT_FILE": "/run/secrets/port",
        # known ones: no warning
        "GPU_CREDITS_DATABASE_PASSWORD_FILE": "",
        "GPU_CREDITS_URL": "http://127.0.0.1:1",
        "GPU_CREDITS_KEY": "gck_x",
        "GPU_CREDITS_LOG_LEVEL": "debug",
    }
    del env["GPU_CREDITS_DATABASE_PASSWORD_FILE"]  # an empty _FILE is an error of its own
    result = cli("keys", "list", "--data-dir", str(tmp_path / "data"), env=env)
    assert result.returncode == 0, result
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 3, result.stderr
    by_name = {line.split()[2]: line for line in warnings}
    assert "did you mean GPU_CREDITS_PORT?" in by_name["GPU_CREDITS_PROT"]
    assert (
        "did you mean GPU_CREDITS_DATABASE_PASSWORD_FILE?"
        in by_name["GPU_CREDITS_DATABASE_PASWORD_FILE"]
    )
    assert "only secret settings are read from files" in by_name["GPU_CREDITS_PORT_FILE"]
    for line in warnings:
        assert line.startswith("gpu-credits: warning: GPU_CREDITS_")


def test_the_known_variables_follow_the_settings() -> None:
    names = variable_names()
    for field_name, field in Settings.model_fields.items():
        variable = f"GPU_CREDITS_{field_name.upper()}"
        assert variable in names
        secret = "SecretStr" in str(field.annotation)
        assert (variable + "_FILE" in names) == secret, variable
    assert "GPU_CREDITS_DATABASE_URL_FILE" in names
    assert "GPU_CREDITS_DATABASE_PASSWORD_FILE" in names
    assert unknown_variable_warnings({n: "x" for n in names}) == []
    assert unknown_variable_warnings({"gpu_credits_port": "1", "OTHER": "x"}) == []


# -- the data directory --------------------------------------------------------------------


def test_the_default_data_directory_does_not_depend_on_the_working_directory(
    cli: Cli, tmp_path: Path
) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    created = cli("keys", "create", "--name", "n", "--scope", "credits:read", cwd=one)
    succeeded(created)
    default = cli.home / ".local" / "share" / "gpu-credits"
    assert (default / "api-keys.json").is_file()
    assert str(default / "api-keys.json") in created.stderr
    listed = succeeded(cli("keys", "list", cwd=two))
    assert " n " in listed
    xdg = tmp_path / "xdg"
    succeeded(
        cli(
            "keys",
            "create",
            "--name",
            "x",
            "--scope",
            "credits:read",
            env={"XDG_DATA_HOME": str(xdg)},
        )
    )
    assert (xdg / "gpu-credits" / "api-keys.json").is_file()


def test_a_relative_data_directory_is_the_working_directorys_and_shown_whole(
    cli: Cli, tmp_path: Path
) -> None:
    created = cli("keys", "create", "--name", "n", "--scope", "credits:read", "--data-dir", "d")
    succeeded(created)
    assert (cli.cwd / "d" / "api-keys.json").is_file()
    assert str(cli.cwd / "d" / "api-keys.json") in created.stderr


def test_data_of_an_earlier_release_in_dot_data_is_not_left_behind(cli: Cli) -> None:
    legacy = cli.cwd / "data"
    legacy.mkdir()
    (legacy / "gpu-credits.sqlite3").write_bytes(b"")
    for command in (["serve"], ["keys", "list"], ["migrate", "--status"]):
        line = one_line_error(cli(*command), 2, "earlier releases", "--data-dir")
        assert str(legacy) in line
    succeeded(cli("keys", "list", "--data-dir", "data"))
    assert not (cli.home / ".local").exists()


# -- keys list -----------------------------------------------------------------------------


def test_keys_list_has_a_header_creation_and_last_use(cli: Cli, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    before = datetime.now(UTC).replace(microsecond=0)
    key = create_key(cli, data_dir, "billing", "credits:grant", "credits:read", prefix="team-a:")
    create_key(cli, data_dir, "idle", "credits:read")
    lines = succeeded(cli("keys", "list", "--data-dir", str(data_dir))).splitlines()
    assert lines[0].split() == [
        "KEY",
        "ID",
        "NAME",
        "SCOPES",
        "ACCOUNTS",
        "CREATED",
        "LAST",
        "USED",
    ]
    assert len(lines) == 3
    rows = {line.split()[1]: line.split() for line in lines[1:]}
    assert rows["billing"][2] == "credits:grant,credits:read"
    assert rows["billing"][3] == "team-a:*"
    created = datetime.strptime(rows["billing"][4], "%Y-%m-%dT%H:%M:%S%z")
    assert before <= created <= datetime.now(UTC)
    assert rows["billing"][5] == rows["idle"][5] == "never"
    # Used once through a real server; stopping it saves what it noted.
    server = ServerProcess(data_dir)
    server.start()
    try:
        answer = httpx.get(
            f"{server.base_url}/v1/accounts", headers={"Authorization": f"Bearer {key}"}
        )
        assert answer.status_code == 200, answer.text
    finally:
        assert server.stop() in (0, -15)  # uvicorn re-raises SIGTERM once it has shut down
    listed = [
        json.loads(line)
        for line in succeeded(
            cli("keys", "list", "--json", "--data-dir", str(data_dir))
        ).splitlines()
    ]
    by_name = {row["name"]: row for row in listed}
    used = datetime.strptime(by_name["billing"]["last_used_at"], "%Y-%m-%dT%H:%M:%S%z")
    assert created <= used <= datetime.now(UTC)
    assert by_name["idle"]["last_used_at"] is None
    assert by_name["billing"]["scopes"] == ["credits:grant", "credits:read"]
    assert "secret_sha256" not in by_name["billing"]
    # The secret: all after "gck_<key id>_" (URL-safe base64, which may itself hold "_").
    assert key.split("_", 2)[2] not in json.dumps(listed)
    # Revoking forgets its use too.
    key_id = by_name["billing"]["key_id"]
    succeeded(cli("keys", "revoke", key_id, "--data-dir", str(data_dir)))
    assert key_id not in load_last_used(data_dir / "api-keys.json")


def test_key_use_is_noted_at_most_once_a_minute_and_saved_apart(tmp_path: Path) -> None:
    now = [1_000.0]
    keys_path = tmp_path / "api-keys.json"
    usage = KeyUsage(keys_path, resolution_s=60.0, wall_clock_s=lambda: now[0])
    usage.note("a")
    now[0] += 59
    usage.note("a")  # within the minute: nothing new to save
    usage.note("b")
    assert usage.take_unsaved() == {"a": 1_000.0, "b": 1_059.0}
    assert usage.take_unsaved() == {}
    now[0] += 1
    usage.note("a")
    assert usage.take_unsaved() == {"a": 1_060.0}
    usage.save({"a": 1_060.0, "b": 1_059.0, "gone": 5.0}, keep={"a", "b"})
    usage.save({"a": 900.0}, keep={"a", "b"})  # an older use (another process) loses
    assert load_last_used(keys_path) == {"a": 1_060.0, "b": 1_059.0}
    assert not keys_path.exists(), "the key file itself is never written"
    assert last_used_path(keys_path).name == "api-keys.last-used.json"


# -- a server for the client commands ------------------------------------------------------


@dataclass
class Served:
    server: ServerProcess
    data_dir: Path
    admin: str
    reader: str
    cli: Cli

    def env(self, key: str | None = None) -> dict[str, str]:
        return {"GPU_CREDITS_URL": self.server.base_url, "GPU_CREDITS_KEY": key or self.admin}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Keys made by ``keys create --data-dir`` run elsewhere, then ``serve --data-dir`` on the
    same directory (the environment names another one: the flag wins)."""
    root = tmp_path_factory.mktemp("served")
    (root / "home").mkdir()
    (root / "elsewhere").mkdir()
    cli = Cli(root / "home", root / "elsewhere")
    data_dir = root / "data"
    admin = create_key(cli, data_dir, "admin", *ALL_SCOPES)
    reader = create_key(cli, data_dir, "reader", "credits:read")
    server = ServerProcess(root / "decoy", args=("--data-dir", str(data_dir)))
    server.start()
    try:
        yield Served(server, data_dir, admin, reader, cli)
    finally:
        server.stop()
    assert (data_dir / "gpu-credits.sqlite3").is_file()
    assert not (root / "decoy" / "gpu-credits.sqlite3").exists()


def grant_args(account: str, amount: int, timestamp: int, expiry: int) -> list[str]:
    return [
        "grant",
        account,
        "--amount",
        str(amount),
        "--timestamp",
        str(timestamp),
        "--expiry",
        str(expiry),
    ]


def test_client_commands_speak_to_the_server(served: Served) -> None:
    cli, env = served.cli, served.env()
    granted = json.loads(succeeded(cli(*grant_args("c:spec", 100, 0, 10), env=env)))
    assert (granted["grant_id"], granted["balance"]) == (1, 100)
    second = cli(
        *grant_args("c:spec", 50, 2, 5),
        "--resource",
        "h100",
        "--resource",
        "a100",
        "--name",
        "pilot",
        "--metadata",
        "team=a",
        "--metadata",
        "po=7",
        env=env,
    )
    assert json.loads(succeeded(second))["resources"] == ["a100", "h100"]
    consumed = cli("consume", "c:spec", "--amount", "70", "--timestamp", "3", env=env)
    assert json.loads(succeeded(consumed))["consumed"] == 70
    balance = json.loads(succeeded(cli("balance", "c:spec", "--timestamp", "4", env=env)))
    assert (balance["balance"], balance["available"], balance["debt"]) == (80, 80, 0)
    by_class = cli("balance", "c:spec", "--resource", "h100", env=env)
    assert json.loads(succeeded(by_class))["resource"] == "h100"
    # Flags instead of the environment.
    flags = ["--url", served.server.base_url, "--key", served.reader]
    page = json.loads(succeeded(cli("ledger", "c:spec", "--limit", "2", *flags)))
    assert [e["sequence"] for e in page["entries"]] == [1, 2]
    assert page["next_after"] == 2
    whole = json.loads(succeeded(cli("ledger", "c:spec", "--all", *flags)))
    assert [e["kind"] for e in whole["entries"]] == ["grant", "grant", "consumption"]
    assert whole["next_after"] is None
    assert whole["entries"][1]["metadata"] == {"team": "a", "po": "7"}


def test_a_key_from_a_file(served: Served, tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(served.reader + "\n")
    env = {"GPU_CREDITS_URL": served.server.base_url, "GPU_CREDITS_KEY_FILE": str(key_file)}
    succeeded(served.cli(*grant_args("c:file", 5, 0, 10), "--key", served.admin, env=env))
    assert json.loads(succeeded(served.cli("balance", "c:file", env=env)))["balance"] == 5


def test_a_problem_document_is_printed_with_one_line_and_exit_1(served: Served) -> None:
    cli, env = served.cli, served.env()
    succeeded(cli(*grant_args("c:late", 10, 20, 30), env=env))
    late = cli("consume", "c:late", "--amount", "1", "--timestamp", "5", env=env)
    line = one_line_error(late, 1, "409", "timestamp-regression", "20")
    assert "earlier than" in line
    problem = json.loads(late.stdout)
    assert problem["status"] == 409
    assert problem["account_timestamp"] == 20
    invalid = cli(*grant_args("c:late", 0, 30, 40), env=env)
    line = one_line_error(invalid, 1, "422", "amount")
    assert "body.amount: Input should be greater than or equal to 1]" in line, line
    assert json.loads(invalid.stdout)["status"] == 422
    missing = cli("balance", "c:never", env=env)
    one_line_error(missing, 1, "404", "account-not-found")
    forbidden = cli(*grant_args("c:late", 1, 30, 40), env=served.env(served.reader))
    one_line_error(forbidden, 1, "403", "credits:grant")
    unknown = cli("balance", "c:late", env=served.env("gck_000000000000_nope"))
    one_line_error(unknown, 1, "401")


def test_a_retried_grant_with_its_key_is_applied_once(served: Served) -> None:
    cli, env = served.cli, served.env()
    args = [*grant_args("c:idem", 10, 0, 100), "--idempotency-key", "billing-run-7"]
    first = json.loads(succeeded(cli(*args, env=env)))
    again = json.loads(succeeded(cli(*args, env=env)))
    assert first == again
    assert json.loads(succeeded(cli("balance", "c:idem", env=env)))["balance"] == 10


def test_no_answer_is_exit_3_and_names_the_key_to_retry_with(cli: Cli) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = cli(*grant_args("a", 1, 0, 5), "--url", url)
    line = one_line_error(result, 3, "no answer", "may or may not have been applied")
    key = re.search(r"--idempotency-key (\S+)", line)
    assert key is not None
    assert key.group(1).startswith("cli-")
    one_line_error(cli("balance", "a", "--url", url), 3, "no answer")


# -- export ----------------------------------------------------------------------------------


def test_export_json_lines_and_csv_while_the_service_runs(served: Served, tmp_path: Path) -> None:
    cli, env = served.cli, served.env()
    account = "c:export"
    succeeded(cli(*grant_args(account, 100, 0, 10), "--name", 'a "quoted", name', env=env))
    succeeded(cli(*grant_args(account, 50, 2, 5), env=env))
    succeeded(cli("consume", account, "--amount", "70", "--timestamp", "3", env=env))
    succeeded(cli("consume", account, "--amount", "90", "--timestamp", "8", env=env))
    succeeded(cli(*grant_args(account, 5, 9, 20), "--resource", "h100", env=env))
    api = json.loads(succeeded(cli("ledger", account, "--all", env=env)))["entries"]
    data = ["--data-dir", str(served.data_dir)]

    lines = succeeded(cli("export", account, *data)).splitlines()
    exported = [json.loads(line) for line in lines]
    assert [e.pop("account_id") for e in exported] == [account] * len(api)
    assert exported == api
    kinds = ["grant", "grant", "consumption", "consumption", "grant"]
    assert [e["kind"] for e in exported] == kinds

    out = tmp_path / "ledger.csv"
    result = cli("export", account, "--format", "csv", "--output", str(out), *data)
    succeeded(result)
    assert "exported 5 entries" in result.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    assert tuple(rows[0].keys()) == CSV_COLUMNS
    assert [int(r["sequence"]) for r in rows] == [e["sequence"] for e in api]
    assert [r["kind"] for r in rows] == kinds
    assert rows[0]["name"] == 'a "quoted", name'
    assert rows[0]["consumed"] == ""
    allocation = json.loads(rows[2]["allocation"])
    assert [(a["grant_id"], a["amount"]) for a in allocation] == [(2, 50), (1, 20)]
    assert (rows[3]["balance"], rows[3]["debt"], rows[3]["debt_added"]) == ("-10", "10", "10")
    assert json.loads(rows[4]["resources"]) == ["h100"]
    assert {r["final"] for r in rows} <= {"true", "false"}
    assert [f.name for f in tmp_path.iterdir()] == ["ledger.csv"], "no temporary file left"

    one_line_error(cli("export", "c:nobody", *data), 1, "no account 'c:nobody'")


def test_export_and_check_need_a_database(cli: Cli, tmp_path: Path) -> None:
    empty = ["--data-dir", str(tmp_path / "nothing")]
    one_line_error(cli("export", "a", *empty), 2, "no SQLite database")
    one_line_error(cli("check", *empty), 2, "no SQLite database")
    assert not (tmp_path / "nothing").exists(), "an offline read creates nothing"
    one_line_error(cli("check", env={"GPU_CREDITS_STORAGE": "memory"}), 2, "keeps nothing")


# -- check -----------------------------------------------------------------------------------


def test_check_passes_on_the_live_database(served: Served) -> None:
    succeeded(served.cli(*grant_args("c:check", 10, 0, 5), env=served.env()))
    succeeded(
        served.cli("consume", "c:check", "--amount", "3", "--timestamp", "7", env=served.env())
    )
    out = succeeded(served.cli("check", "--data-dir", str(served.data_dir)))
    assert "every account replays and reconciles exactly" in out
    assert re.search(r"accounts: [1-9]\d*, ledger entries: [1-9]\d*", out), out


def test_check_sees_one_moment_while_the_service_writes(served: Served) -> None:
    """A check on a database being written reads one snapshot: no write half seen."""
    stop = threading.Event()
    written = [0]
    failures: list[str] = []

    def write() -> None:
        headers = {"Authorization": f"Bearer {served.admin}"}
        with httpx.Client(base_url=served.server.base_url, headers=headers) as http:
            timestamp = 0
            while not stop.is_set():
                account = f"c:busy{timestamp % 3}"
                body = {"amount": 5, "timestamp": timestamp, "expiry": timestamp + 3}
                granted = http.post(f"/v1/accounts/{account}/grants", json=body)
                body = {"amount": 7, "timestamp": timestamp + 1}
                consumed = http.post(f"/v1/accounts/{account}/consumptions", json=body)
                if granted.status_code != 201 or consumed.status_code != 200:
                    failures.append(f"{granted.text} {consumed.text}")
                    return
                timestamp += 2
                written[0] += 2

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(3):
            out = succeeded(served.cli("check", "--data-dir", str(served.data_dir)))
            assert "every account replays and reconciles exactly" in out
    finally:
        stop.set()
        writer.join(timeout=60)
    assert not failures, failures
    assert written[0] > 0


async def _write_history(path: Path, seed: int, writes: int, window: int) -> None:
    """A random history through the service itself (no HTTP): late writes within the
    window, GPU classes, voids, expirations and debt, on 3 accounts, enough writes for
    checkpoints."""
    rnd = random.Random(seed)
    ledger = embedded_ledger(SqliteStore(path), Limits(lateness_window=window))
    await ledger.start()
    clocks: dict[str, int] = {}
    try:
        for _ in range(writes):
            account = f"h{rnd.randrange(3)}"
            clock = clocks.get(account, 0)
            timestamp = max(0, clock + rnd.randint(-window, 6))
            draw = rnd.random()
            try:
                if draw < 0.4:
                    classes = rnd.choice([None, None, ["h100"], ["h100", "a100"]])
                    expiry = timestamp + rnd.randint(1, 40)
                    await ledger.grant(
                        account, rnd.randint(1, 50), timestamp, expiry, resources=classes
                    )
                elif draw < 0.92:
                    resource = rnd.choice([None, None, "h100", "a100"])
                    await ledger.consume(account, rnd.randint(1, 40), timestamp, resource=resource)
                else:
                    await ledger.void(account, rnd.randint(1, 8), timestamp)
            except (LedgerError, GrantNotFound, GrantAlreadyVoided):
                continue  # refused (too late, unknown grant...): changes nothing
            clocks[account] = max(clock, timestamp)
    finally:
        await ledger.close()


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory holding a rich, correct history (built once per module)."""
    data_dir = tmp_path_factory.mktemp("history")
    asyncio.run(_write_history(data_dir / "gpu-credits.sqlite3", 7, 2_500, 15))
    return data_dir


def _copy(history: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    target.mkdir()
    source = sqlite3.connect(history / "gpu-credits.sqlite3")
    with sqlite3.connect(target / "gpu-credits.sqlite3") as copy:
        source.backup(copy)
    source.close()
    return target


def _tamper(data_dir: Path, *statements: str) -> None:
    with sqlite3.connect(data_dir / "gpu-credits.sqlite3") as db:
        for statement in statements:
            assert db.execute(statement).rowcount >= 1, statement


def test_check_replays_a_rich_history_exactly(cli: Cli, history: Path) -> None:
    with sqlite3.connect(history / "gpu-credits.sqlite3") as db:
        assert db.execute("SELECT count(*) FROM entries WHERE revision > 0").fetchone()[0] > 0
        assert db.execute("SELECT count(*) FROM entries WHERE kind = 'void'").fetchone()[0] > 0
        assert db.execute("SELECT count(*) FROM entries WHERE kind = 'expiration'").fetchone()[0]
        assert db.execute("SELECT count(*) FROM checkpoints").fetchone()[0] >= 3
        assert db.execute("SELECT count(*) FROM accounts WHERE watermark < clock").fetchone()[0]
    env = {"GPU_CREDITS_LATENESS_WINDOW": "15"}
    out = succeeded(cli("check", "--data-dir", str(history), env=env))
    assert "accounts: 3," in out
    assert "every account replays and reconciles exactly" in out
    only = succeeded(cli("check", "--prefix", "h1", "--data-dir", str(history), env=env))
    assert "accounts: 1," in only


# Entries name their account by its number (the accounts row holds it).
H0 = "account = (SELECT number FROM accounts WHERE account_id = 'h0')"
H1 = "account = (SELECT number FROM accounts WHERE account_id = 'h1')"
TAMPERING = {
    "an entry's balance": (
        [f"UPDATE entries SET available = available + 1 WHERE {H0} AND sequence = 5"],
        ["account 'h0'", "entry 5", "sum to"],
    ),
    "a consumption's allocation": (
        [
            "UPDATE entries SET details = json_set(details, '$.consumed', "
            "json_extract(details, '$.consumed') + 1, '$.amount', "
            f"json_extract(details, '$.amount') + 1) WHERE {H1} AND sequence = "
            f"(SELECT min(sequence) FROM entries WHERE {H1} AND kind = 'consumption' "
            "AND json_extract(details, '$.consumed') > 0)"
        ],
        ["account 'h1'", "consumption", "allocation"],
    ),
    "a live grant's remainder": (
        [
            "UPDATE live_grants SET remaining = remaining + 3 WHERE (account, grant_id) = "
            "(SELECT account, grant_id FROM live_grants ORDER BY account, grant_id LIMIT 1)"
        ],
        ["live grant", "does not reconcile", "remaining"],
    ),
    "an account's debt": (
        ["UPDATE accounts SET debt = debt + 7, debts = NULL WHERE account_id = 'h0'"],
        ["account 'h0'", "debt"],
    ),
    "a deleted expiration": (
        [
            f"DELETE FROM entries WHERE {H1} AND sequence = (SELECT min(sequence) "
            f"FROM entries WHERE {H1} AND kind = 'expiration')"
        ],
        ["account 'h1'", "records no expiration"],
    ),
    "a checkpoint": (
        [
            "UPDATE checkpoints SET state = json_set(state, '$.debt', "
            "json_extract(state, '$.debt') + 1) WHERE (account_id, timestamp, rank) = "
            "(SELECT account_id, timestamp, rank FROM checkpoints ORDER BY account_id, timestamp "
            "LIMIT 1)"
        ],
        ["the checkpoint after entry", "debt is"],
    ),
    "an undecodable row": (
        [f"UPDATE entries SET details = '{{' WHERE {H0} AND sequence = 3"],
        ["account 'h0'", "cannot be read"],
    ),
    "an orphan live grant": (
        [
            "INSERT INTO live_grants SELECT 987653, grant_id, expiry, remaining, resources, "
            "granted_at FROM live_grants LIMIT 1"
        ],
        ["database:", "live_grants rows", "number 987653", "no account row"],
    ),
    "an orphan entry": (
        [
            "INSERT INTO entries SELECT 987654, sequence, kind, timestamp, available, debt, "
            "grant_id, details, rank, revision FROM entries LIMIT 1"
        ],
        ["database:", "entries rows", "number 987654", "no account row"],
    ),
    # An account row without its number (written by hand, as before migration 7): it is
    # named, and it hides no orphan (``NOT IN`` a list holding NULL is never true).
    "an account row without its number, beside an orphan entry": (
        [
            "INSERT INTO accounts (account_id, clock, debt, next_grant_id, next_sequence) "
            "VALUES ('zz-by-hand', 0, 0, 1, 1)",
            "INSERT INTO entries SELECT 987654, sequence, kind, timestamp, available, debt, "
            "grant_id, details, rank, revision FROM entries LIMIT 1",
        ],
        [
            "database:",
            "accounts rows without their number: 'zz-by-hand'",
            "entries rows",
            "number 987654",
            "no account row",
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_check_finds_a_tampered_row(cli: Cli, history: Path, tmp_path: Path, case: str) -> None:
    data_dir = _copy(history, tmp_path)
    statements, expected = TAMPERING[case]
    _tamper(data_dir, *statements)
    result = cli("check", "--data-dir", str(data_dir), env={"GPU_CREDITS_LATENESS_WINDOW": "15"})
    assert_clean(result)
    assert result.returncode == 1, result
    report = result.stdout
    for text in expected:
        assert text in report, (text, report)
    summary = result.stderr.strip().splitlines()
    assert len(summary) == 1
    assert summary[0].startswith("gpu-credits: sqlite ")
    assert "problems:" in summary[0]


def test_check_and_export_read_postgres(
    cli: Cli, postgres_databases: DatabasePool, tmp_path: Path
) -> None:
    url = postgres_databases.take()
    try:
        env = {"GPU_CREDITS_STORAGE": "postgres", "GPU_CREDITS_DATABASE_URL": url}
        server = ServerProcess(tmp_path / "pg", storage="postgres", env=env)
        server.start()
        try:
            target = {"GPU_CREDITS_URL": server.base_url}
            succeeded(cli(*grant_args("p:1", 100, 0, 10), env=target))
            succeeded(cli(*grant_args("p:1", 50, 2, 5), env=target))
            succeeded(cli("consume", "p:1", "--amount", "30", "--timestamp", "6", env=target))
            out = succeeded(cli("check", env=env))  # while the service runs
        finally:
            server.stop()
        assert "postgres " in out
        assert "accounts: 1, ledger entries: 4" in out  # an expiration at 5
        assert url.rsplit("@", 1)[-1].split("/")[0] in out
        lines = succeeded(cli("export", "p:1", env=env)).splitlines()
        assert [json.loads(line)["kind"] for line in lines] == [
            "grant",
            "grant",
            "expiration",
            "consumption",
        ]
        asyncio.run(_pg_execute(url, "UPDATE accounts SET available = available + 1"))
        broken = cli("check", env=env)
        assert broken.returncode == 1, broken
        assert "accounts.available is 71 but its live grants hold 70" in broken.stdout
        asyncio.run(_pg_execute(url, "UPDATE accounts SET available = available - 1"))
        asyncio.run(_pg_execute(url, "UPDATE live_grants SET remaining = remaining - 1"))
        asyncio.run(_pg_execute(url, "UPDATE accounts SET available = available - 1"))
        broken = cli("check", env=env)
        assert broken.returncode == 1, broken
        assert "live grant 1" in broken.stdout
    finally:
        postgres_databases.give_back(url)


def test_serve_with_workers_ends_with_0_on_sigterm(
    postgres_databases: DatabasePool, tmp_path: Path
) -> None:
    """``serve --help`` says a stop by SIGTERM ends one process by that signal (the test
    above) and ``--workers N`` (uvicorn's supervisor) with 0: found by the README audit."""
    url = postgres_databases.take()
    try:
        env = {"GPU_CREDITS_DATABASE_URL": url}
        server = ServerProcess(
            tmp_path / "pg", storage="postgres", env=env, args=("--workers", "2")
        )
        server.start()
        assert server.stop() == 0
    finally:
        postgres_databases.give_back(url)


async def _pg_execute(url: str, statement: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


# -- serving ---------------------------------------------------------------------------------


def test_a_second_server_on_one_file_fails_in_one_line(served: Served, tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "second.log"
    with log.open("wb") as out:
        done = subprocess.run(
            [console_script(), "serve", "--port", str(port), "--data-dir", str(served.data_dir)],
            env=served.cli.env(),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=CLI_TIMEOUT_S,
            check=False,
        )
    text = log.read_text()
    assert done.returncode == 3, text
    assert "Traceback" not in text, text
    reason = [line for line in text.splitlines() if "cannot start" in line]
    assert len(reason) == 1, text
    assert "in use by another gpu-credits process" in reason[0]


def test_python_dash_m_app_runs_the_commands(cli: Cli, tmp_path: Path) -> None:
    python = str(Path(console_script()).parent / "python")
    done = subprocess.run(
        [python, "-m", "app", "keys", "list", "--data-dir", str(tmp_path / "d")],
        env=cli.env(),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done
    assert done.stdout.startswith("KEY ID")


def test_csv_cells_a_spreadsheet_would_run_are_text() -> None:
    from app.cli_offline import _cell

    assert _cell("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert _cell("@sum") == "'@sum"
    assert _cell("plain") == "plain"
    assert _cell(-5) == "-5"  # a number stays a number
