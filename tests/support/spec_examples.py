"""SPEC Examples 1 and 2, once: each step's operation, what the core class returns for it
(section 1) and what the HTTP API answers (section 3), and the account's ledger and live
grants at the end. Written out by hand from the SPEC, not computed by the reference model.

Every test that replays an example (the core class, the API in process and over a real
server, a batch, the generated client) reads it from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

JSON = dict[str, Any]
Op = Literal["grant", "consume", "balance"]
T = TypeVar("T")


@dataclass(frozen=True)
class Step:
    op: Op
    args: JSON  # the core call's keyword arguments, also the request's members
    returns: int | None  # the core call's result: None for a grant
    answer: JSON  # the HTTP answer's body, without ``account_id``

    @property
    def status(self) -> int:
        return 201 if self.op == "grant" else 200

    @property
    def core_method(self) -> str:
        return "get_balance" if self.op == "balance" else self.op

    @property
    def positional(self) -> tuple[int, ...]:
        return tuple(self.args.values())

    def send(
        self,
        grant: Callable[[int, int, int], T],
        consume: Callable[[int, int], T],
        balance: Callable[[int], T],
    ) -> T:
        """Call the one of ``grant(amount, timestamp, expiry)``, ``consume(amount,
        timestamp)`` and ``balance(timestamp)`` that is this step, with its arguments."""
        if self.op == "grant":
            return grant(self.args["amount"], self.args["timestamp"], self.args["expiry"])
        if self.op == "consume":
            return consume(self.args["amount"], self.args["timestamp"])
        return balance(self.args["timestamp"])

    def body(self, account_id: str) -> JSON:
        """The HTTP answer's body on ``account_id``."""
        return {"account_id": account_id, **self.answer}

    def batch_operation(self, account_id: str) -> JSON:
        """The step as one operation of ``POST /v1/batch``."""
        return {"op": self.op, "account_id": account_id, **self.args}

    def batch_result(self, account_id: str) -> JSON:
        return {"op": self.op, "status": self.status, "body": self.body(account_id)}


def _grant(amount: int, timestamp: int, expiry: int, **answer: Any) -> Step:
    args = {"amount": amount, "timestamp": timestamp, "expiry": expiry}
    body = {**args, **answer, "resources": None, "name": None, "metadata": None}
    return Step("grant", args, None, body)


def _consume(amount: int, timestamp: int, returns: int, **answer: Any) -> Step:
    args = {"amount": amount, "timestamp": timestamp}
    return Step("consume", args, returns, {**args, "debt": returns, **answer, "resource": None})


def _balance(timestamp: int, returns: int, available: int, debt: int) -> Step:
    assert returns == available - debt
    answer = {
        "timestamp": timestamp,
        "balance": returns,
        "available": available,
        "debt": debt,
        "resource": None,
    }
    return Step("balance", {"timestamp": timestamp}, returns, answer)


@dataclass(frozen=True)
class Example:
    name: str
    steps: tuple[Step, ...]
    live_grants: list[JSON]  # GET .../grants at the end: [{grant_id, expiry, remaining}]
    expirations: list[JSON] = field(default_factory=list)  # the ledger's expiration entries

    def __post_init__(self) -> None:
        """SPEC section 6's members, the same in every example: writes come in timestamp
        order and the lateness window is 0, so the watermark is the clock (the latest write's
        timestamp), no write restates anything, and a read before the clock is final."""
        clock = 0
        steps: list[Step] = []
        for step in self.steps:
            if step.op == "balance":
                timestamp = step.args["timestamp"]
                extra: JSON = {"watermark": clock, "final": timestamp < clock}
            else:
                clock = step.args["timestamp"]
                extra = {"watermark": clock, "restated": 0}
            steps.append(Step(step.op, step.args, step.returns, {**step.answer, **extra}))
        object.__setattr__(self, "steps", tuple(steps))
        object.__setattr__(self, "clock", clock)

    @property
    def last(self) -> Step:
        return self.steps[-1]

    def ledger(self) -> list[JSON]:
        """Every entry of the account's ledger at the end, in sequence order: each write's
        answer as an entry, and the expirations; none restated, final before the clock."""
        kinds = {"grant": "grant", "consume": "consumption"}
        writes = [
            {
                "kind": kinds[s.op],
                **{k: v for k, v in s.answer.items() if k not in ("watermark", "restated")},
            }
            for s in self.steps
            if s.op in kinds
        ]
        clock: int = getattr(self, "clock")  # noqa: B009 (set in __post_init__)
        return sorted(
            (
                {**e, "revision": 0, "final": e["timestamp"] < clock}
                for e in [*writes, *self.expirations]
            ),
            key=lambda e: e["sequence"],
        )


EXAMPLE_1 = Example(
    name="example-1",
    steps=(
        _grant(100, 0, 10, grant_id=1, sequence=1, balance=100, available=100, debt=0,
               settled_debt=0, retained=100),
        _grant(50, 2, 5, grant_id=2, sequence=2, balance=150, available=150, debt=0,
               settled_debt=0, retained=50),
        # 50 from the expiry-5 grant, 20 from expiry-10 (80 left)
        _consume(70, 3, 0, sequence=3, balance=80, available=80, consumed=70, debt_added=0,
                 allocation=[{"grant_id": 2, "expiry": 5, "amount": 50, "resources": None},
                             {"grant_id": 1, "expiry": 10, "amount": 20, "resources": None}]),
        _balance(4, 80, available=80, debt=0),
        # 80 consumed, 10 become debt; ``debt`` is the total, which consume returns
        _consume(90, 8, 10, sequence=4, balance=-10, available=0, consumed=80, debt_added=10,
                 allocation=[{"grant_id": 1, "expiry": 10, "amount": 80, "resources": None}]),
        _balance(8, -10, available=0, debt=10),
        # 10 settle the debt, 20 stay active
        _grant(30, 12, 20, grant_id=3, sequence=5, balance=20, available=20, debt=0,
               settled_debt=10, retained=20),
        _balance(12, 20, available=20, debt=0),
    ),
    live_grants=[
        {"grant_id": 3, "expiry": 20, "remaining": 20,
         "resources": None, "name": None, "metadata": None}
    ],
)  # fmt: skip

EXAMPLE_2 = Example(
    name="example-2",
    steps=(
        _grant(50, 0, 5, grant_id=1, sequence=1, balance=50, available=50, debt=0,
               settled_debt=0, retained=50),
        _balance(5, 0, available=0, debt=0),  # expired at t=5
        _consume(20, 6, 20, sequence=3, balance=-20, available=0, consumed=0, debt_added=20,
                 allocation=[]),
        _balance(6, -20, available=0, debt=20),
    ),
    live_grants=[],
    # The grant's 50, recorded when the consumption at 6 moved the clock past its expiry.
    expirations=[
        {"sequence": 2, "kind": "expiration", "timestamp": 5, "grant_id": 1, "expiry": 5,
         "amount": 50, "balance": 0, "available": 0, "debt": 0, "resources": None},
    ],
)  # fmt: skip

EXAMPLES = (EXAMPLE_1, EXAMPLE_2)
