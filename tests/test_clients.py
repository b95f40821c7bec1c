"""The typed clients (issue 13, item 8) are what their pinned generators write from the
COMMITTED ``openapi/openapi.json``, and the TypeScript one type-checks and works.

- Python: ``clients/python`` equals, file for file, what ``openapi-python-client`` (pinned in
  constraints.txt) generates now; the comparison and the repair ``scripts/generate_clients``
  does see every kind of difference. (``tests/test_generated_client.py`` runs the committed
  client against a real server.)
- TypeScript: ``clients/typescript/src/schema.d.ts`` equals what ``openapi-typescript``
  (pinned in package-lock.json) generates now; ``tsc --noEmit`` (strict) accepts the typed
  client and its example, and refuses each of a few deliberate mistakes at the line that
  holds it (a string amount, a missing member, a misspelt path, a member the API does not
  send, a string query parameter); the example, compiled, runs against a real server with an
  API key, and an answer other than success reaches it as the problem document.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.generate_clients import (
    OPENAPI,
    PYTHON_CLIENT,
    PYTHON_PACKAGE,
    TYPESCRIPT_SCHEMA,
    _replace_python,
    differences,
    files,
    generate_python,
    generate_typescript,
)
from tests.support.clients import (
    NODE_MODULES,
    TSC,
    TYPESCRIPT_PROJECT,
    KeyedServer,
    keyed_server,
    node_or_skip,
)
from tests.support.server_process import ROOT

# -- Python ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def generated_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated") / "python"
    generate_python(OPENAPI, out)
    return out


def test_committed_python_client_is_what_the_generator_writes_now(
    generated_python: Path,
) -> None:
    committed = files(PYTHON_CLIENT)
    assert f"{PYTHON_PACKAGE}/__init__.py" in committed
    assert "setup.py" in committed
    stale = differences(committed, files(generated_python))
    assert stale == [], (
        "clients/python is out of date with openapi/openapi.json: run ./scripts/generate_clients "
        "and commit the result\n" + "\n".join(stale)
    )


def test_generation_is_deterministic(
    generated_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another output directory, another working directory: the same bytes (no path, time or
    cache in the output)."""
    elsewhere = tmp_path / "a" / "b" / "client"
    elsewhere.parent.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    generate_python(OPENAPI, elsewhere)
    assert differences(files(generated_python), files(elsewhere)) == []
    leftovers = [p for p in elsewhere.rglob("*") if p.name in ("__pycache__", ".ruff_cache")]
    assert leftovers == []


def test_comparison_sees_every_kind_of_difference(generated_python: Path) -> None:
    generated = files(generated_python)
    committed = dict(generated)
    changed = f"{PYTHON_PACKAGE}/models/grant_request.py"
    committed[changed] = committed[changed].replace(b"amount", b"amount_", 1)
    removed = f"{PYTHON_PACKAGE}/models/problem.py"
    del committed[removed]
    committed[f"{PYTHON_PACKAGE}/models/gone_model.py"] = b"class GoneModel: ...\n"
    assert differences(committed, generated) == [
        f"extra (committed, not generated): {PYTHON_PACKAGE}/models/gone_model.py",
        f"differs: {changed}",
        f"missing (generated, not committed): {removed}",
    ]


def test_what_python_and_pip_leave_behind_is_not_part_of_the_client(
    generated_python: Path, tmp_path: Path
) -> None:
    """Importing the committed client (the tests do) or `pip install ./clients/python` writes
    files next to it, which git ignores: so does the comparison."""
    used = tmp_path / "python"
    shutil.copytree(generated_python, used)
    for leftover in (
        f"{PYTHON_PACKAGE}/__pycache__/client.cpython-311.pyc",
        f"{PYTHON_PACKAGE}/models/__pycache__/problem.cpython-311.pyc",
        f"build/lib/{PYTHON_PACKAGE}/client.py",
        f"{PYTHON_PACKAGE}.egg-info/PKG-INFO",
    ):
        (used / leftover).parent.mkdir(parents=True, exist_ok=True)
        (used / leftover).write_bytes(b"left behind")
    assert differences(files(used), files(generated_python)) == []


def test_regeneration_repairs_a_stale_copy_and_touches_only_what_differs(
    generated_python: Path, tmp_path: Path
) -> None:
    stale = tmp_path / "python"
    shutil.copytree(generated_python, stale)
    models = stale / PYTHON_PACKAGE / "models"
    (models / "grant_request.py").write_text("# edited by hand\n")
    (models / "problem.py").unlink()
    (stale / PYTHON_PACKAGE / "api" / "removed_tag").mkdir()
    (stale / PYTHON_PACKAGE / "api" / "removed_tag" / "old.py").write_text("")
    untouched = models / "balance_response.py"
    os.utime(untouched, ns=(1_000_000_000, 1_000_000_000))

    _replace_python(generated_python, stale)
    assert differences(files(stale), files(generated_python)) == []
    assert not (stale / PYTHON_PACKAGE / "api" / "removed_tag").exists()
    assert untouched.stat().st_mtime_ns == 1_000_000_000

    _replace_python(generated_python, stale)  # again: nothing to do
    assert differences(files(stale), files(generated_python)) == []


# -- TypeScript -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node() -> str:
    return node_or_skip()


def _tsc(node: str, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [node, str(TSC), "--project", str(project), "--pretty", "false", *args],
        cwd=project,  # errors name files relative to it
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_package_pins_exact_versions(node: str) -> None:
    """package.json names exact versions, and the lock file (which `npm ci` installs) has
    the same ones: the generator and the compiler never change under the project."""
    package = json.loads((TYPESCRIPT_PROJECT / "package.json").read_text())
    lock = json.loads((TYPESCRIPT_PROJECT / "package-lock.json").read_text())
    pinned = {**package["dependencies"], **package["devDependencies"]}
    assert {"openapi-typescript", "typescript", "openapi-fetch"} <= pinned.keys()
    for name, version in pinned.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), (name, version)
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
        installed = json.loads((NODE_MODULES / name / "package.json").read_text())
        assert installed["version"] == version, f"{name}: run ./scripts/setup --dev"


def test_committed_typescript_types_are_what_the_generator_writes_now(
    node: str, tmp_path: Path
) -> None:
    out = tmp_path / "schema.d.ts"
    generate_typescript(OPENAPI, out)
    assert out.read_bytes() == TYPESCRIPT_SCHEMA.read_bytes(), (
        "clients/typescript/src/schema.d.ts is out of date with openapi/openapi.json: run "
        "./scripts/generate_clients and commit the result"
    )
    text = out.read_text()
    # Every operation of the committed document has its types.
    document = json.loads(OPENAPI.read_text())
    for operations in document["paths"].values():
        for operation in operations.values():
            assert f"    {operation['operationId']}: {{" in text, operation["operationId"]


def test_generate_clients_check_says_both_are_up_to_date(node: str) -> None:
    """The command the README gives, in its read-only mode, on this checkout."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "generate_clients.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "clients/python: up to date",
        "clients/typescript/src/schema.d.ts: up to date",
    ]


def test_tsc_accepts_the_typed_client_and_its_example(node: str) -> None:
    config = json.loads((TYPESCRIPT_PROJECT / "tsconfig.json").read_text())
    assert config["compilerOptions"]["strict"] is True
    assert config["compilerOptions"]["skipLibCheck"] is False  # schema.d.ts is checked too
    done = _tsc(node, TYPESCRIPT_PROJECT, "--noEmit")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ""


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    """The TypeScript project in tmp_path (its packages linked, not copied)."""
    copy = tmp_path / "typescript"
    copy.mkdir()
    for name in ("package.json", "tsconfig.json"):
        shutil.copy2(TYPESCRIPT_PROJECT / name, copy / name)
    shutil.copytree(TYPESCRIPT_PROJECT / "src", copy / "src")
    (copy / "node_modules").symlink_to(NODE_MODULES, target_is_directory=True)
    return copy


# (file, text in it, replacement, an error code tsc must report at that line)
MISTAKES = {
    "string-amount": (
        "example.ts",
        "{ amount: 100, timestamp: 0, expiry: 50 }",
        '{ amount: "100", timestamp: 0, expiry: 50 }',
        "TS2322",  # Type 'string' is not assignable to type 'number'.
    ),
    "missing-timestamp": (
        "example.ts",
        "{ amount: 130, timestamp: 10 }",
        "{ amount: 130 }",
        "TS2345",  # Property 'timestamp' is missing.
    ),
    "misspelt-path": (
        "client.ts",
        'client.POST("/v1/accounts/{account_id}/consumptions"',
        'client.POST("/v1/accounts/{account_id}/consumption"',
        "TS2345",  # Not a path of the document.
    ),
    "member-not-sent": (
        "example.ts",
        "debt: now.debt,",
        "debt: now.debts,",
        "TS2551",  # Property 'debts' does not exist on type BalanceResponse.
    ),
    "string-query-parameter": (
        "client.ts",
        "query: timestamp === undefined ? {} : { timestamp },",
        "query: timestamp === undefined ? {} : { timestamp: String(timestamp) },",
        "TS2375",  # Type '{ timestamp: string; }' is not assignable (string to number).
    ),
}


@pytest.mark.parametrize("mistake", MISTAKES)
def test_tsc_refuses_a_mistake_at_its_line(node: str, project_copy: Path, mistake: str) -> None:
    name, text, replacement, code = MISTAKES[mistake]
    source = project_copy / "src" / name
    original = source.read_text()
    assert original.count(text) == 1, f"{name} no longer holds {text!r}: update MISTAKES"
    line = original[: original.index(text)].count("\n") + 1
    source.write_text(original.replace(text, replacement))

    done = _tsc(node, project_copy, "--noEmit")
    assert done.returncode != 0, f"tsc accepted {mistake}"
    errors = [e for e in done.stdout.splitlines() if ": error TS" in e]
    assert errors, done.stdout + done.stderr
    at_line = [e for e in errors if e.startswith(f"src/{name}({line},")]
    assert at_line, f"no error at src/{name}:{line}:\n{done.stdout}"
    assert any(f"error {code}:" in e for e in at_line), done.stdout


# -- the TypeScript example against a real server ------------------------------------------


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KeyedServer]:
    with keyed_server(tmp_path_factory.mktemp("clients") / "data") as started:
        yield started


@pytest.fixture(scope="module")
def compiled_example(node: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``tsc`` output of the project (JavaScript modules), beside a link to its packages."""
    out = tmp_path_factory.mktemp("compiled")
    (out / "package.json").write_text('{"type": "module"}\n')
    (out / "node_modules").symlink_to(NODE_MODULES, target_is_directory=True)
    done = _tsc(node, TYPESCRIPT_PROJECT, "--outDir", str(out / "dist"))
    assert done.returncode == 0, done.stdout + done.stderr
    example = out / "dist" / "example.js"
    assert example.exists()
    return example


def _run_example(
    node: str, example: Path, url: str, key: str | None, account: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPU_CREDITS_")}
    env["GPU_CREDITS_URL"] = url
    if key is not None:
        env["GPU_CREDITS_KEY"] = key
    return subprocess.run(
        [node, str(example), account],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_typescript_example_runs_against_the_service(
    node: str, compiled_example: Path, keyed: KeyedServer
) -> None:
    done = _run_example(node, compiled_example, keyed.server.base_url, keyed.key, "ts-example")
    assert done.returncode == 0, done.stdout + done.stderr
    # Grant 100 at 0 (until 50); consume 130 at 10: 100 drawn, 30 of debt; grant 40 at 20:
    # 30 settle the debt, 10 kept; the balance at 20.
    assert json.loads(done.stdout) == {
        "grant_id": 1,
        "consumed": 100,
        "debt_added": 30,
        "settled_debt": 30,
        "retained": 10,
        "balance": 10,
        "available": 10,
        "debt": 0,
    }


@pytest.mark.parametrize(
    ("who", "status"), [("reader", 403), ("nobody", 401), ("no-key-at-all", None)]
)
def test_typescript_example_reports_a_problem(
    node: str, compiled_example: Path, keyed: KeyedServer, who: str, status: int | None
) -> None:
    key = {"reader": keyed.reader_key, "nobody": "gck_000000000000_" + "0" * 43}.get(who)
    done = _run_example(node, compiled_example, keyed.server.base_url, key, f"ts-{who}")
    if status is None:
        assert done.returncode == 2, done.stdout + done.stderr
        assert "usage:" in done.stderr
        return
    assert done.returncode == 1, done.stdout + done.stderr
    answer = json.loads(done.stdout)
    assert answer["status"] == status
    problem = answer["problem"]
    assert problem["status"] == status
    assert problem["title"]
    assert problem["detail"]
