"""``?dry_run=true`` on a consumption: the query flag, declared in OpenAPI by hand and read
here rather than as a FastAPI ``Query`` parameter (dependency solving for it cost about 5% of
every consumption's time in process, dry run or not: see README, Performance), and the
refusal of an ``Idempotency-Key`` with it."""

from __future__ import annotations

from typing import Any, Final

from fastapi import Request
from fastapi.exceptions import RequestValidationError

from app.api.idempotent import refuse_idempotency_key

DRY_RUN: Final = "dry_run"
DRY_RUN_PARAMETER: dict[str, Any] = {
    "name": DRY_RUN,
    "in": "query",
    "required": False,
    "description": (
        "`true`: answer what this consumption would do if it were sent now (the allocation, "
        "the debt it would add, the totals after it, what a late one would restate; "
        "`dry_run: true` in the answer) and change nothing: no ledger entry, no clock move, "
        "no account created. It is refused exactly as the consumption would be (409, "
        "422...). It takes no `Idempotency-Key` (422). Only `true` or `false`; absent or "
        "`false`: the consumption itself."
    ),
    # No "default": generated clients then send the flag only when asked to, so a client of
    # this release still talks to a server of the release before (which refuses unknown
    # query parameters).
    "schema": {"type": "boolean"},
}
_REFUSED_KEY: Final = (
    "a dry run records nothing, so it takes no Idempotency-Key: send the key with the real "
    "consumption"
)


def dry_run_of(request: Request) -> bool:
    """The flag (false when absent). Only ``true`` or ``false``: pydantic's lax booleans
    (``1``, ``yes``, ``on``...) are refused, so a typo cannot decide whether a write happens.
    A repeated flag was refused by the route class with every repeated query parameter."""
    if not request.scope.get("query_string"):
        return False
    value = request.query_params.get(DRY_RUN)
    if value is None or value == "false":
        return False
    if value == "true":
        refuse_idempotency_key(request, _REFUSED_KEY)
        return True
    raise RequestValidationError(
        [
            {
                "loc": ("query", DRY_RUN),
                "msg": "Input should be `true` or `false`",
                "type": "bool_parsing",
            }
        ]
    )
