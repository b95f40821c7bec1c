"""Versioned schema migrations: what every backend with a schema shares.

Each backend lists its migrations as ``(version, sql)``, versions 1, 2, 3, ... Append only: a
released migration is never edited (``tests/test_storage_migrations.py`` holds the released
ones and fails when one changes), because databases made by that release already ran it.
Each database records the versions it has run in ``schema_migrations`` (``version``,
``applied_at``); a backend applies what is missing, in order, in one transaction, and refuses
a database that has run a version this release does not know.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from app.storage.base import MigrationStatus, SchemaTooNew, SnapshotError

Migration = tuple[int, str]


def known_versions(migrations: Sequence[Migration]) -> tuple[int, ...]:
    versions = tuple(version for version, _ in migrations)
    assert versions == tuple(range(1, len(versions) + 1)), "migrations are numbered 1, 2, 3..."
    return versions


def status(applied: Collection[int], migrations: Sequence[Migration]) -> MigrationStatus:
    return MigrationStatus(tuple(sorted(applied)), known_versions(migrations))


def plan(applied: Collection[int], migrations: Sequence[Migration]) -> list[Migration]:
    """The migrations to apply, in order; SchemaTooNew for a database a newer release made."""
    now = status(applied, migrations)
    if now.newer_than_known:
        raise SchemaTooNew(
            f"database schema version {now.current} is newer than this service knows "
            f"({max(now.known)}): upgrade the service"
        )
    return [m for m in migrations if m[0] in now.pending]


def require_current(status: MigrationStatus, where: str) -> None:
    """Offline reads (``SnapshotReader``) understand the schema this release writes and only
    that one; they never migrate."""
    if status.newer_than_known:
        raise SnapshotError(
            f"{where}: schema version {status.current} is newer than this release knows "
            f"({max(status.known)}): upgrade gpu-credits"
        )
    if status.pending:
        raise SnapshotError(
            f"{where}: schema version {status.current}, this release reads "
            f"{max(status.known)}: run `gpu-credits migrate` first (or start the service, "
            "which migrates)"
        )
