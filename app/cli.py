"""The ``gpu-credits`` command.

- ``gpu-credits serve [--host H] [--port P] [--insecure-no-auth]``: run the service on uvicorn
  (uvloop event loop, httptools parser).
- ``gpu-credits keys create --name N --scope S [--scope S] [--account-prefix P]``: make an API
  key, print it once, store only its hash. ``keys list`` and ``keys revoke KEY_ID`` manage them.
- ``gpu-credits migrate``: apply the configured database's pending schema migrations (the
  service also applies them when it starts). ``migrate --status`` only says where the
  database stands: exit 0 when its schema is current, 1 when migrations are pending, 2 when
  this release cannot tell or cannot use it (unreachable, or migrated by a newer release).

Secure by default: with no API key configured, ``serve`` refuses to listen on anything but
loopback unless ``--insecure-no-auth`` (or GPU_CREDITS_ALLOW_UNAUTHENTICATED=true) says so.

A configuration that cannot be used (an invalid setting, a ``GPU_CREDITS_<NAME>_FILE`` that
cannot be read) is one line on stderr and exit 2, before anything starts.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import logging.config
import sys
import urllib.parse
from collections.abc import Sequence
from typing import Any

import uvicorn
from pydantic import ValidationError

from app.api.http_protocol import protocol_factory
from app.keys import Scope, create_key, load_records, revoke_key
from app.logs import log_config
from app.main import create_app
from app.settings import ENV_PREFIX, SecretFileError, Settings
from app.storage import location, open_store
from app.storage.base import MigrationStatus

log = logging.getLogger("app.cli")


class ConfigurationError(Exception):
    """The configuration cannot be used: ``main`` prints the message (one line, no
    traceback, no secret) and exits 2."""


def _load_settings(**overrides: Any) -> Settings:
    try:
        return Settings(**overrides)
    except SecretFileError as exc:
        raise ConfigurationError(str(exc)) from None
    except ValidationError as exc:
        # Only where and what: pydantic's own text quotes the input, database URL included.
        issues = []
        for error in exc.errors(include_url=False, include_input=False):
            message = error["msg"].removeprefix("Value error, ")
            where = "_".join(str(part) for part in error["loc"]).upper()
            issues.append(f"{ENV_PREFIX}{where}: {message}" if where else message)
        raise ConfigurationError("invalid configuration: " + "; ".join(issues)) from None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _serve(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {
        k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None
    }
    if args.insecure_no_auth:
        overrides["allow_unauthenticated"] = True
    settings = _load_settings(**overrides)
    logging_config = log_config(settings.log_level, settings.log_format)
    logging.config.dictConfig(logging_config)
    has_keys = len(load_records(settings.keys_path)) > 0
    if not has_keys and not is_loopback(settings.host):
        if not settings.allow_unauthenticated:
            print(
                f"refusing to listen on {settings.host}: no API keys are configured "
                f"({settings.keys_path}), so anyone who can reach the service could grant "
                "credits. Create a key with `gpu-credits keys create`, listen on 127.0.0.1, "
                "or pass --insecure-no-auth to run without authentication.",
                file=sys.stderr,
            )
            return 2
        log.warning(
            "!!! INSECURE: serving on %s WITHOUT AUTHENTICATION (--insecure-no-auth). "
            "Anyone who can reach this address can grant and consume credits. !!!",
            settings.host,
        )
    workers = args.workers
    if workers > 1 and settings.storage != "postgres":
        print(
            f"refusing --workers {workers} with storage={settings.storage}: each worker "
            "would keep its own ledger. Use one worker, or storage=postgres "
            "(GPU_CREDITS_STORAGE=postgres, GPU_CREDITS_DATABASE_URL=...), which several "
            "workers and hosts share.",
            file=sys.stderr,
        )
        return 2
    # One worker: run the app built here. Several: each worker process builds its own from
    # the same environment (uvicorn's factory mode).
    target: Any = create_app(settings) if workers == 1 else "app.main:create_app"
    uvicorn.run(
        target,
        factory=workers > 1,
        workers=workers,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        # httptools, hardened (app/api/http_protocol.py) and configured from these settings.
        # uvicorn only calls it, once per connection; a partial (not a class built here) so
        # that it pickles by name into each --workers process with the rest of the config.
        http=protocol_factory(settings),  # type: ignore[arg-type]
        # Every line as app.logs formats it (each worker applies this too); the request log
        # is the app's own (app.api.requests: route, request id, key id), not uvicorn's.
        log_config=logging_config,
        access_log=False,
        log_level=settings.log_level,
        server_header=False,
        timeout_graceful_shutdown=10,
        limit_concurrency=settings.limit_concurrency,
        timeout_keep_alive=settings.timeout_keep_alive_s,
    )
    return 0


def _keys(args: argparse.Namespace) -> int:
    settings = _load_settings()
    path = settings.keys_path
    if args.keys_command == "create":
        scopes = tuple(dict.fromkeys(Scope(s) for s in args.scope))
        if not args.account_prefix and any(
            q is not None
            for q in (args.max_accounts, args.max_live_grants, args.max_idempotency_keys)
        ):
            print(
                "quotas apply to a tenant, the accounts of one prefix: give --account-prefix",
                file=sys.stderr,
            )
            return 2
        key, record = create_key(
            path,
            args.name,
            scopes,
            args.account_prefix,
            max_accounts=args.max_accounts,
            max_live_grants=args.max_live_grants,
            max_idempotency_keys=args.max_idempotency_keys,
        )
        print(key)
        print(
            f"created key {record.key_id} ({record.name}) with scopes "
            f"{', '.join(s.value for s in record.scopes)}"
            + (
                f" for accounts starting with {record.account_prefix!r}"
                if record.account_prefix
                else ""
            )
            + f"; stored its hash in {path}. The key is shown only this once.",
            file=sys.stderr,
        )
        return 0
    if args.keys_command == "list":
        for r in load_records(path):
            names = ",".join(s.value for s in r.scopes)
            print(f"{r.key_id}\t{r.name}\t{names}\t{r.account_prefix or '*'}")
        return 0
    if revoke_key(path, args.key_id):
        print(f"revoked {args.key_id}", file=sys.stderr)
        return 0
    print(f"no key {args.key_id} in {path}", file=sys.stderr)
    return 1


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-credits", description="GPU credit ledger service")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", help="address to listen on (default GPU_CREDITS_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="TCP port (default GPU_CREDITS_PORT, 8000)")
    serve.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help="allow a non-loopback address with no API keys configured (warns loudly)",
    )

    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        choices=range(1, 65),
        metavar="N",
        help="worker processes (more than 1 needs storage=postgres)",
    )

    migrate = commands.add_parser(
        "migrate", help="apply the database's pending schema migrations and exit"
    )
    migrate.add_argument(
        "--status",
        action="store_true",
        help="only show the schema version, the known and the pending migrations "
        "(exit 0: current, 1: pending, 2: cannot tell or too new)",
    )

    keys = commands.add_parser("keys", help="manage API keys")
    key_commands = keys.add_subparsers(dest="keys_command", required=True)
    create = key_commands.add_parser("create", help="create a key; it is printed only once")
    create.add_argument("--name", required=True, help="who or what uses the key")
    create.add_argument(
        "--scope",
        action="append",
        required=True,
        choices=[s.value for s in Scope],
        help="repeat for several scopes",
    )
    create.add_argument(
        "--account-prefix", default="", help="only account ids starting with this (default: all)"
    )
    for flag, what in (
        ("--max-accounts", "accounts"),
        ("--max-live-grants", "live grants"),
        ("--max-idempotency-keys", "Idempotency-Keys"),
    ):
        create.add_argument(
            flag,
            type=_positive_int,
            metavar="N",
            help=f"quota of {what} for the accounts of --account-prefix "
            "(default: GPU_CREDITS_TENANT_" + flag[2:].upper().replace("-", "_") + ")",
        )
    key_commands.add_parser("list", help="list keys (ids, names, scopes; never secrets)")
    revoke = key_commands.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id")

    args = parser.parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "migrate":
            return _migrate(args.status)
        return _keys(args)
    except ConfigurationError as exc:
        print(f"gpu-credits: {exc}", file=sys.stderr)
        return EXIT_CANNOT


EXIT_PENDING = 1
EXIT_CANNOT = 2


def _migrate(status_only: bool) -> int:
    """``gpu-credits migrate [--status]``: see the module docstring for the exit codes."""
    settings = _load_settings()
    where = location(settings)
    if settings.storage == "memory":
        print(f"storage: {where} (keeps nothing on disk: no schema, nothing to migrate)")
        return 0
    store = open_store(settings)
    try:
        status = asyncio.run(store.migration_status())
    except Exception as exc:  # unreachable, unreadable: say so without a traceback
        print(f"cannot read the schema of {where}: {_safe(exc, settings)}", file=sys.stderr)
        return EXIT_CANNOT
    if status_only:
        return _print_status(where, status)
    if status.newer_than_known:
        _print_status(where, status)
        return EXIT_CANNOT
    if not status.pending:
        # Checked first so that a running service (which holds the SQLite file and has
        # applied everything when it started) is no obstacle to finding nothing to do.
        print("applied migrations: none, the schema is current", file=sys.stderr)
        return 0
    try:
        applied = asyncio.run(store.migrate())
    except Exception as exc:
        print(f"cannot migrate {where}: {_safe(exc, settings)}", file=sys.stderr)
        return EXIT_CANNOT
    print(f"applied migrations: {applied or 'none, the schema is current'}", file=sys.stderr)
    return 0


def _print_status(where: str, status: MigrationStatus) -> int:
    def versions(vs: tuple[int, ...]) -> str:
        return ", ".join(map(str, vs)) or "none"

    print(f"storage: {where}")
    print(f"schema version: {status.current}" + (" (empty database)" if not status.current else ""))
    print(f"known to this release: {versions(status.known)}")
    if status.newer_than_known:
        print(
            f"pending: cannot tell: version {status.current} is newer than this release "
            "knows; upgrade gpu-credits"
        )
        return EXIT_CANNOT
    print(f"pending: {versions(status.pending)}")
    return EXIT_PENDING if status.pending else 0


def _safe(exc: Exception, settings: Settings) -> str:
    """An error message with the database password taken out, should the driver quote it
    (as it is in the URL, percent-encoded, or decoded)."""
    text = f"{exc}" or type(exc).__name__
    if settings.storage == "postgres":
        secret = urllib.parse.urlsplit(settings.database_url_value()).password
        if secret:
            for form in sorted({secret, urllib.parse.unquote(secret)}, key=len, reverse=True):
                text = text.replace(form, "***")
    return text


if __name__ == "__main__":
    raise SystemExit(main())
