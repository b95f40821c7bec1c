"""Storage backends behind one interface (``app.storage.base.Store``), one module each."""

from __future__ import annotations

from pathlib import Path

from app.storage.base import Store


def open_store(kind: str, sqlite_path: Path) -> Store:
    """The backend named ``kind``. Imports are local so a backend's driver is only loaded
    when it is used."""
    if kind == "memory":
        from app.storage.memory import MemoryStore

        return MemoryStore()
    if kind == "sqlite":
        from app.storage.sqlite import SqliteStore

        return SqliteStore(sqlite_path)
    raise ValueError(f"unknown storage backend {kind!r}")
