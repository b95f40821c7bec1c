"""Strict JSON request bodies.

- Only ``application/json`` is accepted on a body (415 otherwise, including no Content-Type).
- Parsing rejects what Python's ``json`` module lets through but a careful ledger must not:
  duplicate member names (``{"amount": 1, "amount": 1000000}``: which one did the caller mean?),
  ``NaN``/``Infinity``, and nesting deeper than a request ever needs. Invalid UTF-8 and
  recursion limits become a 400, never a 500.
- Integers longer than any valid figure parse to an out-of-range value, so ``10**100`` and a
  4,000-digit number are a 422 naming the field, and never cost a big-integer conversion.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any, Final

from fastapi import Request, Response
from fastapi.routing import APIRoute

MAX_JSON_DEPTH: Final = 32
_MAX_INT_DIGITS: Final = 20  # 2^53-1 has 16 digits: anything longer is out of range anyway
_OUT_OF_RANGE: Final = 10**_MAX_INT_DIGITS


class UnsupportedMediaType(Exception):
    pass


def _parse_int(text: str) -> int:
    if len(text) > _MAX_INT_DIGITS:
        return -_OUT_OF_RANGE if text.startswith("-") else _OUT_OF_RANGE
    return int(text)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        names = [k for k, _ in pairs]
        dupes = sorted({k for k in names if names.count(k) > 1})
        raise ValueError(f"duplicate member name(s): {', '.join(dupes)}")
    return obj


def _depth_ok(raw: bytes) -> bool:
    """Nesting depth by counting brackets outside strings: cheap, and done before parsing so
    a deeply nested body never reaches the recursive parser."""
    depth = 0
    in_string = False
    escaped = False
    for byte in raw:
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return False
        elif byte in (0x5D, 0x7D):  # ] }
            depth -= 1
    return True


def loads_strict(raw: bytes) -> Any:
    """Parse ``raw`` or raise ``json.JSONDecodeError`` (which FastAPI turns into our 400)."""
    text = ""
    try:
        text = raw.decode("utf-8")
        if not _depth_ok(raw):
            raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
        return json.loads(
            text,
            object_pairs_hook=_unique_members,
            parse_int=_parse_int,
            parse_constant=_reject_constant,
        )
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
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads_strict(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    """Routes whose request body, if any, is parsed by ``loads_strict`` and must be JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        expects_body = self.body_field is not None

        async def strict_handler(request: Request) -> Response:
            if expects_body and not is_json_media_type(request.headers.get("content-type")):
                raise UnsupportedMediaType(
                    "the request body must be JSON: Content-Type: application/json"
                )
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict_handler
