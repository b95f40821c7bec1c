"""Idempotency bodies on SQLite, which the writer sends as JSON text and the statement makes
bytes again (``CAST(... AS BLOB)``, ``app.storage.sqlite._keys_as_text``): a replay returns
the first answer byte for byte, before and after a restart, for answers holding adversarial
text; the stored body is a blob of those bytes; a database file in UTF-16 (made elsewhere),
where that cast would give other bytes, has its bodies bound as bytes."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from tests.support.api import ACCOUNT, url
from tests.support.app_runner import make_settings, running

# Text a grant's label may hold, as the answer's JSON carries it (raw UTF-8, escapes).
_TRICKY = 'q"uo\\te \\u0000 \\\\u0000 \\" é ✓ \u2028\u2029 \ufeff \U0001f600 \U0010fffd / \\/ ∑'
_METADATA = {
    "note": "line one\nline two\ttab\r",
    "k\u00e9": _TRICKY,
    "x": "\\" * 50,
    "del": "\x7f\x01",
}


def _stored(data: Path) -> list[tuple[str, bytes, str]]:
    conn = sqlite3.connect(data / "gpu-credits.sqlite3")
    try:
        return conn.execute(
            "SELECT key, body, typeof(body) FROM idempotency ORDER BY key"
        ).fetchall()
    finally:
        conn.close()


@pytest.mark.backends("sqlite")
async def test_replays_of_tricky_answers_are_byte_for_byte_also_after_a_restart(
    tmp_path: Path, backend: str
) -> None:
    settings = make_settings(backend, tmp_path / "data")
    grant: dict[str, Any] = {
        "amount": 100,
        "timestamp": 0,
        "expiry": 10,
        "name": _TRICKY[:200],
        "metadata": _METADATA,
    }
    operations = [
        {
            "op": "grant",
            "account_id": "b-1",
            "amount": 5,
            "timestamp": 1,
            "expiry": 9,
            "name": _TRICKY[:200],
            "metadata": _METADATA,
        },
        {"op": "consume", "account_id": "b-1", "amount": 10**6, "timestamp": 2},  # a problem
    ]
    batch = {"operations": operations}
    async with running(create_app(settings)) as client:
        first = await client.post(
            url(ACCOUNT, "grants"), json=grant, headers={"Idempotency-Key": "g"}
        )
        assert first.status_code == 201, first.text
        assert "é".encode() in first.content
        assert b"\\\\u0000" in first.content
        first_batch = await client.post("/v1/batch", json=batch, headers={"Idempotency-Key": "b"})
        assert first_batch.status_code == 200, first_batch.text
        again = await client.post(
            url(ACCOUNT, "grants"), json=grant, headers={"Idempotency-Key": "g"}
        )
        assert again.headers["idempotent-replayed"] == "true"
        assert again.content == first.content
    stored = dict((k, (b, t)) for k, b, t in _stored(tmp_path / "data"))
    assert stored["g"] == (first.content, "blob")
    assert stored["b"] == (first_batch.content, "blob")
    async with running(create_app(settings)) as client:
        again = await client.post(
            url(ACCOUNT, "grants"), json=grant, headers={"Idempotency-Key": "g"}
        )
        assert again.headers["idempotent-replayed"] == "true"
        assert again.content == first.content
        again_batch = await client.post("/v1/batch", json=batch, headers={"Idempotency-Key": "b"})
        assert again_batch.headers["idempotent-replayed"] == "true"
        assert again_batch.content == first_batch.content


@pytest.mark.backends("sqlite")
async def test_a_database_file_in_utf16_does_not_change_replayed_bytes(
    tmp_path: Path, backend: str
) -> None:
    """``CAST(text AS BLOB)`` gives the text in the *database's* encoding. A file created
    elsewhere with ``PRAGMA encoding = 'UTF-16le'`` (an empty database the operator made)
    is accepted and migrated; a replay is still the first answer's bytes (found by review:
    it was not)."""
    data = tmp_path / "data"
    data.mkdir()
    made = sqlite3.connect(data / "gpu-credits.sqlite3")
    made.execute("PRAGMA encoding = 'UTF-16le'")
    made.execute("CREATE TABLE scratch (x)")
    made.execute("DROP TABLE scratch")
    made.commit()
    made.close()
    settings = make_settings(backend, data)
    grant = {"amount": 100, "timestamp": 0, "expiry": 10, "name": "é"}
    async with running(create_app(settings)) as client:
        headers = {"Idempotency-Key": "g"}
        first = await client.post(url(ACCOUNT, "grants"), json=grant, headers=headers)
        assert first.status_code == 201, first.text
        again = await client.post(url(ACCOUNT, "grants"), json=grant, headers=headers)
        assert again.headers["idempotent-replayed"] == "true"
        assert again.content == first.content
    [(key, body, kind)] = _stored(data)
    assert (key, body, kind) == ("g", first.content, "blob")
