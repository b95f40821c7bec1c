"""Idempotent POSTs, written once: the ``Idempotency-Key`` header, what identifies a request
(its fingerprint), and how a stored answer is sent again.

The header is declared in OpenAPI by hand and read here, not as a FastAPI ``Header``
parameter: dependency solving for it cost a good share of each request (see README,
Performance).
"""

from __future__ import annotations

import re
from typing import Any, Final

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel

from app.service.idempotency import Idempotency, fingerprint
from app.service.ledger import Replay

IDEMPOTENCY_KEY_PATTERN: Final = r"^[\x21-\x7e][\x20-\x7e]{0,254}$"
_IDEMPOTENCY_KEY_RE: Final = re.compile(IDEMPOTENCY_KEY_PATTERN)

IDEMPOTENCY_KEY_PARAMETER: dict[str, Any] = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        "Optional, 1 to 255 printable ASCII characters. A retry with the same key and body "
        "returns the original response with `Idempotent-Replayed: true` and changes nothing; "
        "the same key with another body is 422. Scoped to the account (on /v1/batch: to the "
        "API key). Kept for at least 24 hours (GPU_CREDITS_IDEMPOTENCY_TTL_HOURS)."
    ),
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "pattern": IDEMPOTENCY_KEY_PATTERN,
    },
}
WITH_IDEMPOTENCY_KEY: dict[str, Any] = {"parameters": [IDEMPOTENCY_KEY_PARAMETER]}
REPLAYED_HEADER: dict[str, Any] = {
    "Idempotent-Replayed": {
        "description": "Present and `true` when this is a stored response to a retry.",
        "schema": {"type": "string", "enum": ["true"]},
    }
}


def idempotency_key(request: Request) -> str | None:
    values = request.headers.getlist("idempotency-key")
    if not values:
        return None
    if len(values) > 1 or not _IDEMPOTENCY_KEY_RE.fullmatch(values[0]):
        raise RequestValidationError(
            [
                {
                    "loc": ("header", "Idempotency-Key"),
                    "msg": "must be one value of 1 to 255 printable ASCII characters",
                    "type": "idempotency_key",
                }
            ]
        )
    return values[0]


def refuse_idempotency_key(request: Request, why: str) -> None:
    """422 when the request carries an ``Idempotency-Key`` its operation cannot honour: a
    key silently ignored would let a client believe its retry is covered by it."""
    if request.headers.getlist("idempotency-key"):
        raise RequestValidationError(
            [{"loc": ("header", "Idempotency-Key"), "msg": why, "type": "idempotency_key_refused"}]
        )


def idempotency_of(
    request: Request, operation: str, account_id: str, body: BaseModel, scope: str | None = None
) -> Idempotency | None:
    """The request's key and fingerprint (None without a key). ``scope``: batches only."""
    key = idempotency_key(request)
    if key is None:
        return None
    fp = fingerprint(operation, account_id, _fingerprinted(body))
    return Idempotency(key, fp) if scope is None else Idempotency(key, fp, scope)


def replayed(replay: Replay, headers: dict[str, str] | None = None) -> Response:
    """The stored first answer, byte for byte."""
    return Response(
        replay.body,
        status_code=replay.status_code,
        media_type="application/json",
        headers={"Idempotent-Replayed": "true", **(headers or {})},
    )


# Members added after fingerprints were first stored: left out while absent, so a request
# that does not use them keeps the fingerprint it had, and a retry across an upgrade matches.
_ADDED_MEMBERS: Final = ("name", "metadata", "resources", "resource")


def _fingerprinted(body: BaseModel) -> dict[str, Any]:
    dumped = body.model_dump()
    for part in [dumped, *dumped.get("operations", ())]:
        for member in _ADDED_MEMBERS:
            if member in part and part[member] is None:
                del part[member]
    return dumped
