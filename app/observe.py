"""What the service reports as it works, for metrics: an ``Observer`` whose every method does
nothing. ``app.metrics.Metrics`` counts; this class is what runs when metrics are off, and
what the layers below the API (the ledger service, the stores, authentication) are written
against, so none of them imports a metrics library.

The methods are called on the hot path (once or a few times per request, once per batch):
implementations keep them to a few counter increments.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, Literal

from app.service.errors import OutcomeUnknown, ServiceUnavailable

if TYPE_CHECKING:
    from app.service.commands import Operation
    from app.service.results import (
        BatchOutcome,
        ConsumptionReceipt,
        GrantReceipt,
        VoidReceipt,
    )
    from app.storage.base import Change

# The ledger's operations, as the batch endpoint names them.
OperationKind = Literal["grant", "consume", "void", "balance"]
# ok: done; refused: the ledger said no (4xx: the request, the account's state, a limit);
# failed: storage could not do it (unavailable, or its outcome is unknown).
Outcome = Literal["ok", "refused", "failed"]
# Why authentication failed: no Authorization header, not a Bearer token, no such key (or
# revoked, or a wrong secret): 401; a valid key without the scope or account: 403.
AuthFailure = Literal["missing", "malformed", "invalid", "forbidden"]


class Observer:
    """Every event of interest; this base class ignores them all."""

    def wrote(
        self,
        kind: OperationKind,
        receipt: GrantReceipt | ConsumptionReceipt | VoidReceipt,
        change: Change,
    ) -> None:
        """A single write was acknowledged (durable): its receipt and what it recorded."""

    def read(self, kind: OperationKind) -> None:
        """A read was answered."""

    def not_done(self, kind: OperationKind, outcome: Outcome) -> None:
        """A single operation was refused or failed."""

    def replayed(self, kind: str) -> None:
        """A retry got its stored answer (``grant``, ``consume``, ``void``, ``batch``)."""

    def batch(
        self, operations: Sequence[Operation], outcome: BatchOutcome, changes: Sequence[Change]
    ) -> None:
        """A batch was answered (its changes durable): every operation's result, in order,
        and the changes of the writes that succeeded, in the same order."""

    def events(
        self, operations: Sequence[Operation], outcome: BatchOutcome, changes: Sequence[Change]
    ) -> None:
        """A chunk of a usage stream was applied (its changes durable): as ``batch``, for
        the lines the ledger applied or refused (duplicates are not operations)."""

    def auth_failed(self, reason: AuthFailure) -> None:
        """A request was refused 401 or 403."""

    def committed(self, seconds: float, group_size: int) -> None:
        """Storage committed one transaction: how long it took (as the event loop waited
        for it) and how many units of work (requests, batches) it made durable together."""


NULL_OBSERVER: Final = Observer()


def outcome_of(exc: Exception) -> Outcome:
    """An operation's error as an outcome: failed when storage could not do it or cannot
    tell whether it did (503), refused otherwise (the request or the account said no)."""
    return "failed" if isinstance(exc, ServiceUnavailable | OutcomeUnknown) else "refused"
