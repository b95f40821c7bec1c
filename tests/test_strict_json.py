"""The strict JSON parse's shortcut: a body with no run of 20 digits is parsed without the
per-integer hook, and must come out exactly as the hook would have made it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.api.strict_json import _parse_int, _reject_constant, _unique_members, loads_strict


def _with_hook(raw: bytes) -> Any:
    """The parse every body took before the shortcut: the reference."""
    return json.loads(
        raw.decode("utf-8"),
        object_pairs_hook=_unique_members,
        parse_int=_parse_int,
        parse_constant=_reject_constant,
    )


# Integers around the clamp (20 characters, sign included, is the last one kept as it is),
# and strings of digits, which send a body down the hook's path without changing it.
_INTEGERS = st.one_of(
    st.integers(min_value=-(10**25), max_value=10**25),
    st.integers(min_value=0, max_value=25).map(lambda n: int("9" * n or "0")),
    st.integers(min_value=0, max_value=25).map(lambda n: -int("9" * n or "0")),
)
_VALUES = st.recursive(
    st.one_of(_INTEGERS, st.text(alphabet="0123456789ab", max_size=30), st.booleans()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(alphabet="abc", max_size=3), inner, max_size=4),
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_the_shortcut_parses_as_the_hook_does(value: Any) -> None:
    raw = json.dumps(value).encode()
    parsed = loads_strict(raw)
    assert parsed == _with_hook(raw)
    assert json.dumps(parsed) == json.dumps(_with_hook(raw))  # types too (int, not float)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("9" * 19, int("9" * 19)),  # no run of 20: the shortcut, kept as it is
        ("-" + "9" * 19, -int("9" * 19)),  # 20 characters: kept
        ("9" * 20, int("9" * 20)),  # a run of 20: the hook, which keeps 20 characters
        ("-" + "9" * 20, -(10**20)),  # 21 characters: clamped
        ("9" * 5000, 10**20),  # clamped, never converted
    ],
)
def test_integers_at_the_clamp(text: str, expected: int) -> None:
    assert loads_strict(b'{"amount":' + text.encode() + b"}") == {"amount": expected}


def test_a_duplicate_member_is_refused_on_both_paths() -> None:
    for raw in (b'{"a":1,"a":2}', b'{"a":1,"a":' + b"9" * 30 + b"}"):
        with pytest.raises(json.JSONDecodeError, match="duplicate member"):
            loads_strict(raw)
