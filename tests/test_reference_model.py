"""The reference model (``tests/support/model.py``) checked on its own, so that a mistake it
shared with the service would not go unnoticed: the SPEC examples, its refusals, and the
read semantics (projection, as-of) on a small history worked out by hand."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.model import MAX_VALUE, Account, Rejected
from tests.support.spec_examples import EXAMPLES, Example


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda e: e.name)
def test_model_replays_the_spec_examples(example: Example) -> None:
    """Every answer, the ledger and the live grants are the table's; so are the core
    class's results, replayed through ``get_balance`` (which moves the clock)."""
    http, core = Account("a"), Account("a")
    for step in example.steps:
        if step.op == "balance":
            assert http.read_balance(**step.args) == step.body("a"), step
            assert core.get_balance(**step.args)["balance"] == step.returns, step
            continue
        assert getattr(http, step.op)(**step.args) == step.body("a"), step
        answer = getattr(core, step.op)(**step.args)
        if step.op == "consume":  # consume returns the outstanding debt
            assert answer["debt"] == step.returns, step
    assert http.entries == example.ledger()
    assert http.live_grants()["grants"] == example.live_grants


def test_model_rejects() -> None:
    m = Account("a")
    m.get_balance(5)
    calls: list[Callable[[], object]] = [
        lambda: m.get_balance(4),
        lambda: m.grant(True, 5, 6),
        lambda: m.grant(1, 5, 5),
        lambda: m.consume(1.0, 5),
    ]
    for call in calls:
        with pytest.raises(Rejected):
            call()
    m.grant(MAX_VALUE, 5, 6)
    with pytest.raises(Rejected, match="overflow"):
        m.grant(1, 5, 6)


def test_a_refused_call_changes_nothing() -> None:
    m = Account("a")
    m.grant(10, 0, 5)
    m.grant(MAX_VALUE - 10, 1, 100)
    before = m.copy()
    with pytest.raises(Rejected) as refused:
        m.grant(20, 5, 200)  # 10 expire at 5, yet MAX_VALUE - 10 + 20 is too much
    assert (refused.value.kind, refused.value.evicting) == ("overflow", True)
    assert m == before


def test_reads_are_safe_projections_or_as_of() -> None:
    m = Account("a")
    m.grant(100, 2, 10)
    m.grant(50, 4, 8)
    m.consume(70, 5)  # 50 from expiry 8, 20 from expiry 10: 80 left
    m.consume(90, 12)  # both expired by 12 (the rest of grant 1 at 10): 90 debt
    m.grant(30, 20, 40)  # settles 30: 60 debt
    before = m.copy()
    figures = {
        t: (m.read_balance(t)["available"], m.read_balance(t)["debt"])
        for t in (0, 1, 2, 4, 5, 9, 10, 12, 19, 20, 39, 40)
    }
    assert figures == {
        0: (0, 0),  # before the first write
        1: (0, 0),
        2: (100, 0),
        4: (150, 0),
        5: (80, 0),
        9: (80, 0),
        10: (0, 0),  # the expiration of grant 1's 80 at 10
        12: (0, 90),
        19: (0, 90),
        20: (0, 60),  # the clock
        39: (0, 60),  # projections
        40: (0, 60),
    }
    assert m.read_balance() == m.read_balance(20)
    assert m == before
    kinds = [(e["kind"], e["timestamp"]) for e in m.entries]
    assert kinds == [
        ("grant", 2),
        ("grant", 4),
        ("consumption", 5),
        ("expiration", 10),
        ("consumption", 12),
        ("grant", 20),
    ]
