"""``gpu-credits check`` and ``gpu-credits export``: the database read offline.

Both read through a ``SnapshotReader`` (``app.storage.open_snapshot``): one read-only
snapshot of the SQLite file or the PostgreSQL database, no lock, no write, no migration. So
they work with the service stopped or running, and what they see is one moment of it (a
running service's later writes are not in it).
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from app.api.render import entry as render_entry
from app.domain import MAX_VALUE
from app.service.audit import AccountAudit, audit_account
from app.service.journal import watermark_in_force
from app.service.limits import Limits
from app.storage.base import Checkpoint, Entry, Position, SnapshotReader, position_of

# Entries per read: bounded memory per statement, few round trips.
ENTRY_PAGE: Final = 10_000
ACCOUNT_PAGE: Final = 1_000
FORMATS: Final = ("jsonl", "csv")
CSV_COLUMNS: Final = (
    "account_id",
    "sequence",
    "kind",
    "timestamp",
    "balance",
    "available",
    "debt",
    "revision",
    "final",
    "grant_id",
    "amount",
    "expiry",
    "settled_debt",
    "retained",
    "consumed",
    "debt_added",
    "resource",
    "resources",
    "allocation",
    "name",
    "metadata",
)


class UnknownAccount(Exception):
    pass


async def entries_of(reader: SnapshotReader, account_id: str) -> AsyncIterator[Entry]:
    """Every entry of the account in effective order, a page at a time."""
    after: Position | None = None
    while True:
        page = await reader.read_entries(account_id, after, ENTRY_PAGE)
        for entry in page:
            yield entry
        if len(page) < ENTRY_PAGE:
            return
        after = position_of(page[-1])


async def checkpoints_of(reader: SnapshotReader, account_id: str) -> list[Checkpoint]:
    """The account's checkpoints, newest first, walking back one timestamp at a time: the
    interface reads the latest at or before a time. (Several checkpoints at one timestamp,
    which take more than 256 writes at that timestamp, show only the latest of them.)"""
    found: list[Checkpoint] = []
    until = MAX_VALUE
    while until >= 0:
        checkpoint = await reader.read_checkpoint(account_id, until)
        if checkpoint is None:
            break
        found.append(checkpoint)
        until = checkpoint.position[0] - 1
    return found


# -- check ---------------------------------------------------------------------------------


@dataclass(slots=True)
class CheckReport:
    accounts: int = 0
    entries: int = 0
    checkpoints: int = 0
    problems: int = 0
    failed_accounts: list[str] = field(default_factory=list)


async def check(
    reader: SnapshotReader, limits: Limits, prefix: str, say: Callable[[str], None]
) -> CheckReport:
    """Check the database's own consistency, then every account whose id starts with
    ``prefix`` (``app.service.audit``); ``say`` each problem as it is found, one line."""
    report = CheckReport()
    for problem in await reader.integrity_problems():
        report.problems += 1
        say(f"database: {problem}")
    after = ""
    while True:
        rows = await reader.read_accounts(prefix, after, ACCOUNT_PAGE)
        for row in rows:
            audit = await _audit(reader, row.account_id, limits)
            report.accounts += 1
            report.entries += audit.entries
            report.checkpoints += audit.checkpoints
            if not audit.ok:
                report.failed_accounts.append(row.account_id)
                report.problems += len(audit.problems) + audit.unlisted
                for problem in audit.problems:
                    say(problem)
                if audit.unlisted:
                    say(f"account {row.account_id!r}: {audit.unlisted} more problems not listed")
        if len(rows) < ACCOUNT_PAGE:
            return report
        after = rows[-1].account_id


async def _audit(reader: SnapshotReader, account_id: str, limits: Limits) -> AccountAudit:
    try:
        loaded = await reader.read_account_state(account_id)
        entries = [e async for e in entries_of(reader, account_id)]
        checkpoints = await checkpoints_of(reader, account_id)
    except (ValueError, TypeError, KeyError, IndexError, AssertionError) as exc:
        # A row that does not decode (its JSON, a kind, a column out of range): a problem
        # to report, like any other, not the end of the check.
        audit = AccountAudit(account_id)
        audit.report(f"its rows cannot be read: {type(exc).__name__}: {exc}")
        return audit
    if loaded is None:  # listed a moment ago, in the same snapshot: cannot happen
        audit = AccountAudit(account_id)
        audit.report("listed but has no state")
        return audit
    return audit_account(account_id, loaded, entries, checkpoints, limits)


# -- export --------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    else:
        text = str(value)
    # A cell a spreadsheet would take for a formula (a grant's name or metadata is the
    # caller's text) is kept as text: OWASP's advice, a leading apostrophe.
    if isinstance(value, str) and text[:1] in _FORMULA_STARTS:
        return "'" + text
    return text


_FORMULA_STARTS: Final = frozenset("=+-@\t\r")


async def export(
    reader: SnapshotReader, account_id: str, fmt: str, out: TextIO, default_window: int = 0
) -> int:
    """Write the account's ledger to ``out``: JSON lines (one entry a line, as
    ``listLedgerEntries`` shows it, with ``account_id``) or CSV (``CSV_COLUMNS``, a header
    first; lists and objects as JSON, absent values empty). Returns the number of entries;
    ``UnknownAccount`` when the account was never written."""
    assert fmt in FORMATS
    loaded = await reader.read_account_state(account_id)
    if loaded is None:
        raise UnknownAccount(f"no account {account_id!r} in {reader.where}")
    writer = None
    if fmt == "csv":
        writer = csv.DictWriter(out, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
    # ``final`` as the service answers it: under the window in force (the service's
    # ``default_window`` unless the account has its own), which may have been lowered since.
    watermark = watermark_in_force(
        loaded.watermark,
        loaded.tracker_state.clock,
        loaded.lateness_window,
        default_window,
    )
    count = 0
    async for entry in entries_of(reader, account_id):
        body = {"account_id": account_id, **render_entry(entry, watermark)}
        if writer is not None:
            writer.writerow({column: _cell(body.get(column)) for column in CSV_COLUMNS})
        else:
            out.write(json.dumps(body, ensure_ascii=False, separators=(",", ":")) + "\n")
        count += 1
    return count


class AtomicOutput:
    """A file written whole or not at all: a temporary file next to it, renamed over it on
    success, removed on failure (an interrupted export leaves no half file behind)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._tmp: str | None = None
        self.file: TextIO | None = None

    def __enter__(self) -> TextIO:
        fd, self._tmp = tempfile.mkstemp(
            dir=self._path.parent, prefix=f".{self._path.name}.", suffix=".tmp"
        )
        self.file = os.fdopen(fd, "w", encoding="utf-8", newline="")
        return self.file

    def __exit__(self, kind: object, *rest: object) -> None:
        assert self.file is not None
        assert self._tmp is not None
        try:
            if kind is None:
                self.file.flush()
                os.fsync(self.file.fileno())
            self.file.close()
            if kind is None:
                os.replace(self._tmp, self._path)
        finally:
            Path(self._tmp).unlink(missing_ok=True)
