"""Storage backends behind one interface (``app.storage.base``), one module each, built by one
factory.

Every backend is a ``StorageBackend`` (lifecycle, schema, reads); memory and sqlite are
``EmbeddedJournal``s (``submit``), postgres is a ``TransactionalStore`` (``transaction()``).
mypy checks that each backend fits its protocols (``_fits`` below).
"""

from __future__ import annotations

import contextlib
import urllib.parse
from typing import TYPE_CHECKING

from app.storage.base import (
    EmbeddedJournal,
    SnapshotError,
    SnapshotReader,
    StorageBackend,
    TransactionalStore,
)

if TYPE_CHECKING:
    from app.settings import Settings
    from app.storage.memory import MemoryStore
    from app.storage.postgres import PostgresStore
    from app.storage.sqlite import SqliteStore

    def _fits(memory: MemoryStore, sqlite: SqliteStore, postgres: PostgresStore) -> None:
        """Never called: the assignments are the check."""
        embedded: tuple[EmbeddedJournal, EmbeddedJournal] = (memory, sqlite)
        transactional: TransactionalStore = postgres
        backends: tuple[StorageBackend, ...] = (*embedded, transactional)
        del backends


def open_store(settings: Settings) -> EmbeddedJournal | PostgresStore:
    """The backend the settings name, built but not opened. Imports are local so a backend's
    driver is only loaded when it is used. (The transactional one is returned as what it is:
    ``app.adapters.postgres`` is written against it.)"""
    kind = settings.storage
    if kind == "memory":
        from app.storage.memory import MemoryStore

        return MemoryStore()
    if kind == "sqlite":
        from app.storage.sqlite import SqliteStore

        return SqliteStore(settings.sqlite_path)
    if kind == "postgres":
        from app.storage.postgres import PostgresStore

        url = settings.database_url_value()
        return PostgresStore(url, settings.pg_min_connections, settings.pg_max_connections)
    raise ValueError(f"unknown storage backend {kind!r}")


def open_snapshot(settings: Settings) -> contextlib.AbstractAsyncContextManager[SnapshotReader]:
    """An offline reader of the database the settings name (``SnapshotReader``), to use in
    ``async with``; ``SnapshotError`` when there is none to read (memory keeps nothing)."""
    if settings.storage == "sqlite":
        from app.storage.sqlite import SqliteSnapshot

        return SqliteSnapshot(settings.sqlite_path)
    if settings.storage == "postgres":
        from app.storage.postgres import PostgresSnapshot

        return PostgresSnapshot(settings.database_url_value(), location(settings))
    raise SnapshotError(f"storage={settings.storage} keeps nothing once its process ends")


def location(settings: Settings) -> str:
    """Where the settings keep the ledger, fit to print: a PostgreSQL URL loses its password
    and query (which may hold one too)."""
    if settings.storage == "sqlite":
        return f"sqlite {settings.sqlite_path}"
    if settings.storage == "postgres":
        return f"postgres {redacted_url(settings.database_url_value())}"
    return settings.storage


def redacted_url(url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "(a database URL that cannot be parsed)"
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    if parts.username:
        user = urllib.parse.quote(urllib.parse.unquote(parts.username), safe="")
        netloc = f"{user}{':***' if parts.password is not None else ''}@{netloc}"
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))
