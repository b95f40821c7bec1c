"""Idempotency-Key: what identifies a request, where its key lives, and what a retry gets.

The service stores the first answer of a keyed write as the API layer encoded it (an
``Answer``: the encoder is passed to the service at construction), so a retry gets it again
byte for byte. A single operation's key is scoped to its account; a batch's to the API key
that sent it (one tenant's key names say nothing about, and cannot block, another's).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from app.service.results import (
    Answer,
    BatchOutcome,
    ConsumptionReceipt,
    GrantReceipt,
    VoidReceipt,
)

BATCH_SCOPE: Final = "/batch"  # idempotency scope of batches; "/" is in no account id

# What a write answers, as the API layer encodes it for storage and replay.
Encoder = Callable[[GrantReceipt | ConsumptionReceipt | VoidReceipt | BatchOutcome], Answer]


@dataclass(slots=True)
class Idempotency:
    """A request's Idempotency-Key, and the fingerprint of what it asked (a retry with the
    same key must ask the same)."""

    key: str
    fingerprint: str
    # Used by batches only (see batch_scope); a single operation's scope is its account id.
    scope: str = BATCH_SCOPE


def fingerprint(operation: str, account_id: str, body: dict[str, Any]) -> str:
    canonical = json.dumps([operation, account_id, body], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def batch_scope(api_key_id: str | None) -> str:
    return BATCH_SCOPE if api_key_id is None else f"{BATCH_SCOPE}/{api_key_id}"


def api_key_of_scope(scope: str) -> str | None:
    """The API key id a batch scope names; None for an account's scope or an anonymous
    batch's."""
    head = BATCH_SCOPE + "/"
    return scope[len(head) :] if scope.startswith(head) else None
