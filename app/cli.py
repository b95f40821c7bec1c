"""The ``gpu-credits`` command (``gpu-credits --help``, and ``--help`` on every subcommand).

Operating the service (they read the configuration: ``GPU_CREDITS_*`` and ``--data-dir``):

- ``serve``: run the service on uvicorn (uvloop event loop, httptools parser).
- ``migrate [--status]``: apply (or only show) the database's pending schema migrations.
- ``keys create|list|revoke``: manage API keys (printed once; only their hashes are kept).
- ``check``: verify the database offline: replay every account, reconcile it with its
  stored state and checkpoints (``app.service.audit``).
- ``export ACCOUNT``: an account's ledger from the database, as JSON lines or CSV.

Calling a running service (``app.cli_client``; ``--url``/``--key`` or ``GPU_CREDITS_URL``/
``GPU_CREDITS_KEY``): ``grant``, ``consume``, ``balance``, ``ledger``.

Secure by default: with no API key configured, ``serve`` refuses to listen on anything but
loopback unless ``--insecure-no-auth`` (or GPU_CREDITS_ALLOW_UNAUTHENTICATED=true) says so.

A configuration that cannot be used (an invalid setting, a ``GPU_CREDITS_<NAME>_FILE`` that
cannot be read, an unreadable key file, a data directory that cannot be made) is one line on
stderr and exit 2, before anything starts; every ``GPU_CREDITS_*`` variable nothing reads is
one warning line on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import logging
import logging.config
import os
import sys
import urllib.parse
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from app.keys import KeyFileError, KeyRecord, Scope, load_last_used, load_records
from app.settings import (
    ENV_PREFIX,
    LEGACY_DATA_DIR,
    DataDirError,
    SecretFileError,
    Settings,
    unknown_variable_warnings,
)
from app.version import package_version

if TYPE_CHECKING:
    from app.storage.base import MigrationStatus

log = logging.getLogger("app.cli")

PROG: Final = "gpu-credits"
EXIT_PENDING: Final = 1
EXIT_FAILED: Final = 1
EXIT_CANNOT: Final = 2
DATA_DIR_HELP: Final = (
    "directory of the SQLite database and the API key file (default: GPU_CREDITS_DATA_DIR, "
    "else $XDG_DATA_HOME/gpu-credits, else ~/.local/share/gpu-credits)"
)


class ConfigurationError(Exception):
    """The configuration cannot be used: ``main`` prints the message (one line, no
    traceback, no secret) and exits 2."""


# -- configuration -------------------------------------------------------------------------


def _load_settings(args: argparse.Namespace | None = None, **overrides: Any) -> Settings:
    data_dir = getattr(args, "data_dir", None)
    if data_dir is not None:
        overrides["data_dir"] = data_dir
    try:
        settings = Settings(**overrides)
    except (SecretFileError, DataDirError) as exc:
        raise ConfigurationError(str(exc)) from None
    except ValidationError as exc:
        # Only where and what: pydantic's own text quotes the input, database URL included.
        issues = []
        for error in exc.errors(include_url=False, include_input=False):
            message = error["msg"].removeprefix("Value error, ")
            where = "_".join(str(part) for part in error["loc"]).upper()
            issues.append(f"{ENV_PREFIX}{where}: {message}" if where else message)
        raise ConfigurationError("invalid configuration: " + "; ".join(issues)) from None
    _refuse_legacy_data(settings)
    return settings


def _refuse_legacy_data(settings: Settings) -> None:
    """Earlier releases kept their data in ``./data`` by default, wherever the command ran.
    With the default data directory now elsewhere, such data must not be silently left
    behind (a service would start on an empty ledger, with no keys): when the default is
    in force and holds nothing, but ``./data`` holds what it would, refuse and say how to
    go on."""
    if "data_dir" in settings.model_fields_set:
        return
    wanted = []
    if settings.storage == "sqlite":
        wanted.append(settings.sqlite_file)
    if settings.api_keys_file is None:
        wanted.append("api-keys.json")
    legacy = LEGACY_DATA_DIR.absolute()
    if legacy.resolve() == settings.data_dir.resolve():
        return
    found = [name for name in wanted if (legacy / name).is_file()]
    if found and not any((settings.data_dir / name).exists() for name in wanted):
        raise ConfigurationError(
            f"{legacy} holds {' and '.join(found)}, where earlier releases kept their data "
            f"by default; the default data directory is now {settings.data_dir}: move the "
            f"files there, or use this directory with --data-dir {legacy} (or "
            "GPU_CREDITS_DATA_DIR)"
        )


def _warn_unknown_variables() -> None:
    for line in unknown_variable_warnings(os.environ):
        print(f"{PROG}: warning: {line}", file=sys.stderr)


def _records(path: Path) -> list[KeyRecord]:
    try:
        return load_records(path)
    except KeyFileError as exc:
        raise ConfigurationError(str(exc)) from None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- serve ---------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {
        k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None
    }
    if args.insecure_no_auth:
        overrides["allow_unauthenticated"] = True
    settings = _load_settings(args, **overrides)
    _prepare_data_dir(settings)
    has_keys = len(_records(settings.keys_path)) > 0
    logging_config = _configure_logging(settings)
    if not has_keys and not is_loopback(settings.host):
        if not settings.allow_unauthenticated:
            print(
                f"refusing to listen on {settings.host}: no API keys are configured "
                f"({settings.keys_path}), so anyone who can reach the service could grant "
                "credits. Create a key with `gpu-credits keys create`, listen on 127.0.0.1, "
                "or pass --insecure-no-auth to run without authentication.",
                file=sys.stderr,
            )
            return EXIT_CANNOT
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
        return EXIT_CANNOT
    import uvicorn

    from app.api.http_protocol import protocol_factory

    if workers > 1:
        # Each worker process builds its app from the environment (uvicorn's factory mode):
        # a --data-dir given here must reach them there too.
        os.environ["GPU_CREDITS_DATA_DIR"] = str(settings.data_dir)
    # One worker: run the app built here. Several: each worker process builds its own from
    # the same environment (uvicorn's factory mode).
    target: Any = served_app(settings) if workers == 1 else "app.cli:served_app"
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


class StartupFailureInOneLine:
    """The service as ``serve`` runs it: when startup fails (the SQLite file is in use by
    another process, PostgreSQL refuses the connection, a newer release migrated the
    database), uvicorn logs one line saying why instead of Starlette's traceback."""

    def __init__(self, app: Any, settings: Settings) -> None:
        self._app = app
        self._settings = settings

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self._app(scope, receive, send)
            return

        async def send_in_one_line(message: Any) -> None:
            failure = sys.exc_info()[1]  # what Starlette's lifespan is handling
            if message["type"] == "lifespan.startup.failed" and isinstance(failure, Exception):
                reason = _safe(failure, self._settings)
                message = {**message, "message": f"{PROG}: cannot start: {reason}"}
            await send(message)

        await self._app(scope, receive, send_in_one_line)


def served_app(settings: Settings | None = None) -> StartupFailureInOneLine:
    """What ``serve`` runs, for one worker or (read from the environment) each of several."""
    from app.main import create_app

    settings = settings or Settings()
    return StartupFailureInOneLine(create_app(settings), settings)


def _prepare_data_dir(settings: Settings) -> None:
    """The SQLite backend's directory must be one it can use: made here if missing, so that
    a wrong path is one line now rather than a failed startup."""
    if settings.storage != "sqlite":
        return
    where = settings.data_dir
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(
            f"data directory {where} cannot be made: {exc.strerror or exc}"
        ) from None
    if not os.access(where, os.W_OK | os.X_OK):
        raise ConfigurationError(f"data directory {where} is not writable by this user")


def _configure_logging(settings: Settings) -> dict[str, Any]:
    """JSON lines (or text: GPU_CREDITS_LOG_FORMAT) on stderr, uvicorn's lines included."""
    from app.logs import log_config

    config = log_config(settings.log_level, settings.log_format, settings.log_flush_ms / 1000)
    logging.config.dictConfig(config)
    return config


# -- keys ----------------------------------------------------------------------------------


def _keys(args: argparse.Namespace) -> int:
    from app.keys import create_key, revoke_key

    settings = _load_settings(args)
    path = settings.keys_path
    if args.keys_command == "create":
        scopes = tuple(dict.fromkeys(Scope(s) for s in args.scope))
        if not args.account_prefix and any(
            q is not None
            for q in (args.max_accounts, args.max_live_grants, args.max_idempotency_keys)
        ):
            print(
                f"{PROG}: quotas apply to a tenant, the accounts of one prefix: give "
                "--account-prefix",
                file=sys.stderr,
            )
            return EXIT_CANNOT
        _records(path)  # a broken key file is a configuration error, before anything
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
        return _list_keys(path, args.json)
    _records(path)
    if revoke_key(path, args.key_id):
        print(f"revoked {args.key_id}", file=sys.stderr)
        return 0
    print(f"{PROG}: no key {args.key_id} in {path}", file=sys.stderr)
    return EXIT_FAILED


def _when(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _list_keys(path: Path, as_json: bool) -> int:
    """A table (a header, then one key a line, never a secret), or JSON lines."""
    records = _records(path)
    try:
        used = load_last_used(path)
    except KeyFileError as exc:
        print(f"{PROG}: warning: {exc}; last uses are unknown", file=sys.stderr)
        used = {}
    if as_json:
        for r in records:
            quotas = {
                name: value
                for name, value in (
                    ("max_accounts", r.max_accounts),
                    ("max_live_grants", r.max_live_grants),
                    ("max_idempotency_keys", r.max_idempotency_keys),
                )
                if value is not None
            }
            row = {
                "key_id": r.key_id,
                "name": r.name,
                "scopes": [s.value for s in r.scopes],
                "account_prefix": r.account_prefix,
                "created_at": _when(r.created_at_s),
                "last_used_at": _when(used.get(r.key_id)),
                "quotas": quotas,
            }
            print(json.dumps(row, ensure_ascii=False))
        return 0
    header = ("KEY ID", "NAME", "SCOPES", "ACCOUNTS", "CREATED", "LAST USED")
    table = [header] + [
        (
            r.key_id,
            r.name,
            ",".join(s.value for s in r.scopes),
            f"{r.account_prefix}*",
            _when(r.created_at_s) or "",
            _when(used.get(r.key_id)) or "never",
        )
        for r in records
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header) - 1)]
    for line in table:
        cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=False)]
        print("  ".join([*cells, line[-1]]))
    if not records:
        print(f"no keys in {path}", file=sys.stderr)
    return 0


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# -- migrate -------------------------------------------------------------------------------


def _migrate(args: argparse.Namespace) -> int:
    """``gpu-credits migrate [--status]``: see its --help for the exit codes."""
    from app.storage import location, open_store

    settings = _load_settings(args)
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
    if args.status:
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
    return " ".join(text.split())


# -- check and export (offline) ------------------------------------------------------------


def _check(args: argparse.Namespace) -> int:
    from app.cli_offline import check
    from app.storage import open_snapshot
    from app.storage.base import SnapshotError

    settings = _load_settings(args)

    async def run() -> int:
        async with open_snapshot(settings) as reader:
            report = await check(reader, settings.limits(), args.prefix, print)
            what = (
                f"accounts: {report.accounts}, ledger entries: {report.entries}, "
                f"checkpoints: {report.checkpoints}"
            )
            if report.problems:
                print(
                    f"{PROG}: {reader.where}: problems: {report.problems}, accounts "
                    f"affected: {len(report.failed_accounts)} ({what})",
                    file=sys.stderr,
                )
                return EXIT_FAILED
            print(f"{reader.where}: {what}; every account replays and reconciles exactly")
            return 0

    try:
        return asyncio.run(run())
    except SnapshotError as exc:
        raise ConfigurationError(_safe(exc, settings)) from None


def _export(args: argparse.Namespace) -> int:
    from app.cli_offline import AtomicOutput, UnknownAccount, export
    from app.storage import open_snapshot
    from app.storage.base import SnapshotError

    settings = _load_settings(args)

    async def run() -> int:
        async with open_snapshot(settings) as reader:
            window = settings.lateness_window
            if args.output is None:
                return await export(reader, args.account_id, args.format, sys.stdout, window)
            with AtomicOutput(Path(args.output)) as out:
                return await export(reader, args.account_id, args.format, out, window)

    try:
        count = asyncio.run(run())
    except SnapshotError as exc:
        raise ConfigurationError(_safe(exc, settings)) from None
    except UnknownAccount as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    where = f" to {args.output}" if args.output else ""
    print(f"exported {count} entries of {args.account_id!r}{where}", file=sys.stderr)
    return 0


# -- client commands -----------------------------------------------------------------------


def _client(args: argparse.Namespace) -> int:
    from app import cli_client as client

    try:
        where = client.target(args.url, args.key, args.key_file, args.timeout)
        path = client.account_path(args.account_id)
        if args.command == "grant":
            metadata = client.metadata_pairs(args.metadata)
            body = client.grant_body(
                args.amount, args.timestamp, args.expiry, args.resource, args.name, metadata
            )
            return client.write(where, f"{path}/grants", body, args.idempotency_key, "grant")
        if args.command == "consume":
            body = client.consume_body(args.amount, args.timestamp, args.resource)
            return client.write(
                where, f"{path}/consumptions", body, args.idempotency_key, "consumption"
            )
        if args.command == "balance":
            params: dict[str, int | str] = {}
            if args.timestamp is not None:
                params["timestamp"] = args.timestamp
            if args.resource is not None:
                params["resource"] = args.resource
            return client.read(where, f"{path}/balance", params)
        if args.all:
            return client.read_all_ledger(where, args.account_id, args.after)
        return client.read(where, f"{path}/ledger", {"after": args.after, "limit": args.limit})
    except client.ClientUsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return client.EXIT_USAGE


# -- the parser ----------------------------------------------------------------------------


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and examples as written; option help wrapped."""


def _add_data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", metavar="DIR", help=DATA_DIR_HELP)


def _add_client_options(parser: argparse.ArgumentParser) -> None:
    from app.cli_client import DEFAULT_TIMEOUT_S, DEFAULT_URL

    group = parser.add_argument_group("service")
    group.add_argument(
        "--url",
        help=f"the service's base URL (default: GPU_CREDITS_URL, else {DEFAULT_URL})",
    )
    group.add_argument(
        "--key",
        help="API key (default: GPU_CREDITS_KEY); on a command line it is visible to other "
        "users in ps, so prefer --key-file or the environment",
    )
    group.add_argument(
        "--key-file",
        metavar="PATH",
        help="read the API key from this file (default: GPU_CREDITS_KEY_FILE)",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"per request (default {DEFAULT_TIMEOUT_S:g})",
    )


CLIENT_EXITS: Final = """\
exit codes: 0 the answer (JSON) is on stdout; 1 the service refused: its problem document
is on stdout and one line on stderr says why; 2 usage or configuration error; 3 no answer."""
WRITE_NOTE: Final = """\
The request carries an Idempotency-Key (--idempotency-key, or a random one) and is sent
again, with the same key, after no answer or a 503 (3 attempts): the service applies it
once. If no answer ever comes, the command prints the key: repeat it with that key to
apply the write at most once."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        formatter_class=_Formatter,
        description="A ledger of expiring GPU compute credits: run the service, manage its "
        "API keys and database,\nand call a running service.",
        epilog="Run `gpu-credits COMMAND --help` for each command's options.\n"
        "Configuration: GPU_CREDITS_* variables (see README, Configuration); flags win.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to do"
    )

    # serve ------------------------------------------------------------------------------
    serve = commands.add_parser(
        "serve",
        formatter_class=_Formatter,
        help="run the HTTP service",
        description="Run the HTTP service (uvicorn). With no API key configured it listens "
        "on loopback only.\nStorage, limits and the rest come from GPU_CREDITS_* variables.",
        epilog="exit codes: 2 configuration error (one line on stderr); 3 the service could "
        "not start\n(its storage refused: in use by another process, unreachable, or migrated "
        "by a newer release).\nStopped by SIGTERM or SIGINT, it shuts down gracefully; then one "
        "process ends by that\nsignal, as uvicorn does (a shell shows 143 or 130), and "
        "--workers N ends with 0.",
    )
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
        help="worker processes, 1 to 64 (default 1; more than 1 needs storage=postgres)",
    )
    _add_data_dir(serve)

    # migrate ----------------------------------------------------------------------------
    migrate = commands.add_parser(
        "migrate",
        formatter_class=_Formatter,
        help="apply the database's pending schema migrations",
        description="Apply the configured database's pending schema migrations and exit (the "
        "service also applies them\nwhen it starts). On SQLite, not while a service holds "
        "the file.",
        epilog="exit codes: 0 the schema is current; 1 (--status) migrations are pending; 2 "
        "cannot tell or cannot\napply them (unreachable, in use, or migrated by a newer "
        "release).",
    )
    migrate.add_argument(
        "--status",
        action="store_true",
        help="only show the schema version, the known and the pending migrations; changes "
        "nothing and takes no lock",
    )
    _add_data_dir(migrate)

    # keys -------------------------------------------------------------------------------
    keys = commands.add_parser(
        "keys",
        formatter_class=_Formatter,
        help="manage API keys",
        description="Manage the API keys in GPU_CREDITS_API_KEYS_FILE (default: "
        "<data dir>/api-keys.json).\nA running service picks changes up within 2 s.",
    )
    key_commands = keys.add_subparsers(
        dest="keys_command", required=True, metavar="ACTION", help="what to do with the keys"
    )
    create = key_commands.add_parser(
        "create",
        formatter_class=_Formatter,
        help="create a key; it is printed only once",
        description="Create an API key: the key is printed once on stdout; only the hash of "
        "its secret is stored.",
        epilog="example: gpu-credits keys create --name scheduler-a --scope credits:consume "
        "--scope credits:read \\\n           --account-prefix team-a:\n"
        "exit codes: 0 created (the key on stdout); 2 usage or configuration error.",
    )
    create.add_argument("--name", required=True, help="who or what uses the key (shown by list)")
    create.add_argument(
        "--scope",
        action="append",
        required=True,
        choices=[s.value for s in Scope],
        help="what the key may do; repeat for several scopes",
    )
    create.add_argument(
        "--account-prefix",
        default="",
        metavar="PREFIX",
        help="only account ids starting with this, the key's tenant (default: all accounts)",
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
    _add_data_dir(create)
    listing = key_commands.add_parser(
        "list",
        formatter_class=_Formatter,
        help="list keys: ids, names, scopes, creation and last use (never secrets)",
        description="List the API keys: id, name, scopes, the accounts they may touch, when "
        "each was created and last\nused (UTC). A running service records a key's use when "
        "it authenticates, to within about a minute.",
        epilog="exit codes: 0 listed; 2 configuration error (the key file cannot be read).",
    )
    listing.add_argument(
        "--json", action="store_true", help="one JSON object a line instead of a table"
    )
    _add_data_dir(listing)
    revoke = key_commands.add_parser(
        "revoke",
        formatter_class=_Formatter,
        help="revoke a key by its id",
        description="Revoke an API key: a running service refuses it within 2 s.",
        epilog="exit codes: 0 revoked; 1 no such key; 2 configuration error.",
    )
    revoke.add_argument("key_id", metavar="KEY_ID", help="the key's id, as keys list shows it")
    _add_data_dir(revoke)

    # check ------------------------------------------------------------------------------
    check = commands.add_parser(
        "check",
        formatter_class=_Formatter,
        help="verify the database offline: replay and reconcile every account",
        description="Verify the configured database offline, read-only, from one snapshot "
        "(the service may run):\nthe database's own integrity; then for every account, its "
        "ledger's order and arithmetic,\na replay of its writes from an empty account that "
        "must give every recorded effect, expiration\nand checkpoint, and the stored state "
        "(balance, debt, live grants) reconciled with the replay.\nEach problem is one "
        "line on stdout.",
        epilog="exit codes: 0 everything reconciles; 1 problems were found (listed); 2 the "
        "database cannot be read\n(missing, unreachable, or its schema is not this "
        "release's: run gpu-credits migrate).",
    )
    check.add_argument(
        "--prefix", default="", help="only the accounts whose id starts with this (default: all)"
    )
    _add_data_dir(check)

    # export -----------------------------------------------------------------------------
    export = commands.add_parser(
        "export",
        formatter_class=_Formatter,
        help="write an account's ledger as JSON lines or CSV, from the database",
        description="Write one account's ledger, every entry in effective order, read offline "
        "from the configured\ndatabase (read-only, one snapshot; the service may run). "
        "JSON lines: each entry as the API's\nlistLedgerEntries shows it, with account_id. "
        "CSV: a header, then one row per entry;\nlists and objects as JSON, absent values "
        "empty.",
        epilog="example: gpu-credits export team-a:job-42 --format csv --output ledger.csv\n"
        "exit codes: 0 exported; 1 no such account; 2 the database cannot be read.",
    )
    export.add_argument("account_id", metavar="ACCOUNT", help="the account's id")
    export.add_argument("--format", choices=("jsonl", "csv"), default="jsonl", help="default jsonl")
    export.add_argument(
        "--output",
        metavar="FILE",
        help="write to FILE, whole or not at all (default: stdout)",
    )
    _add_data_dir(export)

    # client commands --------------------------------------------------------------------
    grant = commands.add_parser(
        "grant",
        formatter_class=_Formatter,
        help="grant credits to an account through a running service",
        description="Grant credits to an account (POST /v1/accounts/ACCOUNT/grants; scope "
        f"credits:grant).\n{WRITE_NOTE}",
        epilog="example: gpu-credits grant team-a:job-42 --amount 100 --timestamp 0 --expiry "
        f"10 --resource h100\n{CLIENT_EXITS}",
    )
    grant.add_argument("account_id", metavar="ACCOUNT", help="the account's id")
    grant.add_argument("--amount", type=int, required=True, help="credits to grant")
    grant.add_argument("--timestamp", type=int, required=True, help="when the grant starts")
    grant.add_argument(
        "--expiry", type=int, required=True, help="when its credits expire (exclusive)"
    )
    grant.add_argument(
        "--resource",
        action="append",
        metavar="CLASS",
        help="a GPU class the credits are valid on; repeat for several (default: any)",
    )
    grant.add_argument("--name", help="a label for the grant")
    grant.add_argument(
        "--metadata",
        action="append",
        metavar="KEY=VALUE",
        help="a metadata pair for the grant; repeat for several",
    )
    grant.add_argument(
        "--idempotency-key", metavar="KEY", help="retry key (default: a new random one)"
    )
    _add_client_options(grant)

    consume = commands.add_parser(
        "consume",
        formatter_class=_Formatter,
        help="report usage of an account's credits through a running service",
        description="Consume credits (POST /v1/accounts/ACCOUNT/consumptions; scope "
        f"credits:consume).\n{WRITE_NOTE}",
        epilog="example: gpu-credits consume team-a:job-42 --amount 30 --timestamp 5 "
        f"--resource h100\n{CLIENT_EXITS}",
    )
    consume.add_argument("account_id", metavar="ACCOUNT", help="the account's id")
    consume.add_argument("--amount", type=int, required=True, help="credits used")
    consume.add_argument("--timestamp", type=int, required=True, help="when they were used")
    consume.add_argument("--resource", metavar="CLASS", help="the GPU class it ran on")
    consume.add_argument(
        "--idempotency-key", metavar="KEY", help="retry key (default: a new random one)"
    )
    _add_client_options(consume)

    balance = commands.add_parser(
        "balance",
        formatter_class=_Formatter,
        help="read an account's balance through a running service",
        description="Read an account's balance (GET /v1/accounts/ACCOUNT/balance; scope "
        "credits:read). Reads change nothing.",
        epilog=f"example: gpu-credits balance team-a:job-42 --timestamp 12\n{CLIENT_EXITS}",
    )
    balance.add_argument("account_id", metavar="ACCOUNT", help="the account's id")
    balance.add_argument(
        "--timestamp",
        type=int,
        help="at this time: projected at or after the account's clock, as of it before "
        "(default: the clock)",
    )
    balance.add_argument("--resource", metavar="CLASS", help="for one GPU class (default: totals)")
    _add_client_options(balance)

    ledger = commands.add_parser(
        "ledger",
        formatter_class=_Formatter,
        help="read an account's ledger through a running service",
        description="Read an account's ledger history (GET /v1/accounts/ACCOUNT/ledger; scope "
        "credits:read):\none page, or every page with --all.",
        epilog=f"example: gpu-credits ledger team-a:job-42 --all\n{CLIENT_EXITS}",
    )
    ledger.add_argument("account_id", metavar="ACCOUNT", help="the account's id")
    ledger.add_argument(
        "--after",
        type=int,
        default=0,
        metavar="SEQUENCE",
        help="start after this entry (a page's next_after; default: the first)",
    )
    ledger.add_argument(
        "--limit", type=int, default=100, metavar="N", help="page size, 1 to 1000 (default 100)"
    )
    ledger.add_argument(
        "--all", action="store_true", help="follow every page and print them as one"
    )
    _add_client_options(ledger)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    _warn_unknown_variables()
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "migrate":
            return _migrate(args)
        if args.command == "keys":
            return _keys(args)
        if args.command == "check":
            return _check(args)
        if args.command == "export":
            return _export(args)
        return _client(args)
    except ConfigurationError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_CANNOT
    except KeyFileError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_CANNOT
    except BrokenPipeError:  # `gpu-credits ... | head`: the reader left, as it may
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except OSError as exc:  # a file that cannot be written (the key file, an export)
        print(f"{PROG}: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    raise SystemExit(main())
