"""All configuration in one place: environment variables prefixed ``GPU_CREDITS_``.

Every setting has a safe default, so ``gpu-credits serve`` with no configuration listens on
loopback only and keeps its data durably in SQLite under ``./data``.

Secret settings (the ``SecretStr`` ones: the database URL and password) can also be read
from a file named by ``GPU_CREDITS_<NAME>_FILE`` (``SecretFiles``), so that no secret has to
sit in the environment: that is how container secrets (``/run/secrets/...``) reach it.
"""

from __future__ import annotations

import os
import typing
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field, SecretStr, model_validator
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
    data_dir: Path = Field(Path("data"), description="Directory for the SQLite database.")
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
    access_log: bool = Field(False, description="Log every request (off: it costs throughput).")

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
