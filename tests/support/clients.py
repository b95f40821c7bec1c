"""For the tests of the typed clients (``clients/``): a real server with an API key, and the
TypeScript project's tools.

Node and the TypeScript project's packages (``npm ci`` in ``clients/typescript``, which
``./scripts/setup --dev`` runs when npm is installed) may be missing: the TypeScript tests
then skip with the reason, unless ``GPU_CREDITS_REQUIRE_NODE`` is set (``./scripts/check``, and
so CI, sets it): then they fail and say what is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.keys import Scope, create_key
from tests.support.server_process import ROOT, ServerProcess

REQUIRE_NODE_ENV = "GPU_CREDITS_REQUIRE_NODE"
TYPESCRIPT_PROJECT = ROOT / "clients" / "typescript"
NODE_MODULES = TYPESCRIPT_PROJECT / "node_modules"
TSC = NODE_MODULES / "typescript" / "bin" / "tsc"


@dataclass(frozen=True)
class KeyedServer:
    server: ServerProcess
    key: str  # every scope, every account
    reader_key: str  # credits:read only


@contextmanager
def keyed_server(data_dir: Path) -> Iterator[KeyedServer]:
    """``gpu-credits serve`` with API keys configured: the secure default, as in production."""
    data_dir.mkdir(parents=True, exist_ok=True)
    keys = data_dir / "api-keys.json"
    key, _ = create_key(keys, "client-tests", tuple(Scope), "")
    reader_key, _ = create_key(keys, "client-tests-reader", (Scope.READ,), "")
    server = ServerProcess(data_dir)
    server.start()
    try:
        yield KeyedServer(server, key, reader_key)
    finally:
        server.stop()


def node_required() -> bool:
    return os.environ.get(REQUIRE_NODE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def node_or_skip() -> str:
    """The ``node`` executable, with the TypeScript project's packages installed; skip (or
    fail, when required) otherwise."""
    node = shutil.which("node")
    if node is None:
        missing = (
            "no node on this machine (Debian's `nodejs` and `npm` packages, which "
            "./scripts/check installs when run as root)"
        )
    elif not TSC.exists():
        missing = (
            f"{NODE_MODULES.relative_to(ROOT)} is not installed: run ./scripts/setup --dev "
            "with npm installed (it runs `npm ci` there)"
        )
    else:
        return node
    if node_required():
        pytest.fail(f"{REQUIRE_NODE_ENV} is set, so the TypeScript tests must run, but {missing}")
    pytest.skip(missing)
