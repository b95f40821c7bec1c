"""The container files (issue 13), checked without a Docker engine.

- ``docker-compose.yml`` as ``docker compose`` reads it (``tests.support.compose``: the
  Compose Specification's interpolation and profiles): plain ``docker compose up`` with an
  empty environment interpolates and starts the SQLite service alone; ``--profile
  postgres`` starts PostgreSQL and the replicas and not the SQLite service, again with no
  variable: the password is a secret file, in no environment.
- Every service of ours probes ``/readyz`` on ``GPU_CREDITS_PORT``, in the Dockerfile and
  in the compose file, and the command really works: run against a real server, it passes
  while the server is ready and fails once its storage is gone.
- The rules of ``tests.support.compose`` themselves. (They were compared once by hand with
  ``docker compose config`` of Compose v2.22 for every invocation here, and agreed; no
  Compose binary is installable here from a maintained package, so no test depends on one.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.compose import (
    InterpolationError,
    Project,
    RequiredVariable,
    UnsetVariable,
    interpolate,
    load_project,
)
from tests.support.server_process import ROOT, ServerProcess

COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
OUR_IMAGE = "gpu-credits:latest"
SQLITE_SERVICES = {"gpu-credits"}
POSTGRES_SERVICES = {"postgres", "gpu-credits-pg"}
DEFAULT_PORT = "8000"
CHECK_TIMEOUT_S = 30.0
DETECTION_WAIT_S = 15.0


# -- the invocations -------------------------------------------------------------------------


@dataclass(frozen=True)
class Invocation:
    name: str
    profile_flags: tuple[str, ...]
    environ: Mapping[str, str]
    services: set[str]


INVOCATIONS = [
    Invocation("plain-up", (), {}, SQLITE_SERVICES),
    Invocation("profile-postgres", ("postgres",), {}, POSTGRES_SERVICES),
    Invocation("env-profiles-postgres", (), {"COMPOSE_PROFILES": "postgres"}, POSTGRES_SERVICES),
    Invocation("both-profiles", ("sqlite", "postgres"), {}, SQLITE_SERVICES | POSTGRES_SERVICES),
    Invocation("plain-up-port", (), {"GPU_CREDITS_PORT": "9100"}, SQLITE_SERVICES),
    Invocation(
        "profile-postgres-port", ("postgres",), {"GPU_CREDITS_PORT": "9100"}, POSTGRES_SERVICES
    ),
]


def load(invocation: Invocation) -> Project:
    return load_project(COMPOSE_FILE, invocation.environ, invocation.profile_flags)


@pytest.mark.parametrize("invocation", INVOCATIONS, ids=[i.name for i in INVOCATIONS])
def test_each_invocation_interpolates_and_starts_its_services(invocation: Invocation) -> None:
    """Strict: a variable used without a default would fail here (Compose would only warn
    and substitute an empty string); the file before this issue failed on
    POSTGRES_PASSWORD, even for the SQLite service."""
    project = load(invocation)
    assert set(project.enabled) == invocation.services


def test_plain_up_needs_no_variable_and_starts_sqlite_alone() -> None:
    project = load_project(COMPOSE_FILE, {})
    assert project.profiles == {"sqlite"}  # from the committed .env
    assert set(project.enabled) == {"gpu-credits"}
    assert project.enabled["gpu-credits"]["environment"]["GPU_CREDITS_STORAGE"] == "sqlite"
    assert project.secrets_used() == set()


def test_every_service_has_a_profile() -> None:
    """A service without one would start with every profile (the SQLite service used to
    start with --profile postgres too)."""
    for name, service in load_project(COMPOSE_FILE, {}).document["services"].items():
        assert service.get("profiles"), name


def test_the_postgres_profile_takes_its_password_from_a_secret_file() -> None:
    project = load_project(COMPOSE_FILE, {}, ["postgres"])
    secrets = project.document["secrets"]
    assert project.secrets_used() == {"postgres_password"}
    assert os.path.normpath(secrets["postgres_password"]["file"]) == "secrets/postgres_password"
    # secrets/ never reaches git or the image's build context.
    assert "secrets/" in (ROOT / ".gitignore").read_text().splitlines()
    assert "secrets/" in (ROOT / ".dockerignore").read_text().splitlines()

    in_container = "/run/secrets/postgres_password"
    postgres = project.enabled["postgres"]["environment"]
    assert postgres["POSTGRES_PASSWORD_FILE"] == in_container
    service = project.enabled["gpu-credits-pg"]["environment"]
    assert service["GPU_CREDITS_DATABASE_PASSWORD_FILE"] == in_container
    url = urllib.parse.urlsplit(service["GPU_CREDITS_DATABASE_URL"])
    assert url.password is None
    assert "password" not in url.query
    # The URL's user and database are the ones the postgres image creates.
    assert url.username == postgres["POSTGRES_USER"]
    assert url.path == f"/{postgres['POSTGRES_DB']}"


@pytest.mark.parametrize("invocation", INVOCATIONS, ids=[i.name for i in INVOCATIONS])
def test_no_password_is_in_any_environment(invocation: Invocation) -> None:
    for name, service in load(invocation).enabled.items():
        for variable, value in service.get("environment", {}).items():
            if "PASSWORD" in variable.upper():
                assert variable.upper().endswith("_FILE"), (name, variable)
            if "://" in str(value):
                assert urllib.parse.urlsplit(str(value)).password is None, (name, variable)


# -- healthchecks and the port ----------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(instruction, arguments) with continuation lines joined and comments dropped."""
    joined: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in joined]


def dockerfile_healthcheck() -> list[str]:
    (healthcheck,) = [args for name, args in dockerfile_instructions() if name == "HEALTHCHECK"]
    command = json.loads(healthcheck.split(" CMD ", 1)[1])
    assert isinstance(command, list)
    return [str(part) for part in command]


def runtime_env() -> dict[str, str]:
    """The runtime stage's ENV, as KEY=VALUE pairs."""
    instructions = dockerfile_instructions()
    runtime = max(i for i, (name, args) in enumerate(instructions) if name == "FROM")
    env: dict[str, str] = {}
    for name, args in instructions[runtime:]:
        if name == "ENV":
            for key, value in re.findall(r'(\w+)=("[^"]*"|\S+)', args):
                env[key] = value.strip('"')
    return env


def our_services(project: Project) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in project.enabled.items() if s.get("image") == OUR_IMAGE}


@pytest.mark.parametrize("invocation", INVOCATIONS, ids=[i.name for i in INVOCATIONS])
def test_every_service_probes_readyz_on_its_configured_port(invocation: Invocation) -> None:
    project = load(invocation)
    ours = our_services(project)
    assert ours, "every invocation starts a service of ours"
    expected_port = invocation.environ.get("GPU_CREDITS_PORT", DEFAULT_PORT)
    for name, service in ours.items():
        test = service["healthcheck"]["test"]
        assert test[0] == "CMD", (name, test)  # exec form: no shell, nothing interpolated
        assert test[1:] == dockerfile_healthcheck(), "one check, in the image and here"
        assert service["environment"]["GPU_CREDITS_PORT"] == expected_port, name
        for mapping in service["ports"]:
            assert mapping.rsplit(":", 1)[1] == expected_port, (name, mapping)
    others = set(project.enabled) - set(ours)
    for name in others:  # PostgreSQL has its own check
        assert project.enabled[name]["healthcheck"]["test"][1] == "pg_isready", name


def test_the_image_listens_on_gpu_credits_port() -> None:
    """The port is the variable's: no --port flag (which would win over it) in CMD."""
    env = runtime_env()
    assert env["GPU_CREDITS_PORT"] == DEFAULT_PORT
    assert env["GPU_CREDITS_HOST"] == "0.0.0.0"
    (cmd,) = [args for name, args in dockerfile_instructions() if name == "CMD"]
    assert json.loads(cmd) == ["gpu-credits", "serve"]
    (expose,) = [args for name, args in dockerfile_instructions() if name == "EXPOSE"]
    assert expose == DEFAULT_PORT
    check = " ".join(dockerfile_healthcheck())
    assert "/readyz" in check
    assert "os.environ.get('GPU_CREDITS_PORT') or '8000'" in check


def run_check(command: list[str], port: int) -> subprocess.CompletedProcess[str]:
    assert command[0] == "python"
    env = {**os.environ, "GPU_CREDITS_PORT": str(port)}
    return subprocess.run(
        [sys.executable, *command[1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
    )


def test_the_healthcheck_passes_when_ready_and_fails_when_storage_is_gone(
    tmp_path: Path,
) -> None:
    """The command the image and the compose file run, against a real server on the port
    GPU_CREDITS_PORT names; then that server's data directory is replaced (as in
    tests/test_sqlite_file_identity.py), which makes it unready but alive."""
    command = dockerfile_healthcheck()
    server = ServerProcess(tmp_path / "data", log_path=tmp_path / "server.log")
    server.start()
    try:
        healthy = run_check(command, server.port)
        assert healthy.returncode == 0, healthy.stderr
        (tmp_path / "data").rename(tmp_path / "data.old")
        (tmp_path / "data").mkdir()
        deadline = time.monotonic() + DETECTION_WAIT_S
        with httpx.Client(base_url=server.base_url, timeout=2.0) as client:
            while client.get("/readyz").status_code != 503:
                assert time.monotonic() < deadline, "the server did not notice"
                time.sleep(0.05)  # polling interval while waiting for a condition
            assert client.get("/livez").status_code == 200
        unhealthy = run_check(command, server.port)
        assert unhealthy.returncode == 1, unhealthy
        assert "503" in unhealthy.stderr
    finally:
        server.stop()


# -- the rules of tests.support.compose -------------------------------------------------------

ENV = {"SET": "value", "EMPTY": "", "OTHER": "other"}
CASES = [
    ("plain", "no variables", "no variables"),
    ("dollar-name", "$SET/x", "value/x"),
    ("braced", "${SET}x", "valuex"),
    ("escaped", "$$SET and $${SET}", "$SET and ${SET}"),
    ("lone-dollar", "cost: 5$ or $-1 or $", "cost: 5$ or $-1 or $"),
    ("colon-dash-unset", "${UNSET:-d}", "d"),
    ("colon-dash-empty", "${EMPTY:-d}", "d"),
    ("colon-dash-set", "${SET:-d}", "value"),
    ("dash-unset", "${UNSET-d}", "d"),
    ("dash-empty", "${EMPTY-d}", ""),
    ("colon-question-set", "${SET:?boom}", "value"),
    ("question-empty", "${EMPTY?boom}", ""),
    ("colon-plus-set", "${SET:+alt}", "alt"),
    ("colon-plus-empty", "${EMPTY:+alt}", ""),
    ("plus-empty", "${EMPTY+alt}", "alt"),
    ("plus-unset", "${UNSET+alt}", ""),
    ("nested-default", "${UNSET:-${OTHER}}", "other"),
    ("nested-twice", "${UNSET:-${ALSO_UNSET:-deep}}", "deep"),
    ("default-with-colon", "${UNSET:-8001-8002:8000}", "8001-8002:8000"),
    ("empty-default", "${UNSET:-}", ""),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_interpolation(text: str, expected: str) -> None:
    assert interpolate(text, ENV) == expected


@pytest.mark.parametrize(
    ("text", "error", "mentions"),
    [
        ("${UNSET:?set UNSET please}", RequiredVariable, "set UNSET please"),
        ("${EMPTY:?empty}", RequiredVariable, "EMPTY"),
        ("${UNSET?x}", RequiredVariable, "UNSET"),
        ("$UNSET", UnsetVariable, "UNSET"),
        ("${UNSET}", UnsetVariable, "UNSET"),
        ("${}", InterpolationError, "invalid"),
        ("${1ABC}", InterpolationError, "invalid"),
        ("${SET", InterpolationError, "closing brace"),
        ("${SET:=x}", InterpolationError, "invalid"),
    ],
    ids=[
        "colon-question-unset",
        "colon-question-empty",
        "question-unset",
        "unset-strict",
        "braced-unset-strict",
        "empty-braces",
        "bad-name",
        "unclosed",
        "assign-is-not-compose",
    ],
)
def test_interpolation_errors(text: str, error: type[Exception], mentions: str) -> None:
    with pytest.raises(error, match=re.escape(mentions)):
        interpolate(text, ENV)


def test_without_strict_an_unset_variable_is_empty_as_compose_does() -> None:
    assert interpolate("a${UNSET}b$UNSET", ENV, strict=False) == "ab"


def test_the_file_before_this_issue_fails_as_compose_failed(tmp_path: Path) -> None:
    """The old file's PostgreSQL service, with no profile selected: the model fails on it
    as Compose did (it interpolates services that no profile enables)."""
    old = tmp_path / "docker-compose.yml"
    old.write_text(
        "services:\n"
        "  app:\n    image: x\n"
        "  postgres:\n    profiles: [postgres]\n    image: postgres\n"
        "    environment:\n      POSTGRES_PASSWORD: ${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}\n"
    )
    with pytest.raises(RequiredVariable, match="POSTGRES_PASSWORD"):
        load_project(old, {})
    project = load_project(old, {"POSTGRES_PASSWORD": "x"}, ["postgres"])
    assert set(project.enabled) == {"app", "postgres"}  # a service without profile: always
