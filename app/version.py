"""The service's version: the installed package's, from its metadata (``pyproject.toml``),
so ``GET /version``, the OpenAPI document and ``pip show gpu-credits`` always agree."""

from __future__ import annotations

import importlib.metadata
from typing import Final

DISTRIBUTION: Final = "gpu-credits"
UNKNOWN: Final = "0+unknown"


def package_version() -> str:
    """The installed distribution's version; ``0+unknown`` when the sources run without
    being installed (the README's setup always installs them)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN
