"""A reference model of one account in event time (SPEC section 6), at the HTTP level:
the answers of writes and reads, the ledger as ``GET .../ledger`` lists it, the live grants
and the settings, as JSON.

It is sort-and-replay, written plainly from SPEC sections 1, 5, 6 and 7:

- the accepted writes are kept in effective order, (timestamp, arrival);
- the account's state is what replaying them in that order on an empty account gives: live
  grants are a list of ``Held`` in no particular order (the next to draw is found by
  sorting on (expiry, width, grant's timestamp, grant id), the expired ones by filtering);
  debt is a list of ``[class, amount]`` in the order incurred, which a grant settles from
  the front, taking only the classes it could have paid;
- each write's lines are what the replay gives at its place: the expirations its timestamp
  reaches (by expiry, then grant), then its own line, each with the totals right after it;
- identity and history of lines, which a replay alone cannot tell: a write's line is
  identified by its arrival, an expiration's by its grant (a grant expires at most once).
  After each accepted write the model compares the new replay's lines with the previous
  ones: a line whose effect changed is restated (``revision`` + 1), a line that no longer
  exists (an expiration undone) is removed and counted as restated, and the new lines are
  numbered in listing order with the next sequences (an undone expiration that comes back
  is new: sequences are never reused).

One shortcut, which changes no result: the state before every write is kept, so a write at
effective position ``p`` replays from the state before ``p`` (the writes before it are the
same, so is what they give). ``check_replay`` replays everything from scratch and compares.

Refusals: a write before the watermark is 409; a void names a grant the account has (else
404), not already voided (else 409), at or after the grant's timestamp (else 422), checked
in that order before the watermark (the service reads the grant's entries first). Limits
and totals past 2^53-1 are not modelled: the loads that use this model stay far from them.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Literal

JSON = dict[str, Any]
Kind = Literal["grant", "consume", "void"]
UNRESTRICTED_WIDTH = 17  # more than the 16 classes a grant may list: unrestricted is widest


class Refused(Exception):
    """The service must refuse the write with ``status`` and this problem ``slug``."""

    def __init__(self, status: int, slug: str, **members: Any) -> None:
        super().__init__(f"{status} {slug} {members}")
        self.status = status
        self.slug = slug
        self.members = members


@dataclass(frozen=True)
class Write:
    """An accepted write. ``arrival``: 1, 2, ... in the order the account accepted them.
    ``grant_id``: a grant's own id, or the grant a void names."""

    arrival: int
    kind: Kind
    timestamp: int
    amount: int = 0
    expiry: int = 0
    resources: tuple[str, ...] | None = None  # a grant's classes, sorted
    resource: str | None = None  # a consumption's class
    grant_id: int = 0


@dataclass
class Held:
    grant_id: int
    expiry: int
    granted_at: int
    remaining: int
    resources: tuple[str, ...] | None

    def order(self) -> tuple[int, int, int, int]:
        width = UNRESTRICTED_WIDTH if self.resources is None else len(self.resources)
        return (self.expiry, width, self.granted_at, self.grant_id)

    def pays(self, resource: str | None) -> bool:
        """Whether a consumption of class ``resource`` (None: no class) may draw on it."""
        return self.resources is None or (resource is not None and resource in self.resources)


@dataclass
class State:
    held: list[Held] = field(default_factory=list)
    debts: list[list[Any]] = field(default_factory=list)  # [class or None, amount]

    def copy(self) -> State:
        return State(
            [Held(h.grant_id, h.expiry, h.granted_at, h.remaining, h.resources) for h in self.held],
            [list(d) for d in self.debts],
        )

    @property
    def available(self) -> int:
        return sum(h.remaining for h in self.held)

    @property
    def debt(self) -> int:
        return sum(amount for _, amount in self.debts)

    def available_at(self, timestamp: int, resource: str | None) -> int:
        """Credits live at ``timestamp``: all of them (None), or those class ``resource``
        could draw."""
        return sum(
            h.remaining
            for h in self.held
            if h.expiry > timestamp and (resource is None or h.pays(resource))
        )

    def debt_of(self, resource: str | None) -> int:
        """All debt (None), or the debt of class ``resource``."""
        return sum(a for r, a in self.debts if resource is None or r == resource)


Identity = tuple[str, int]  # ("write", arrival) or ("expiration", grant id)


@dataclass(frozen=True)
class Line:
    """A ledger line as a replay gives it: no sequence, revision or finality yet."""

    identity: Identity
    kind: str
    timestamp: int
    available: int
    debt: int
    effect: JSON  # the kind's members: what a restatement changes, and what it never does


@dataclass
class Known:
    """A line's history: its sequence, its revision, and its latest version."""

    sequence: int
    revision: int
    line: Line


def step(state: State, write: Write) -> list[Line]:
    """Apply one write to ``state`` at its effective position; return its lines."""
    t = write.timestamp
    lines: list[Line] = []
    available, debt = state.available, state.debt
    for h in sorted((h for h in state.held if h.expiry <= t), key=lambda h: (h.expiry, h.grant_id)):
        state.held.remove(h)
        available -= h.remaining
        effect: JSON = {
            "grant_id": h.grant_id,
            "expiry": h.expiry,
            "amount": h.remaining,
            "resources": _listed(h.resources),
        }
        lines.append(
            Line(("expiration", h.grant_id), "expiration", h.expiry, available, debt, effect)
        )
    if write.kind == "grant":
        left = write.amount
        for item in state.debts:
            if left and (write.resources is None or item[0] in write.resources):
                take = min(left, item[1])
                item[1] -= take
                left -= take
        state.debts = [d for d in state.debts if d[1]]
        if left:
            state.held.append(Held(write.grant_id, write.expiry, t, left, write.resources))
        effect = {
            "grant_id": write.grant_id,
            "amount": write.amount,
            "expiry": write.expiry,
            "settled_debt": write.amount - left,
            "retained": left,
            "resources": _listed(write.resources),
            "name": None,
            "metadata": None,
        }
        kind = "grant"
    elif write.kind == "consume":
        left = write.amount
        allocation: list[JSON] = []
        for h in sorted((h for h in state.held if h.pays(write.resource)), key=Held.order):
            if not left:
                break
            take = min(left, h.remaining)
            h.remaining -= take
            left -= take
            allocation.append(
                {
                    "grant_id": h.grant_id,
                    "expiry": h.expiry,
                    "amount": take,
                    "resources": _listed(h.resources),
                }
            )
        state.held = [h for h in state.held if h.remaining]
        if left:
            state.debts.append([write.resource, left])
        effect = {
            "amount": write.amount,
            "consumed": write.amount - left,
            "debt_added": left,
            "allocation": allocation,
            "resource": write.resource,
        }
        kind = "consumption"
    else:
        target = [h for h in state.held if h.grant_id == write.grant_id]
        removed = target[0].remaining if target else 0
        state.held = [h for h in state.held if h.grant_id != write.grant_id]
        effect = {"grant_id": write.grant_id, "amount": removed}
        kind = "void"
    own = Line(("write", write.arrival), kind, t, state.available, state.debt, effect)
    return [*lines, own]


@dataclass
class LateAccount:
    account_id: str
    window: int
    inherited: bool = True  # the window is the service's (no PUT .../settings)
    clock: int = 0
    watermark: int = 0
    writes: list[Write] = field(default_factory=list)  # effective order
    states: list[State] = field(default_factory=lambda: [State()])  # before each write, + after
    groups: list[list[Line]] = field(default_factory=list)  # each write's lines
    known: dict[Identity, Known] = field(default_factory=dict)
    next_sequence: int = 1
    next_arrival: int = 1
    next_grant_id: int = 1
    grants: dict[int, Write] = field(default_factory=dict)  # grant id -> its write
    voided: dict[int, int] = field(default_factory=dict)  # grant id -> the void's timestamp

    @property
    def exists(self) -> bool:
        return bool(self.writes)

    def copy(self) -> LateAccount:
        return LateAccount(
            self.account_id,
            self.window,
            self.inherited,
            self.clock,
            self.watermark,
            list(self.writes),
            list(self.states),  # states and lines are never changed in place, only replaced
            [list(g) for g in self.groups],
            {k: Known(v.sequence, v.revision, v.line) for k, v in self.known.items()},
            self.next_sequence,
            self.next_arrival,
            self.next_grant_id,
            dict(self.grants),
            dict(self.voided),
        )

    # -- writes ----------------------------------------------------------------------------

    def grant(
        self, amount: int, timestamp: int, expiry: int, resources: list[str] | None = None
    ) -> JSON:
        """Accept a grant (or raise ``Refused``, changing nothing); the body answered."""
        classes = None if resources is None else tuple(sorted(resources))
        write = Write(
            0, "grant", timestamp, amount=amount, expiry=expiry, resources=classes,
            grant_id=self.next_grant_id,
        )  # fmt: skip
        return self._accept(write)

    def consume(self, amount: int, timestamp: int, resource: str | None = None) -> JSON:
        return self._accept(Write(0, "consume", timestamp, amount=amount, resource=resource))

    def void(self, grant_id: int, timestamp: int) -> JSON:
        refused = self.refusal("void", timestamp, grant_id)
        if refused is not None:
            raise refused
        return self._accept(Write(0, "void", timestamp, grant_id=grant_id))

    def refusal(self, kind: Kind, timestamp: int, grant_id: int = 0) -> Refused | None:
        """What the service must answer a write of ``kind`` at ``timestamp`` (a void: of
        ``grant_id``) instead of accepting it; None: it is accepted. Amounts, expiries and
        classes aside: the loads keep them valid."""
        if kind == "void":
            granted = self.grants.get(grant_id)
            if granted is None:
                return Refused(404, "grant-not-found")
            if grant_id in self.voided:
                return Refused(409, "grant-already-voided", voided_at=self.voided[grant_id])
            if timestamp < granted.timestamp:
                return Refused(422, "invalid-input")
        if timestamp < self.watermark:
            return Refused(
                409,
                "timestamp-regression",
                account_timestamp=self.clock,
                watermark=self.watermark,
            )
        return None

    def set_window(self, window: int | None, default: int) -> JSON:
        self.window = default if window is None else window
        self.inherited = window is None
        self.watermark = max(self.watermark, self.clock - self.window)
        return self.settings()

    def _accept(self, draft: Write) -> JSON:
        refused = self.refusal("consume", draft.timestamp)  # the watermark: any write's
        if refused is not None:
            raise refused
        write = Write(
            self.next_arrival, draft.kind, draft.timestamp, draft.amount, draft.expiry,
            draft.resources, draft.resource, draft.grant_id,
        )  # fmt: skip
        # After every write with a timestamp at or before its own: (timestamp, arrival).
        p = bisect.bisect_right([w.timestamp for w in self.writes], write.timestamp)
        writes = [*self.writes[:p], write, *self.writes[p:]]
        states = self.states[: p + 1]
        groups = self.groups[:p]
        state = states[p].copy()
        for w in writes[p:]:
            groups.append(step(state, w))
            states.append(state.copy())
        # What changed: the lines from position p on, before and after.
        before = {line.identity for g in self.groups[p:] for line in g}
        after = [line for g in groups[p:] for line in g]
        keys = [_listing_key(line) for line in after]
        assert keys == sorted(keys), "the replay's lines are not in listing order"
        restated = 0
        fresh: list[Line] = []
        for line in after:
            known = self.known.get(line.identity)
            if known is None:
                fresh.append(line)
                continue
            if known.line.effect != line.effect:
                known.revision += 1
                restated += 1
            known.line = line
        for identity in before - {line.identity for line in after}:
            assert identity[0] == "expiration", identity
            del self.known[identity]
            restated += 1
        for line in fresh:  # numbered in listing order
            self.known[line.identity] = Known(self.next_sequence, 0, line)
            self.next_sequence += 1
        self.writes, self.states, self.groups = writes, states, groups
        self.next_arrival += 1
        if write.kind == "grant":
            self.grants[write.grant_id] = write
            self.next_grant_id += 1
        elif write.kind == "void":
            self.voided[write.grant_id] = write.timestamp
        self.clock = max(self.clock, write.timestamp)
        self.watermark = max(self.watermark, self.clock - self.window)
        own = self.known[("write", write.arrival)]
        final = states[-1]
        body: JSON = {
            "account_id": self.account_id,
            "sequence": own.sequence,
            "timestamp": write.timestamp,
            **own.line.effect,
            "balance": final.available - final.debt,
            "available": final.available,
            "debt": final.debt,
            "watermark": self.watermark,
            "restated": restated,
        }
        return body

    # -- reads -----------------------------------------------------------------------------

    @property
    def entries(self) -> list[JSON]:
        """The whole ledger as ``GET .../ledger`` lists it, in effective order."""
        out: list[JSON] = []
        for group in self.groups:
            for line in group:
                known = self.known[line.identity]
                assert known.line == line
                out.append(
                    {
                        "sequence": known.sequence,
                        "kind": line.kind,
                        "timestamp": line.timestamp,
                        "balance": line.available - line.debt,
                        "available": line.available,
                        "debt": line.debt,
                        "revision": known.revision,
                        "final": line.timestamp < self.watermark,
                        **line.effect,
                    }
                )
        return out

    def state_at(self, timestamp: int) -> State:
        """The state after every write with a timestamp at or before ``timestamp``."""
        return self.states[bisect.bisect_right([w.timestamp for w in self.writes], timestamp)]

    def read_balance(self, timestamp: int | None = None, resource: str | None = None) -> JSON:
        """``GET .../balance[?timestamp=T][&resource=X]``: at the clock without T; the
        projection at T at or after the clock; the as-of state at T before it."""
        at = self.clock if timestamp is None else timestamp
        state = self.states[-1] if at >= self.clock else self.state_at(at)
        available, debt = state.available_at(at, resource), state.debt_of(resource)
        return {
            "account_id": self.account_id,
            "timestamp": at,
            "balance": available - debt,
            "available": available,
            "debt": debt,
            "resource": resource,
            "watermark": self.watermark,
            "final": at < self.watermark,
        }

    def live_grants(self, resource: str | None = None) -> JSON:
        """``GET .../grants[?resource=X]``: the view at the clock and the live grants in
        consumption order."""
        held = self.states[-1].held
        chosen = held if resource is None else [h for h in held if h.pays(resource)]
        grants = [
            {
                "grant_id": h.grant_id,
                "expiry": h.expiry,
                "remaining": h.remaining,
                "resources": _listed(h.resources),
                "name": None,
                "metadata": None,
            }
            for h in sorted(chosen, key=Held.order)
        ]
        return {**self.read_balance(None, resource), "grants": grants}

    def settings(self) -> JSON:
        return {
            "account_id": self.account_id,
            "lateness_window": self.window,
            "inherited": self.inherited,
            "clock": self.clock,
            "watermark": self.watermark,
        }

    # -- self-check ----------------------------------------------------------------------

    def check_replay(self) -> None:
        """The kept states and lines are what replaying every write from scratch gives."""
        state = State()
        for index, write in enumerate(self.writes):
            assert self.groups[index] == step(state, write), f"lines of write {index}"
            assert _same(self.states[index + 1], state), f"state after write {index}"
        keys = [(w.timestamp, w.arrival) for w in self.writes]
        assert keys == sorted(keys)


def _listing_key(line: Line) -> tuple[int, int, int]:
    """Listing order: (timestamp, expirations first by grant, then writes by arrival)."""
    return (line.timestamp, line.identity[0] == "write", line.identity[1])


def _same(a: State, b: State) -> bool:
    return sorted(map(_held_key, a.held)) == sorted(map(_held_key, b.held)) and a.debts == b.debts


def _held_key(h: Held) -> tuple[Any, ...]:
    return (h.grant_id, h.expiry, h.granted_at, h.remaining, h.resources)


def _listed(resources: tuple[str, ...] | None) -> list[str] | None:
    return None if resources is None else list(resources)
