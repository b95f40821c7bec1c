"""The operations a caller asks of the service, alone or in a batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

MAX_BATCH_OPERATIONS: Final = 10_000  # one request doing bounded work


@dataclass(slots=True)
class GrantOp:
    account_id: str
    amount: int
    timestamp: int
    expiry: int
    name: str | None = None
    metadata: dict[str, str] | None = None
    resources: list[str] | None = None


@dataclass(slots=True)
class ConsumeOp:
    account_id: str
    amount: int
    timestamp: int
    resource: str | None = None


@dataclass(slots=True)
class VoidOp:
    account_id: str
    grant_id: int
    timestamp: int


@dataclass(slots=True)
class BalanceOp:
    account_id: str
    timestamp: int | None
    resource: str | None = None


Operation = GrantOp | ConsumeOp | VoidOp | BalanceOp


@dataclass(slots=True)
class EventOp:
    """A usage-stream line (``POST /v1/events``): a write with the client's id for it,
    unique per account, and the fingerprint of what it asks (see ``EventRecord``)."""

    event_id: str
    fingerprint: str
    op: GrantOp | ConsumeOp | VoidOp
