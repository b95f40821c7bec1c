"""``python -m app [serve] [--host H] [--port P]`` does what ``gpu-credits serve`` does;
``python -m app COMMAND ...`` what ``gpu-credits COMMAND ...`` does."""

from __future__ import annotations

import sys

from app.cli import main

argv = sys.argv[1:]
if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
    argv = ["serve", *argv]
raise SystemExit(main(argv))
