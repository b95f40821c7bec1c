"""All configuration in one place: environment variables prefixed ``GPU_CREDITS_``.

Every setting has a safe default, so ``gpu-credits serve`` with no configuration listens on
loopback only and keeps its data durably in SQLite under ``./data``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPU_CREDITS_", extra="forbid")

    host: str = Field("127.0.0.1", description="Address to listen on (loopback by default).")
    port: int = Field(8000, ge=0, le=65535, description="TCP port to listen on.")
    storage: Literal["sqlite", "memory"] = Field(
        "sqlite", description="sqlite keeps state durably; memory forgets it on exit."
    )
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
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    access_log: bool = Field(False, description="Log every request (off: it costs throughput).")

    @property
    def keys_path(self) -> Path:
        return self.api_keys_file or self.data_dir / "api-keys.json"

    @property
    def sqlite_path(self) -> Path:
        return self.data_dir / self.sqlite_file
