"""Strict JSON request bodies.

- Only ``application/json`` is accepted on a body (415 otherwise, including no Content-Type).
- Parsing rejects what Python's ``json`` module lets through but a careful ledger must not:
  duplicate member names (``{"amount": 1, "amount": 1000000}``: which one did the caller mean?),
  ``NaN``/``Infinity``. Invalid UTF-8 and nesting past the parser's recursion limit become a
  400, never a 500 (the body cap bounds how deep a body can nest at all).
- Integers longer than any valid figure parse to an out-of-range value, so ``10**100`` and a
  4,000-digit number are a 422 naming the field, and never cost a big-integer conversion.
"""

from __future__ import annotations

import json
from typing import Any, Final

from fastapi import Request

_MAX_INT_DIGITS: Final = 20  # 2^53-1 has 16 digits: anything longer is out of range anyway
_OUT_OF_RANGE: Final = 10**_MAX_INT_DIGITS
# Every digit as "0", every other byte as a space: a body in which no run of
# _MAX_INT_DIGITS digits appears has no integer that _parse_int would clamp (a longer
# integer's text holds at least that many digits in a row, its sign aside), so it is parsed
# without the per-integer Python call: 0.3 us an operation of a 1,000-operation batch, for a
# scan of 0.07. Any body with such a run (in a number or a string alike) takes the hook.
_DIGITS_AS_ZEROS: Final = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_DIGIT_RUN: Final = b"0" * _MAX_INT_DIGITS


def _parse_int(text: str) -> int:
    if len(text) > _MAX_INT_DIGITS:
        return -_OUT_OF_RANGE if text.startswith("-") else _OUT_OF_RANGE
    return int(text)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        dupes: set[str] = set()
        for name, _ in pairs:  # linear: a body may hold hundreds of thousands of members
            (dupes if name in seen else seen).add(name)
        # ascii(): a name may hold a lone surrogate, which no JSON response can carry.
        shown = ", ".join(ascii(name) for name in sorted(dupes)[:10])
        raise ValueError(f"duplicate member name(s): {shown}")
    return obj


def loads_strict(raw: bytes) -> Any:
    """Parse ``raw`` or raise ``json.JSONDecodeError`` (which FastAPI turns into our 400)."""
    text = ""
    try:
        text = raw.decode("utf-8")
        if _LONG_DIGIT_RUN in raw.translate(_DIGITS_AS_ZEROS):
            return json.loads(
                text,
                object_pairs_hook=_unique_members,
                parse_int=_parse_int,
                parse_constant=_reject_constant,
            )
        return json.loads(text, object_pairs_hook=_unique_members, parse_constant=_reject_constant)
    except json.JSONDecodeError:
        raise
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise json.JSONDecodeError(str(exc), text, 0) from exc


def is_json_media_type(content_type: str | None) -> bool:
    if not content_type:
        return False
    media_type, _, params = content_type.partition(";")
    if media_type.strip().lower() != "application/json":
        return False
    charset = params.strip().lower()
    return not charset or charset.replace(" ", "") in ("charset=utf-8", 'charset="utf-8"')


class StrictJsonRequest(Request):
    """A request whose ``json()`` is ``loads_strict``: what FastAPI parses bodies with."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads_strict(await self.body())
        return self._json
