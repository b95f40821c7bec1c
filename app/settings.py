"""All configuration in one place: environment variables prefixed ``GPU_CREDITS_``.

Every setting has a safe default, so ``gpu-credits serve`` with no configuration listens on
loopback only and keeps its data durably in SQLite under the default data directory,
``$XDG_DATA_HOME/gpu-credits`` (``~/.local/share/gpu-credits``): the same directory whichever
directory a command runs in, so ``gpu-credits keys create`` writes where ``serve`` reads. A
relative ``GPU_CREDITS_DATA_DIR`` (or ``--data-dir``) is taken from the working directory and
made absolute once, when the settings are read.

Secret settings (the ``SecretStr`` ones: the database URL and password) can also be read
from a file named by ``GPU_CREDITS_<NAME>_FILE`` (``SecretFiles``), so that no secret has to
sit in the environment: that is how container secrets (``/run/secrets/...``) reach it.
"""

from __future__ import annotations

import difflib
import os
import typing
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from app.quotas import Quota
from app.service.limits import DEFAULT_TENANT_QUOTA, Limits

_LIMITS = Limits()
ENV_PREFIX: Final = "GPU_CREDITS_"
FILE_SUFFIX: Final = "_FILE"
# A secret is a password or a URL: anything larger is not the file that was meant (and a
# path such as /dev/zero must not be read to the end).
SECRET_FILE_MAX_BYTES: Final = 64 * 1024


DATA_DIR_NAME: Final = "gpu-credits"
# Where earlier releases kept their data by default: ``data`` under the working directory.
LEGACY_DATA_DIR: Final = Path("data")
# GPU_CREDITS_* variables that are not settings of the service but are read by this project:
# the client commands' server and key (``gpu-credits grant ...``), and the test suite's.
OTHER_VARIABLES: Final = frozenset(
    {
        "GPU_CREDITS_URL",
        "GPU_CREDITS_KEY",
        "GPU_CREDITS_KEY_FILE",
        "GPU_CREDITS_REQUIRE_BROWSER",  # tests: fail rather than skip without Chromium
        "GPU_CREDITS_CHROMIUM",  # tests: the Chromium to drive
        "GPU_CREDITS_REQUIRE_NODE",  # tests: fail rather than skip without Node.js
    }
)


class DataDirError(Exception):
    """No default data directory can be named (no home directory): one line for the CLI."""


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/gpu-credits``, else ``~/.local/share/gpu-credits`` (the XDG base
    directory convention): it does not depend on the working directory."""
    base = os.environ.get("XDG_DATA_HOME", "")
    if base and Path(base).is_absolute():  # the specification ignores a relative value
        return Path(base) / DATA_DIR_NAME
    try:
        home = Path.home()
    except RuntimeError:
        raise DataDirError(
            "no home directory for the default data directory: set GPU_CREDITS_DATA_DIR "
            "or pass --data-dir"
        ) from None
    return home / ".local" / "share" / DATA_DIR_NAME


class SecretFileError(Exception):
    """A ``GPU_CREDITS_<NAME>_FILE`` that cannot be used; the message is one line that names
    the variable, the path and why (never the file's content)."""


def read_secret_file(variable: str, path: str) -> str:
    """The secret in ``path``: its UTF-8 text less trailing newlines (``echo pw > file``
    leaves one; the postgres image's ``POSTGRES_PASSWORD_FILE`` drops them the same way)."""
    if not path:
        raise SecretFileError(f"{variable} is set but empty: give a file's path or unset it")
    try:
        with open(path, "rb") as file:
            data = file.read(SECRET_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise SecretFileError(
            f"{variable}={path}: cannot read the file: {exc.strerror or exc}"
        ) from None
    if len(data) > SECRET_FILE_MAX_BYTES:
        raise SecretFileError(
            f"{variable}={path}: the file is larger than {SECRET_FILE_MAX_BYTES} bytes"
        )
    try:
        text = data.decode("utf-8").rstrip("\n")
    except UnicodeDecodeError:
        raise SecretFileError(f"{variable}={path}: the file is not UTF-8 text") from None
    if not text:
        raise SecretFileError(f"{variable}={path}: the file is empty")
    return text


def _is_secret(field: FieldInfo) -> bool:
    return field.annotation is SecretStr or SecretStr in typing.get_args(field.annotation)


class SecretFiles(PydanticBaseSettingsSource):
    """``GPU_CREDITS_<NAME>_FILE=path`` for every secret setting: the value is read from the
    file (``read_secret_file``). Variable names match case-insensitively, as the plain
    variables do. Giving both ``GPU_CREDITS_<NAME>`` and its ``_FILE`` is an error: which
    one wins would be a guess."""

    def __init__(
        self, settings_cls: type[BaseSettings], environ: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(settings_cls)
        source = os.environ if environ is None else environ
        self._environ = {name.upper(): value for name, value in source.items()}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        raise NotImplementedError  # not called: __call__ reads every secret field itself

    def __call__(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, field in self.settings_cls.model_fields.items():
            if not _is_secret(field):
                continue
            variable = f"{ENV_PREFIX}{name}".upper()
            path = self._environ.get(variable + FILE_SUFFIX)
            if path is None:
                continue
            if variable in self._environ:
                raise SecretFileError(
                    f"{variable} and {variable}{FILE_SUFFIX} are both set: give one of them"
                )
            values[name] = read_secret_file(variable + FILE_SUFFIX, path)
        return values


def _has_password(url: str) -> bool:
    parts = urllib.parse.urlsplit(url)
    return parts.password is not None or "password" in urllib.parse.parse_qs(parts.query)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Arguments (the command line's flags) first, then the environment and the
        ``_FILE`` variables (which exclude each other, so their order does not matter)."""
        return (init_settings, env_settings, SecretFiles(settings_cls))

    host: str = Field("127.0.0.1", description="Address to listen on (loopback by default).")
    port: int = Field(8000, ge=0, le=65535, description="TCP port to listen on.")
    storage: Literal["sqlite", "memory", "postgres"] = Field(
        "sqlite",
        description=(
            "sqlite: durable, one process (the default). memory: forgets everything on exit. "
            "postgres: durable and shared by several processes and hosts (needs database_url)."
        ),
    )
    database_url: SecretStr | None = Field(
        None,
        description=(
            "postgresql://user[:password]@host:port/dbname, for storage=postgres "
            "(or GPU_CREDITS_DATABASE_URL_FILE: a file that holds it)."
        ),
    )
    database_password: SecretStr | None = Field(
        None,
        description=(
            "The password for database_url, which then has none; best given as "
            "GPU_CREDITS_DATABASE_PASSWORD_FILE (a file that holds it, e.g. a container "
            "secret), so that it is not in the environment."
        ),
    )
    pg_min_connections: int = Field(2, ge=1, le=100, description="Pool size per process, min.")
    pg_max_connections: int = Field(20, ge=1, le=500, description="Pool size per process, max.")
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description=(
            "Directory of the SQLite database and the API key file (default: "
            "$XDG_DATA_HOME/gpu-credits, else ~/.local/share/gpu-credits). A relative path "
            "is taken from the working directory."
        ),
    )
    sqlite_file: str = Field("gpu-credits.sqlite3", description="File name under data_dir.")
    idempotency_ttl_hours: float = Field(
        24.0, gt=0, le=24 * 365, description="How long Idempotency-Key records are kept."
    )
    api_keys_file: Path | None = Field(
        None, description="JSON file of API key hashes (default: <data_dir>/api-keys.json)."
    )
    allow_unauthenticated: bool = Field(
        False,
        description="Serve without API keys on a non-loopback address (warns loudly).",
    )
    lateness_window: int = Field(
        0,
        ge=0,
        le=2**53 - 1,
        description=(
            "How far behind an account's clock a write may still arrive, in timestamp units "
            "(SPEC section 6). 0: writes in timestamp order only. An account can override it "
            "(PUT /v1/accounts/{account_id}/settings)."
        ),
    )
    # -- limits: every one bounds memory, time or blast radius; see README "Limits" --------
    # The service's bounds take their defaults from app.service.limits, where they are defined.
    max_accounts: int = Field(_LIMITS.max_accounts, ge=1, le=10**8, description="Accounts held.")
    max_live_grants_per_account: int = Field(
        _LIMITS.max_live_grants_per_account,
        ge=1,
        le=1_000_000,
        description="Live (unexpired, unused) grants per account.",
    )
    max_idempotency_keys: int = Field(
        _LIMITS.max_idempotency_keys,
        ge=1,
        le=10**8,
        description="Idempotency-Keys held within their retention.",
    )
    max_live_grants: int = Field(
        _LIMITS.max_live_grants,
        ge=1,
        le=10**9,
        description=(
            "Live grants over all accounts (about 190 bytes each in memory; on postgres, "
            "what one process caches)."
        ),
    )
    tenant_max_accounts: int = Field(
        DEFAULT_TENANT_QUOTA.max_accounts,
        ge=1,
        le=10**8,
        description="Accounts per tenant (API key account prefix).",
    )
    tenant_max_live_grants: int = Field(
        DEFAULT_TENANT_QUOTA.max_live_grants,
        ge=1,
        le=10**9,
        description="Live grants per tenant (embedded backends).",
    )
    tenant_max_idempotency_keys: int = Field(
        DEFAULT_TENANT_QUOTA.max_idempotency_keys,
        ge=1,
        le=10**8,
        description="Idempotency-Keys per tenant (embedded backends).",
    )
    max_body_bytes: int = Field(
        64 * 1024, ge=1024, le=64 * 1024 * 1024, description="Largest request body (413)."
    )
    max_batch_body_bytes: int = Field(
        4 * 1024 * 1024,
        ge=1024,
        le=256 * 1024 * 1024,
        description="Largest POST /v1/batch body (413); 10,000 operations take about 1 MiB.",
    )
    max_event_stream_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        le=4 * 1024 * 1024 * 1024,
        description=(
            "Largest POST /v1/events body: a Content-Length over it is 413; a stream that "
            "passes it is stopped at that line."
        ),
    )
    max_event_line_bytes: int = Field(
        128 * 1024,
        ge=1024,
        le=16 * 1024 * 1024,
        description="Longest line of a POST /v1/events body; a longer one stops the stream.",
    )
    max_event_lines: int = Field(
        100_000,
        ge=1,
        le=10_000_000,
        description="Lines (not blank) per POST /v1/events request; one more stops the stream.",
    )
    max_url_bytes: int = Field(8 * 1024, ge=256, le=64 * 1024, description="Longest URL (414).")
    max_header_bytes: int = Field(
        16 * 1024, ge=1024, le=256 * 1024, description="Largest request header block (431)."
    )
    header_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Time allowed to send the request headers (408)."
    )
    body_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Time allowed to send a request body (408)."
    )
    limit_concurrency: int = Field(
        2048, ge=1, le=100_000, description="Connections and requests in flight before 503."
    )
    max_connections_per_client: int = Field(
        256,
        ge=1,
        le=100_000,
        description=(
            "Open connections one client address (IPv6: one /64) may hold; one more is "
            "answered 429 and closed. Behind a reverse proxy every connection comes from the "
            "proxy: set it to limit_concurrency there."
        ),
    )
    timeout_keep_alive_s: int = Field(
        5, ge=1, le=3600, description="Idle keep-alive connections are closed after this."
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    log_format: Literal["json", "text"] = Field(
        "json",
        description=(
            "json: one JSON object per log line (for log collectors); text: human-readable "
            "lines, for development."
        ),
    )
    log_flush_ms: int = Field(
        100,
        ge=0,
        le=10_000,
        description=(
            "Log lines below WARNING are written together at most this often (one write for "
            "many lines); WARNING and worse at once, and everything at exit. A process killed "
            "outright (SIGKILL) loses the lines of this last interval at most. 0: every line is "
            "written as it is logged."
        ),
    )
    access_log: bool = Field(
        True,
        description=(
            "Log one line per request (method, route, account, status, latency, key id, "
            "request id) on the app.requests logger, at INFO (see README, Logs, for what it "
            "costs): false turns it off."
        ),
    )
    metrics: bool = Field(
        True, description="Count requests and operations and serve them at GET /metrics."
    )
    metrics_public: bool = Field(
        False,
        description=(
            "Serve GET /metrics without an API key. By default it needs a key with the scope "
            "metrics:read (when keys are configured)."
        ),
    )

    @field_validator("data_dir", "api_keys_file", mode="after")
    @classmethod
    def _absolute(cls, path: Path | None) -> Path | None:
        """Made absolute once, here: every message and every later use names one place,
        whatever directory the process is in later."""
        return None if path is None else path.expanduser().absolute()

    @model_validator(mode="after")
    def _postgres_needs_a_url(self) -> Settings:
        if self.storage == "postgres" and self.database_url is None:
            raise ValueError(
                "storage=postgres needs GPU_CREDITS_DATABASE_URL (or GPU_CREDITS_DATABASE_URL_FILE)"
            )
        if (
            self.database_url is not None
            and self.database_password is not None
            and _has_password(self.database_url.get_secret_value())
        ):
            raise ValueError(
                "the database password is given twice, in GPU_CREDITS_DATABASE_URL and in "
                "GPU_CREDITS_DATABASE_PASSWORD(_FILE): keep one"
            )
        if self.pg_min_connections > self.pg_max_connections:
            raise ValueError("pg_min_connections must not exceed pg_max_connections")
        return self

    def database_url_value(self) -> str:
        """The URL to connect with: ``database_url``, with ``database_password`` put in
        (percent-encoded: any character may be in a password) when it is given apart."""
        assert self.database_url is not None
        url = self.database_url.get_secret_value()
        if self.database_password is None:
            return url
        parts = urllib.parse.urlsplit(url)
        user = parts.username or ""
        hostport = parts.netloc.rpartition("@")[2]
        password = urllib.parse.quote(self.database_password.get_secret_value(), safe="")
        netloc = f"{user}:{password}@{hostport}"
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))

    def limits(self) -> Limits:
        return Limits(
            max_accounts=self.max_accounts,
            max_live_grants_per_account=self.max_live_grants_per_account,
            max_idempotency_keys=self.max_idempotency_keys,
            max_live_grants=self.max_live_grants,
            idempotency_ttl_s=self.idempotency_ttl_hours * 3600.0,
            tenant_quota=self.tenant_quota(),
            lateness_window=self.lateness_window,
        )

    def tenant_quota(self) -> Quota:
        """What a tenant may hold unless one of its keys says otherwise."""
        return Quota(
            max_accounts=self.tenant_max_accounts,
            max_live_grants=self.tenant_max_live_grants,
            max_idempotency_keys=self.tenant_max_idempotency_keys,
        )

    @property
    def keys_path(self) -> Path:
        return self.api_keys_file or self.data_dir / "api-keys.json"

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / self.sqlite_file


def variable_names() -> frozenset[str]:
    """Every GPU_CREDITS_* variable this release reads: one per setting, a ``_FILE`` variant
    per secret setting, and ``OTHER_VARIABLES``."""
    names = set(OTHER_VARIABLES)
    for name, field in Settings.model_fields.items():
        variable = f"{ENV_PREFIX}{name}".upper()
        names.add(variable)
        if _is_secret(field):
            names.add(variable + FILE_SUFFIX)
    return frozenset(names)


def unknown_variable_warnings(environ: Mapping[str, str]) -> list[str]:
    """One line for each GPU_CREDITS_* variable of ``environ`` that nothing reads (a misspelt
    one would otherwise be ignored in silence), with the closest known name when one is
    close. Names match case-insensitively, as the settings read them."""
    known = variable_names()
    secrets = sorted(
        f"{ENV_PREFIX}{name}{FILE_SUFFIX}".upper()
        for name, field in Settings.model_fields.items()
        if _is_secret(field)
    )
    # Compared without the prefix, which every name shares and would make any two look alike.
    suffixes = sorted(name.removeprefix(ENV_PREFIX) for name in known)
    lines = []
    for name in sorted(environ):
        upper = name.upper()
        if not upper.startswith(ENV_PREFIX) or upper in known:
            continue
        line = f"{name} is not a variable gpu-credits reads; it is ignored"
        if upper.endswith(FILE_SUFFIX) and upper.removesuffix(FILE_SUFFIX) in known:
            line += f" (only secret settings are read from files: {', '.join(secrets)})"
        else:
            close = difflib.get_close_matches(upper.removeprefix(ENV_PREFIX), suffixes, 1, 0.75)
            if close:
                line += f" (did you mean {ENV_PREFIX}{close[0]}?)"
        lines.append(line)
    return lines
