"""Headless Chromium for the tests that look at a page as a person would: Debian's
``chromium`` package (``./scripts/check`` installs it when it runs as root), driven through
playwright's Python API with ``executable_path`` (playwright's own browser downloads are
never used).

Where no Chromium is found, the test skips with the reason, unless
``GPU_CREDITS_REQUIRE_BROWSER`` is set (``./scripts/check``, and so CI, sets it): then it
fails and says what is missing.
"""

from __future__ import annotations

import os
import shutil

import pytest

REQUIRE_ENV = "GPU_CREDITS_REQUIRE_BROWSER"
EXECUTABLE_ENV = "GPU_CREDITS_CHROMIUM"


def browser_required() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def find_chromium() -> str | None:
    """``$GPU_CREDITS_CHROMIUM``, else ``chromium`` (Debian) or ``chromium-browser`` on PATH."""
    configured = os.environ.get(EXECUTABLE_ENV)
    if configured:
        return configured
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def chromium_or_skip() -> str:
    """The Chromium executable; skip (or fail, when required) without one."""
    found = find_chromium()
    if found:
        return found
    missing = (
        "no Chromium on this machine (Debian's `chromium` package: `apt-get install chromium`, "
        f"which ./scripts/check does when run as root; or set {EXECUTABLE_ENV})"
    )
    if browser_required():
        pytest.fail(f"{REQUIRE_ENV} is set, so the browser test must run, but {missing}")
    pytest.skip(missing)
