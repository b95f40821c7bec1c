"""Storage backends behind one interface (``app.storage.base.Store``), one module each."""

from __future__ import annotations

from app.settings import Settings
from app.storage.base import Store


def open_store(settings: Settings) -> Store:
    """The backend the settings name. Imports are local so a backend's driver is only
    loaded when it is used."""
    if settings.storage == "memory":
        from app.storage.memory import MemoryStore

        return MemoryStore()
    from app.storage.sqlite import SqliteStore

    return SqliteStore(settings.sqlite_path)
