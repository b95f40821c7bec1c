"""Results as the bytes the API sends: one place that turns the service's dataclasses into
JSON, for answers and for what an Idempotency-Key stores (``encode_answer``, handed to the
service at construction).

Receipts are serialised by pydantic straight from the service's dataclasses: the declared
response models document the same shape (tests hold the two together), and skipping the
validate-then-serialise round trip FastAPI would do keeps the hot path lean.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any, Final

from pydantic import TypeAdapter
from starlette.responses import StreamingResponse

from app.api.problems import describe
from app.api.schemas import LiveGrantItem, LiveGrantsResponse
from app.service.commands import ConsumeOp, GrantOp, Operation, VoidOp
from app.service.results import (
    Answer,
    BalanceView,
    BatchOutcome,
    ConsumptionReceipt,
    ForecastView,
    GrantReceipt,
    LiveGrantView,
    VoidReceipt,
)
from app.storage.base import ConsumptionEntry, Entry, GrantEntry, VoidEntry

GRANT_STATUS: Final = 201
CONSUME_STATUS: Final = 200
VOID_STATUS: Final = 200
BATCH_STATUS: Final = 200

_GRANT_JSON: TypeAdapter[GrantReceipt] = TypeAdapter(GrantReceipt)
_CONSUME_JSON: TypeAdapter[ConsumptionReceipt] = TypeAdapter(ConsumptionReceipt)
_BALANCE_JSON: TypeAdapter[BalanceView] = TypeAdapter(BalanceView)
_VOID_JSON: TypeAdapter[VoidReceipt] = TypeAdapter(VoidReceipt)
_FORECAST_JSON: TypeAdapter[ForecastView] = TypeAdapter(ForecastView)


@dataclasses.dataclass(slots=True)
class _DryRunConsumption(ConsumptionReceipt):
    """A dry run's answer: the consumption's, flagged."""

    dry_run: bool = True


_DRY_RUN_JSON: TypeAdapter[_DryRunConsumption] = TypeAdapter(_DryRunConsumption)


@dataclasses.dataclass(slots=True)
class _BatchItem:
    op: str
    status: int
    body: GrantReceipt | ConsumptionReceipt | VoidReceipt | BalanceView | dict[str, Any]


@dataclasses.dataclass(slots=True)
class _BatchBody:
    succeeded: int
    failed: int
    results: list[_BatchItem]


_BATCH_ITEM_JSON: TypeAdapter[_BatchItem] = TypeAdapter(_BatchItem)
# A grant's and a consumption's item up to its body (``_BatchItem``'s field order).
_GRANT_ITEM: Final = b'{"op":"grant","status":%d,"body":' % GRANT_STATUS
_CONSUME_ITEM: Final = b'{"op":"consume","status":%d,"body":' % CONSUME_STATUS
_NEXT_GRANT_ITEM: Final = b"," + _GRANT_ITEM
_NEXT_CONSUME_ITEM: Final = b"," + _CONSUME_ITEM


def grant(receipt: GrantReceipt) -> bytes:
    return _GRANT_JSON.dump_json(receipt)


def consumption(receipt: ConsumptionReceipt) -> bytes:
    return _CONSUME_JSON.dump_json(receipt)


def consumption_dry_run(receipt: ConsumptionReceipt) -> bytes:
    """What the consumption would answer, with ``"dry_run": true``."""
    fields = {f.name: getattr(receipt, f.name) for f in dataclasses.fields(receipt)}
    return _DRY_RUN_JSON.dump_json(_DryRunConsumption(**fields))


def forecast(view: ForecastView) -> bytes:
    return _FORECAST_JSON.dump_json(view)


def void(receipt: VoidReceipt) -> bytes:
    return _VOID_JSON.dump_json(receipt)


def balance(view: BalanceView) -> bytes:
    return _BALANCE_JSON.dump_json(view)


# listGrants is encoded and sent this many grants at a time, with the event loop free in
# between: 10,000 live grants with the largest labels SPEC allows (metadata values of control
# characters, escaped six bytes each) are 611 MB of JSON, which held the loop 4.4 s (SQLite)
# and took the process to 2.8 GB as one body. A piece is at most about 6 MB.
LIVE_GRANTS_PER_PIECE: Final = 100
_LIVE_GRANTS_HEAD: TypeAdapter[LiveGrantsResponse] = TypeAdapter(LiveGrantsResponse)
_LIVE_GRANT_ITEMS: TypeAdapter[list[LiveGrantItem]] = TypeAdapter(list[LiveGrantItem])


def live_grants(view: BalanceView, grants: list[LiveGrantView]) -> StreamingResponse:
    """The live-grants list as ``LiveGrantsResponse`` (the same members and bytes as a
    validated response model), streamed in pieces of ``LIVE_GRANTS_PER_PIECE`` grants. Every
    figure and label is read before the first byte is sent, so a storage failure is still a
    problem document, never a cut body."""
    whole = _LIVE_GRANTS_HEAD.validate_python({**dataclasses.asdict(view), "grants": []})
    head = _LIVE_GRANTS_HEAD.dump_json(whole)
    assert head.endswith(b"[]}")

    async def pieces() -> AsyncIterator[bytes]:
        yield head[:-2]
        for start in range(0, len(grants), LIVE_GRANTS_PER_PIECE):
            if start:
                await asyncio.sleep(0)  # let other requests run between pieces
            items = _LIVE_GRANT_ITEMS.validate_python(
                grants[start : start + LIVE_GRANTS_PER_PIECE], from_attributes=True
            )
            piece = _LIVE_GRANT_ITEMS.dump_json(items)[1:-1]
            yield b"," + piece if start else piece
        yield b"]}"

    return StreamingResponse(pieces(), media_type="application/json")


def _name_and_status(op: Operation) -> tuple[str, int]:
    """A batch operation's name and the status its single endpoint answers on success."""
    if isinstance(op, GrantOp):
        return "grant", GRANT_STATUS
    if isinstance(op, ConsumeOp):
        return "consume", CONSUME_STATUS
    if isinstance(op, VoidOp):
        return "void", VOID_STATUS
    return "balance", 200


def batch(outcome: BatchOutcome) -> bytes:
    """A batch that ran (an aborted atomic one answers with a problem document instead).

    One pass, item by item: a grant's or a consumption's item is its receipt as the single
    endpoint serialises it, in its envelope (no item object, no union to resolve); others go
    through ``_BatchItem``. Byte for byte what dumping a ``_BatchBody`` whole gives
    (tests/test_batch.py holds the two together)."""
    assert outcome.failed_index is None
    # Each item as its pieces, each led by a comma (the first one's is cut off below), all
    # joined once at the end: 1.0 against 1.4 us an item when each item was concatenated
    # first (a 10,000-operation batch).
    pieces: list[bytes] = [b""]  # the head, once the counts are known
    add = pieces.append
    failed = 0
    # The serializers themselves: TypeAdapter.dump_json only passes its defaults on to them,
    # 0.3 us of Python per receipt (the same bytes: tests/test_batch.py).
    dump_grant = _GRANT_JSON.serializer.to_json
    dump_consumption = _CONSUME_JSON.serializer.to_json
    for op, result in zip(outcome.operations, outcome.results, strict=True):
        if type(result) is GrantReceipt:
            add(_NEXT_GRANT_ITEM)
            add(dump_grant(result))
            add(b"}")
        elif type(result) is ConsumptionReceipt:
            add(_NEXT_CONSUME_ITEM)
            add(dump_consumption(result))
            add(b"}")
        else:
            name, status = _name_and_status(op)
            if isinstance(result, Exception):
                failed += 1
                described = describe(result)
                item = _BatchItem(name, described.kind.status, described.body())
            else:
                item = _BatchItem(name, status, result)
            add(b",")
            add(_BATCH_ITEM_JSON.dump_json(item))
    if len(pieces) > 1:
        pieces[1] = pieces[1][1:]  # the first item's comma
    succeeded = len(outcome.results) - failed
    pieces[0] = b'{"succeeded":%d,"failed":%d,"results":[' % (succeeded, failed)
    add(b"]}")
    return b"".join(pieces)


def encode_answer(
    result: GrantReceipt | ConsumptionReceipt | VoidReceipt | BatchOutcome,
) -> Answer:
    """What an Idempotency-Key keeps: the first answer's status and bytes."""
    if isinstance(result, GrantReceipt):
        return Answer(GRANT_STATUS, grant(result))
    if isinstance(result, ConsumptionReceipt):
        return Answer(CONSUME_STATUS, consumption(result))
    if isinstance(result, VoidReceipt):
        return Answer(VOID_STATUS, void(result))
    return Answer(BATCH_STATUS, batch(result))


def entry(e: Entry, watermark: int) -> dict[str, Any]:
    """A ledger entry as listLedgerEntries shows it: its identity, kind and time, the totals
    after it, its revision and whether it is final, then what the kind says (the
    ``LedgerEntry`` schema)."""
    body: dict[str, Any] = {
        "sequence": e.sequence,
        "kind": e.kind,
        "timestamp": e.timestamp,
        "balance": e.available - e.debt,
        "available": e.available,
        "debt": e.debt,
        "revision": e.revision,
        "final": e.timestamp < watermark,
    }
    if isinstance(e, GrantEntry):
        body.update(
            grant_id=e.grant_id,
            amount=e.amount,
            expiry=e.expiry,
            settled_debt=e.settled_debt,
            retained=e.retained,
            resources=_listed(e.resources),
            name=e.name,
            metadata=e.metadata,
        )
    elif isinstance(e, ConsumptionEntry):
        body.update(
            amount=e.amount,
            consumed=e.consumed,
            debt_added=e.debt_added,
            allocation=[
                {
                    "grant_id": d.grant_id,
                    "expiry": d.expiry,
                    "amount": d.amount,
                    "resources": _listed(d.resources),
                }
                for d in e.allocation
            ],
            resource=e.resource,
        )
    elif isinstance(e, VoidEntry):
        body.update(grant_id=e.grant_id, amount=e.amount)
    else:
        body.update(
            grant_id=e.grant_id, expiry=e.expiry, amount=e.amount, resources=_listed(e.resources)
        )
    return body


def _listed(resources: tuple[str, ...] | None) -> list[str] | None:
    return None if resources is None else list(resources)
