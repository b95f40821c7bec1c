"""``gpu-credits serve``: start the service on uvicorn (uvloop event loop, httptools parser)."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import uvicorn

from app.main import create_app
from app.settings import Settings


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-credits", description="GPU credit ledger service")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument(
        "--host", help="address to listen on (default: GPU_CREDITS_HOST or 127.0.0.1)"
    )
    serve.add_argument("--port", type=int, help="TCP port (default: GPU_CREDITS_PORT or 8000)")
    args = parser.parse_args(argv)

    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = Settings(**overrides)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        access_log=settings.access_log,
        log_level=settings.log_level,
        server_header=False,
        timeout_graceful_shutdown=10,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
