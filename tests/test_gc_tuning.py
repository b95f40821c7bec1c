"""The service tunes CPython's cyclic collector once its ledger is up (``app.main._tune_gc``):
what startup loaded is frozen, and the young generation is collected every 100,000
allocations, not 700 (the README's batch figures depend on it)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.main import GC_THRESHOLDS, create_app
from app.settings import Settings


@pytest.fixture
def collector_restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.set_threshold(*thresholds)
    gc.unfreeze()


@pytest.mark.usefixtures("collector_restored")
async def test_startup_freezes_what_it_loaded_and_collects_less_often(tmp_path: Path) -> None:
    gc.set_threshold(700, 10, 10)
    gc.unfreeze()
    app = create_app(Settings(storage="sqlite", data_dir=tmp_path))
    async with app.router.lifespan_context(app):
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
    # The young generation's span times the middle one's stays as with (50,000, 50).
    young, middle, _ = GC_THRESHOLDS
    assert 2_000_000 <= young * middle <= 3_000_000
