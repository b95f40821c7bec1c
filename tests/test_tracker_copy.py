"""``GPUCreditTracker.copy`` against a copy made the way it was first written.

``_Scopes.copy`` builds each class heap in one go (a filtered copy of the source's heap,
heapified). The reference here builds the copy's scopes as the first version did: an empty
``_Scopes`` and ``add`` of each live scoped entry's copy, one push per class it lists. After a
random history (grants with and without classes, consumptions with and without a class,
debts, settling, voids, expirations, the class limit), the two copies must hold the same
internal sums and counts and behave the same in every later call, result for result and
refusal for refusal; copying must not change the source either. The model test
(``tests/test_core_classes_model.py``) checks a copy's answers against a model; this one also
checks the internal counts (classes in use, dead entries, sums) that only later calls read,
and copies made from trackers with a void index (dead entries in class heaps).
"""

from __future__ import annotations

import random
from typing import Any
from unittest import mock

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, event, given, settings

from app.domain import MAX_CLASSES, GPUCreditTracker, LedgerError
from app.domain.tracker import _Scopes

_FEW = [f"c{i}" for i in range(5)]  # with max_classes=3: the limit is reached often
_MANY = [f"g{i}" for i in range(MAX_CLASSES + 6)]  # with the default limit of 64


def _old_scopes_copy(self: _Scopes) -> _Scopes:
    """The copy's scopes as first written: ``add`` of each live entry's copy."""
    twin = _Scopes()
    for entry in self.entries(None):
        twin.add([*entry])
    return twin


def _reference_copy(tracker: GPUCreditTracker) -> GPUCreditTracker:
    with mock.patch.object(_Scopes, "copy", _old_scopes_copy):
        return tracker.copy()


def _shape(t: GPUCreditTracker) -> dict[str, Any]:
    """Everything a later call can read, in a form independent of heap layout and identity."""
    out: dict[str, Any] = {
        "available": t._available,
        "debt": t._debt,
        "clock": t._clock,
        "next_grant_id": t._next_grant_id,
        "next_expiry": t._next_expiry,
        "reordered": t._reordered,
        "heap": sorted(tuple(e) for e in t._heap),
        "debts": t.debts(),
        "by_class": dict(t._queue.by_class) if t._queue is not None else None,
        "index": sorted(t._index) if t._index is not None else None,
        "state": t.state(),
    }
    s = t._scopes
    if s is None:
        out["scopes"] = None
    else:
        members = {c: {id(e) for e in h} for c, h in s.class_heaps.items()}
        out["scopes"] = {
            "heaps": {c: sorted(tuple(e) for e in h) for c, h in s.class_heaps.items()},
            "dead": dict(s.class_dead),
            "class_available": dict(s.class_available),
            "in_use": dict(s.in_use),
            "available": s.available,
            "live": s.live,
            # Each live grant is one entry shared by the heaps of its classes.
            "shared": sorted(
                (e[3], tuple(sorted(c for c, ids in members.items() if id(e) in ids)))
                for e in s.entries(None)
            ),
        }
    return out


def _identity(t: GPUCreditTracker) -> Any:
    """The source's exact layout and objects (a copy must not touch them)."""
    s = t._scopes
    scopes = None
    if s is not None:
        scopes = (
            {c: [(id(e), tuple(e)) for e in h] for c, h in s.class_heaps.items()},
            list(s.class_dead.items()),
            list(s.class_available.items()),
            list(s.in_use.items()),
            s.available,
            s.live,
        )
    return (
        [(id(e), tuple(e)) for e in t._heap],
        scopes,
        None if t._index is None else [(g, id(e)) for g, e in t._index.items()],
        t.debts(),
        t._available,
        t._debt,
        t._clock,
        t._next_expiry,
    )


@st.composite
def _op(draw: st.DrawFn, names: list[str], grants_only: bool = False) -> tuple[Any, ...]:
    kinds = ["grant"] if grants_only else ["grant"] * 4 + ["consume"] * 3 + ["void", "balance"]
    kind = draw(st.sampled_from(kinds))
    dt = draw(st.sampled_from([0, 0, 0, 1, 2]))
    name = st.sampled_from(names[:4]) | st.sampled_from(names)  # a few names often
    resource = draw(st.none() | name)
    if kind == "grant":
        most = 3 if len(names) < 16 else 16
        classes = draw(st.none() | st.lists(name, min_size=1, max_size=most, unique=True))
        grant_id = draw(st.none() | st.none() | st.none() | st.integers(1, 40))
        return (
            kind,
            draw(st.integers(1, 30)),
            dt,
            draw(st.integers(1, 30)),
            classes,
            grant_id,
        )
    if kind == "consume":
        return (kind, draw(st.integers(1, 8) | st.integers(1, 60)), dt, resource)
    if kind == "void":
        return (kind, draw(st.integers(0, 40)), dt)
    return (kind, dt, resource)


def _run(t: GPUCreditTracker, op: tuple[Any, ...]) -> Any:
    kind = op[0]
    try:
        if kind == "grant":
            _, amount, dt, life, classes, grant_id = op
            at = t.clock + dt
            return t.apply_grant(amount, at, at + life, resources=classes, grant_id=grant_id)
        if kind == "consume":
            _, amount, dt, resource = op
            return t.apply_consume(amount, t.clock + dt, resource)
        if kind == "void":
            _, grant_id, dt = op
            return t.apply_void(grant_id, t.clock + dt)
        _, dt, resource = op
        return t.apply_balance(t.clock + dt, resource)
    except LedgerError as error:
        return (type(error).__name__, str(error))


@st.composite
def _history(draw: st.DrawFn) -> tuple[int, list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    few = draw(st.booleans())
    names = _FEW if few else _MANY
    op = _op(names)
    before = draw(st.lists(_op(names, grants_only=True), min_size=3, max_size=25))
    before += draw(st.lists(op, min_size=5, max_size=40))
    after = draw(st.lists(op | st.just(("copy",)), max_size=30))
    return (3 if few else MAX_CLASSES), before, after


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_history())
def test_copy_matches_the_copy_built_by_add(
    history: tuple[int, list[tuple[Any, ...]], list[tuple[Any, ...]]],
) -> None:
    max_classes, before, after = history
    source = GPUCreditTracker(max_live_grants=30, max_classes=max_classes)
    for op in before:
        _run(source, op)
    scopes = source._scopes
    if scopes is not None:
        event(f"classes in use: {min(len(scopes.in_use), 8)}")
        event(
            f"largest class heap: {min(max(map(len, scopes.class_heaps.values()), default=0), 6)}"
        )
        event(f"dead entries in the source: {sum(scopes.class_dead.values()) > 0}")
        event(f"class with debt and live grants: {any(n > 1 for n in scopes.in_use.values())}")
        event(f"class with debt only: {set(scopes.in_use) > set(scopes.class_heaps)}")
    _check_copies(source, after)


def _random_op(rng: random.Random, names: list[str], grants_only: bool) -> tuple[Any, ...]:
    kind = "grant" if grants_only else rng.choice(["grant", "grant", "consume", "void", "balance"])
    dt = rng.choice([0, 0, 0, 0, 1])
    pool = names[:6] if rng.random() < 0.7 else names
    resource = None if rng.random() < 0.2 else rng.choice(pool)
    if kind == "grant":
        classes = (
            None if rng.random() < 0.2 else rng.sample(pool, rng.randint(1, min(4, len(pool))))
        )
        grant_id = rng.randint(1, 400) if rng.random() < 0.05 else None
        return (kind, rng.randint(1, 30), dt, rng.randint(1, 200), classes, grant_id)
    if kind == "consume":
        return (
            kind,
            rng.randint(1, 20) if rng.random() < 0.9 else rng.randint(1, 300),
            dt,
            resource,
        )
    if kind == "void":
        return (kind, rng.randint(1, 400), dt)
    return (kind, dt, resource)


@pytest.mark.parametrize("seed", range(8))
def test_copy_matches_the_copy_built_by_add_on_long_histories(seed: int) -> None:
    """Hundreds of grants: class heaps of dozens of entries, dead entries (a grant used up or
    voided through one class stays dead in the others' heaps), debt of classes, the limit."""
    rng = random.Random(seed)
    few = seed % 2 == 0
    names = _FEW if few else _MANY
    source = GPUCreditTracker(max_live_grants=500, max_classes=4 if few else MAX_CLASSES)
    for _ in range(300):
        _run(source, _random_op(rng, names, grants_only=True))
    for step in range(600):
        _run(source, _random_op(rng, names, grants_only=False))
        if step % 100 == 99:
            after = [_random_op(rng, names, grants_only=False) for _ in range(40)]
            _check_copies(source, [*after[:20], ("copy",), *after[20:]])


def _check_copies(source: GPUCreditTracker, after: list[tuple[Any, ...]]) -> None:
    source.check_invariants()
    untouched = _identity(source)
    shape = _shape(source)
    new = source.copy()
    old = _reference_copy(source)
    assert _identity(source) == untouched, "the copy changed its source"
    new.check_invariants()
    old.check_invariants()
    want = _shape(old)
    assert _shape(new) == want
    # Apart from dead entries and the index (a copy has neither), a copy is its source.
    same = [
        "available",
        "debt",
        "clock",
        "next_grant_id",
        "next_expiry",
        "reordered",
        "debts",
        "by_class",
        "state",
    ]
    assert {k: want[k] for k in same} == {k: shape[k] for k in same}
    if shape["scopes"] is not None:
        for k in ("class_available", "in_use", "available", "live", "shared"):
            assert want["scopes"][k] == shape["scopes"][k], k
    for op in after:
        if op[0] == "copy":  # a copy of a copy
            new, old = new.copy(), _reference_copy(old)
        else:
            assert _run(new, op) == _run(old, op)
        new.check_invariants()
        old.check_invariants()
        assert _shape(new) == _shape(old)
    assert _identity(source) == untouched, "a copy shares mutable state with its source"
