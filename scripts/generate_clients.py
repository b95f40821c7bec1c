"""Regenerate the typed clients from the committed ``openapi/openapi.json``.

- ``clients/python``: a Python package (``gpu_credits_client``, with ``setup.py``) written by
  ``openapi-python-client`` at the version ``constraints.txt`` pins, formatted by its post-hooks
  with the pinned ``ruff`` and the ``[tool.ruff]`` section it writes itself (so no other ruff
  configuration of this machine changes a byte);
- ``clients/typescript/src/schema.d.ts``: the types ``openapi-typescript`` writes, at the
  version ``clients/typescript/package-lock.json`` pins (``npm ci`` there: ``./scripts/setup
  --dev`` runs it when npm is installed).

Both are generated in a temporary directory and compared with the committed files; only what
differs is replaced, so running it again changes nothing. Nothing is downloaded.

Usage: ``./scripts/generate_clients`` (sets up first), or ``.venv/bin/python
scripts/generate_clients.py [--check]``; ``--check`` writes nothing and exits 1 when a committed
client differs from what the generators write now. Run ``scripts/export_openapi.py`` first
when the API changed: the clients follow the committed document, not the code.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPENAPI = ROOT / "openapi" / "openapi.json"
PYTHON_CLIENT = ROOT / "clients" / "python"
TYPESCRIPT_PROJECT = ROOT / "clients" / "typescript"
TYPESCRIPT_SCHEMA = TYPESCRIPT_PROJECT / "src" / "schema.d.ts"
PYTHON_PACKAGE = "gpu_credits_client"
# A member with a default is optional, as the document says (openapi-typescript 7 would
# otherwise make it required in requests: BatchRequest.atomic). Every response member the
# service always sends is listed as required in the document itself.
TYPESCRIPT_OPTIONS = ("--default-non-nullable", "false")
# What Python, a tool or `pip install ./clients/python` may leave next to the sources (the
# generated .gitignore lists them): never part of a client.
_IGNORED_PARTS = frozenset(
    {"__pycache__", ".ruff_cache", ".mypy_cache", ".pytest_cache", "build", "dist"}
)


def _ignored(relative: Path) -> bool:
    return any(part in _IGNORED_PARTS or part.endswith(".egg-info") for part in relative.parts)


class GenerationError(Exception):
    """A generator failed, warned, or is not installed."""


def _tool_env() -> dict[str, str]:
    """The environment of the generators: this interpreter's directory (the project's .venv,
    with the pinned ruff the post-hooks run) first on PATH; no caches written."""
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
        "RUFF_NO_CACHE": "true",
        "PYTHONDONTWRITEBYTECODE": "1",
        "NO_COLOR": "1",
        "FORCE_COLOR": "0",
    }


def _run(args: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(
            args,
            cwd=cwd,
            env=_tool_env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    except FileNotFoundError as exc:
        raise GenerationError(f"{args[0]} is not installed: {exc}") from exc
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise GenerationError(f"{' '.join(args)} failed ({done.returncode}):\n{output}")
    return output


def _unexpected(output: str, expected_prefixes: tuple[str, ...]) -> list[str]:
    """The lines of a generator's output that are not among those it prints on success."""
    return [
        line
        for line in output.splitlines()
        if line.strip() and not line.startswith(expected_prefixes)
    ]


def python_generator() -> Path:
    exe = Path(sys.executable).parent / "openapi-python-client"
    if not exe.exists():
        raise GenerationError(
            f"{exe.name} is not installed next to {sys.executable}: run ./scripts/setup --dev"
        )
    return exe


def typescript_generator() -> Path:
    exe = TYPESCRIPT_PROJECT / "node_modules" / ".bin" / "openapi-typescript"
    if not exe.exists():
        raise GenerationError(
            "openapi-typescript is not installed: run ./scripts/setup --dev with npm installed "
            "(it runs `npm ci` in clients/typescript)"
        )
    return exe


# openapi-python-client knows JSON, forms, multipart and bytes: a usage stream's NDJSON
# (POST /v1/events) is sent and answered as bytes (``File``), which the caller writes and
# splits into lines (README, Usage streams).
PYTHON_CONFIG = '{"content_type_overrides": {"application/x-ndjson": "application/octet-stream"}}'


def generate_python(openapi: Path, out: Path) -> None:
    """Write the Python client project generated from ``openapi`` to ``out`` (a new path)."""
    config = out.parent / "openapi-python-client.json"
    config.write_text(PYTHON_CONFIG)
    output = _run(
        [
            str(python_generator()),
            "generate",
            "--path",
            str(openapi),
            "--config",
            str(config),
            "--meta",
            "setup",
            "--output-path",
            str(out),
        ],
        cwd=out.parent,
    )
    # It says "Generating <path>" and nothing else, unless it warns: about parts of the
    # document it could not turn into code, or a post-hook that failed.
    if _unexpected(output, ("Generating ",)):
        raise GenerationError(f"openapi-python-client warned:\n{output}")
    for leftover in [p for p in out.rglob("*") if p.is_dir() and _ignored(p.relative_to(out))]:
        shutil.rmtree(leftover, ignore_errors=True)


def generate_typescript(openapi: Path, out: Path) -> None:
    """Write the TypeScript types generated from ``openapi`` to the file ``out``."""
    output = _run(
        [str(typescript_generator()), str(openapi), *TYPESCRIPT_OPTIONS, "--output", str(out)],
        cwd=out.parent,
    )
    # Its version, then "<input> → <output> [time]"; anything else is a warning.
    if _unexpected(output, ("\N{SPARKLES} openapi-typescript ", "\N{ROCKET} ")):
        raise GenerationError(f"openapi-typescript warned:\n{output}")


def files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (a file or a directory) by its path relative to ``root``."""
    if root.is_file():
        return {root.name: root.read_bytes()}
    if not root.exists():
        return {}
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not _ignored(p.relative_to(root))
    }


def differences(committed: Mapping[str, bytes], generated: Mapping[str, bytes]) -> list[str]:
    """What makes ``committed`` differ from ``generated``, one line per file."""
    lines = []
    for name in sorted(committed.keys() | generated.keys()):
        if name not in committed:
            lines.append(f"missing (generated, not committed): {name}")
        elif name not in generated:
            lines.append(f"extra (committed, not generated): {name}")
        elif committed[name] != generated[name]:
            lines.append(f"differs: {name}")
    return lines


def _replace_python(generated: Path, dest: Path) -> None:
    """Make ``dest`` hold exactly the files of ``generated``, touching only those that differ."""
    want, have = files(generated), files(dest)
    for name in have.keys() - want.keys():
        (dest / name).unlink()
    for name, content in want.items():
        if have.get(name) != content:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            (dest / name).write_bytes(content)
    # Directories left empty by removed files (a model renamed away, say).
    for directory in sorted((p for p in dest.rglob("*") if p.is_dir()), reverse=True):
        if not any(directory.iterdir()):
            directory.rmdir()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a committed client differs from what is generated now",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gpu-credits-clients-") as tmp:
        work = Path(tmp)
        python_out, typescript_out = work / "python", work / "schema.d.ts"
        try:
            generate_python(OPENAPI, python_out)
            generate_typescript(OPENAPI, typescript_out)
        except GenerationError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        stale = {
            PYTHON_CLIENT: differences(files(PYTHON_CLIENT), files(python_out)),
            TYPESCRIPT_SCHEMA: differences(
                files(TYPESCRIPT_SCHEMA) if TYPESCRIPT_SCHEMA.exists() else {},
                files(typescript_out),
            ),
        }
        for path, lines in stale.items():
            shown = path.relative_to(ROOT)
            if not lines:
                print(f"{shown}: up to date")
                continue
            if args.check:
                print(f"{shown}: out of date with {OPENAPI.relative_to(ROOT)}")
                for line in lines:
                    print(f"  {line}")
            elif path == PYTHON_CLIENT:
                _replace_python(python_out, PYTHON_CLIENT)
                print(f"{shown}: regenerated ({len(lines)} files changed)")
            else:
                TYPESCRIPT_SCHEMA.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(typescript_out, TYPESCRIPT_SCHEMA)
                print(f"{shown}: regenerated")
    if args.check and any(stale.values()):
        print("run ./scripts/generate_clients and commit the result", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
