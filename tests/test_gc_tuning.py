"""The service tunes CPython's cyclic collector once its ledger is up (``app.collector``):
what startup loaded is frozen, the young generation is collected every 100,000 allocations,
not 700, and that threshold grows with the operations of the batches and stream chunks in
flight, so young collections do not rescan them (the README's batch figures depend on it)."""

from __future__ import annotations

import asyncio
import gc
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.collector import (
    COLLECTOR,
    GC_THRESHOLDS,
    MAX_YOUNG_THRESHOLD,
    OBJECTS_PER_OPERATION,
)
from app.domain import LedgerError
from app.main import create_app
from app.service.errors import ServiceError
from app.service.ledger import Ledger
from app.settings import Settings

BASE = GC_THRESHOLDS[0]


@pytest.fixture
def collector_restored() -> Iterator[None]:
    thresholds = gc.get_threshold()
    tuned = COLLECTOR.tuned
    yield
    assert COLLECTOR.operations_in_flight == 0, "every batch in flight was counted out"
    COLLECTOR.tuned = tuned
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


@pytest.mark.usefixtures("collector_restored")
def test_the_young_threshold_grows_with_the_operations_in_flight_and_comes_back() -> None:
    COLLECTOR.tune()
    assert gc.get_threshold() == GC_THRESHOLDS
    with COLLECTOR.batch_in_flight(1_000):
        assert gc.get_threshold()[0] == BASE + 1_000 * OBJECTS_PER_OPERATION
        with COLLECTOR.batch_in_flight(10_000):  # another batch, at the same time
            assert gc.get_threshold()[0] == BASE + 11_000 * OBJECTS_PER_OPERATION
            assert gc.get_threshold()[1:] == GC_THRESHOLDS[1:]
        assert gc.get_threshold()[0] == BASE + 1_000 * OBJECTS_PER_OPERATION
    assert gc.get_threshold() == GC_THRESHOLDS


@pytest.mark.usefixtures("collector_restored")
def test_a_batch_that_fails_is_counted_out_and_the_growth_is_bounded() -> None:
    COLLECTOR.tune()
    with pytest.raises(RuntimeError), COLLECTOR.batch_in_flight(500):
        raise RuntimeError("the batch failed")
    assert COLLECTOR.operations_in_flight == 0
    assert gc.get_threshold() == GC_THRESHOLDS
    with COLLECTOR.batch_in_flight(10**9):  # far past the cap
        assert gc.get_threshold()[0] == MAX_YOUNG_THRESHOLD
    assert gc.get_threshold() == GC_THRESHOLDS


@pytest.mark.usefixtures("collector_restored")
def test_an_untuned_process_keeps_its_thresholds() -> None:
    """Code that embeds the ledger without the app's lifespan keeps CPython's settings."""
    COLLECTOR.tuned = False
    gc.set_threshold(700, 10, 10)
    with COLLECTOR.batch_in_flight(1_000):
        assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_threshold() == (700, 10, 10)


@pytest.mark.usefixtures("collector_restored")
async def test_a_batch_and_a_stream_chunk_raise_it_while_they_are_applied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the API, on SQLite: the threshold seen while the ledger applies a batch of
    three operations (and a stream's chunk of two lines), and the base once they are
    answered; a batch refused as a whole (atomic) is counted out too."""
    app = create_app(Settings(storage="sqlite", data_dir=tmp_path))
    seen: list[int] = []
    real_batch, real_events = Ledger.batch, Ledger.events

    async def batch(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        seen.append(gc.get_threshold()[0])
        return await real_batch(self, *args, **kwargs)

    async def events(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        seen.append(gc.get_threshold()[0])
        return await real_events(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "batch", batch)
    monkeypatch.setattr(Ledger, "events", events)
    grant = {"op": "grant", "account_id": "a", "amount": 5, "timestamp": 1, "expiry": 9}
    consume = {"op": "consume", "account_id": "a", "amount": 9, "timestamp": 2}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as client,
    ):
        r = await client.post("/v1/batch", json={"operations": [grant, consume, consume]})
        assert r.status_code == 200, r.text
        assert gc.get_threshold() == GC_THRESHOLDS
        late = {**grant, "timestamp": 0, "expiry": 5}  # before the clock: refused
        r = await client.post("/v1/batch", json={"atomic": True, "operations": [late]})
        assert r.status_code == 409, r.text
        assert gc.get_threshold() == GC_THRESHOLDS
        lines = [{**grant, "id": "e1", "timestamp": 3}, {**consume, "id": "e2", "timestamp": 3}]
        body = "".join(httpx.Response(200, json=line).text + "\n" for line in lines)
        r = await client.post(
            "/v1/events", content=body, headers={"content-type": "application/x-ndjson"}
        )
        assert r.status_code == 200, r.text
        assert len(r.text.splitlines()) == 2
        assert gc.get_threshold() == GC_THRESHOLDS
    per_op = OBJECTS_PER_OPERATION
    assert seen == [BASE + 3 * per_op, BASE + 1 * per_op, BASE + 2 * per_op]


def _errors_alive() -> int:
    return sum(isinstance(o, LedgerError | ServiceError) for o in gc.get_objects())


@pytest.mark.usefixtures("collector_restored")
async def test_refused_operations_leave_no_reference_cycle() -> None:
    """What the tuning relies on: a batch's objects die with its answer, those of refused
    operations too, in a batch, an atomic batch and a stream. (A refusal kept in a list of
    results had a traceback, which held the frame holding that list: a cycle that kept the
    whole batch, its results and changes, until the collector ran: 8 to 14 objects, 1.4 to
    2.6 KB, per refused operation.)"""
    app = create_app(Settings(storage="memory", max_idempotency_keys=2))
    grant = {"op": "grant", "account_id": "a", "amount": 5, "timestamp": 2, "expiry": 9}
    refused = [
        {"op": "void", "account_id": "nobody", "grant_id": 1, "timestamp": 5},  # 404
        {"op": "void", "account_id": "a", "grant_id": 99, "timestamp": 5},  # 404
        {**grant, "timestamp": 1},  # before the account's clock: 409
    ]
    # Three lines past the room for two event ids: the third is refused (503).
    lines = [{**grant, "id": f"e{n}", "timestamp": 3} for n in range(3)]
    stream = "".join(httpx.Response(200, json=line).text + "\n" for line in lines)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as client,
    ):
        r = await client.post("/v1/batch", json={"operations": [grant]})
        assert r.status_code == 200, r.text
        gc.collect()
        before = _errors_alive()
        gc.disable()
        try:
            r = await client.post("/v1/batch", json={"operations": refused * 100})
            statuses = [result["status"] for result in r.json()["results"]]
            for op in refused:
                r = await client.post("/v1/batch", json={"atomic": True, "operations": [op]})
                statuses.append(r.status_code)
            r = await client.post(
                "/v1/events", content=stream, headers={"content-type": "application/x-ndjson"}
            )
            statuses += [json.loads(line)["status"] for line in r.text.splitlines()]
            left = _errors_alive() - before
        finally:
            gc.enable()
    assert statuses == [404, 404, 409] * 100 + [404, 404, 409] + [201, 201, 503]
    assert left == 0, f"{left} refusals are left for the collector to free"


@pytest.mark.usefixtures("collector_restored")
async def test_a_batch_and_a_stream_cancelled_while_applied_are_counted_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request cancelled while the ledger applies it (a server shutting down) counts its
    operations out, as one that failed does."""
    app = create_app(Settings(storage="memory"))
    applying = asyncio.Event()

    async def stuck(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        applying.set()
        await asyncio.Event().wait()  # never set: only cancelled

    monkeypatch.setattr(Ledger, "batch", stuck)
    monkeypatch.setattr(Ledger, "events", stuck)
    grant = {"op": "grant", "account_id": "a", "amount": 5, "timestamp": 1, "expiry": 9}
    line = httpx.Response(200, json={**grant, "id": "e1"}).text + "\n"
    requests: list[tuple[str, dict[str, Any]]] = [
        ("/v1/batch", {"json": {"operations": [grant, grant]}}),
        ("/v1/events", {"content": line, "headers": {"content-type": "application/x-ndjson"}}),
    ]
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as client,
    ):
        for (path, kwargs), operations in zip(requests, (2, 1), strict=True):
            applying.clear()
            request = asyncio.create_task(client.post(path, **kwargs))
            await applying.wait()
            assert COLLECTOR.operations_in_flight == operations
            assert gc.get_threshold()[0] == BASE + operations * OBJECTS_PER_OPERATION
            request.cancel()
            with pytest.raises(asyncio.CancelledError):
                await request
            assert COLLECTOR.operations_in_flight == 0
            assert gc.get_threshold() == GC_THRESHOLDS
