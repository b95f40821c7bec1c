"""The reference model of one account, the one every test compares the service with.

It is SPEC section 1, the ledger's entry format and section 3's reads, written as plainly as
possible, so that a disagreement with the service points at the service:

- live credits are a list of ``[expiry, grant_id, remaining]`` live grants in no particular
  order; the next one to draw from is found by sorting, the expired ones by filtering;
- a call is checked completely before anything changes: a rejected call (``Rejected``, of
  kind "invalid", "regression" or "overflow") changes nothing, not even the clock;
- a write (``grant``, ``consume``) first records an ``expiration`` entry for every live
  grant expired by its timestamp, in (expiry, grant) order, then its own entry, and returns the
  body the service answers: the account id and that entry without its ``kind``;
- ``read_balance(T)`` is the HTTP read, which is safe: at or after the clock the projected
  state at ``T``, before it the totals after the last entry at or before ``T`` (zeros before
  the first), without ``T`` the state at the clock;
- ``get_balance(T)`` is the core class's call, which takes part in the monotonic order: it
  moves the clock (recording the expirations) and answers the state there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeGuard

JSON = dict[str, Any]
MAX_VALUE = 2**53 - 1  # SPEC section 1 (written here, not imported from the service)
RejectionKind = Literal["invalid", "regression", "overflow"]


class Rejected(Exception):
    """The model refuses a call. ``evicting``: live grants would have expired had the call
    been accepted (a rejected call must not expire them)."""

    def __init__(self, kind: RejectionKind, *, evicting: bool = False) -> None:
        super().__init__(kind)
        self.kind: RejectionKind = kind
        self.evicting = evicting


def is_valid(value: object, low: int) -> TypeGuard[int]:
    """An integer (not a bool) in ``[low, 2^53-1]``."""
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= MAX_VALUE


@dataclass
class Account:
    account_id: str
    clock: int = 0
    debt: int = 0
    next_grant_id: int = 1
    held: list[list[int]] = field(default_factory=list)  # [expiry, grant_id, remaining]
    # grant_id -> (name, metadata) as given (SPEC section 7)
    labels: dict[int, tuple[str | None, dict[str, str] | None]] = field(default_factory=dict)
    # The ledger in order, as recorded (``entries`` shows it as GET .../ledger lists it).
    recorded: list[JSON] = field(default_factory=list)
    # (grant_id, expiry, amount) of the live grants the latest accepted call expired
    expired: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def exists(self) -> bool:
        """Whether a write has created the account (every write records an entry)."""
        return bool(self.recorded)

    @property
    def entries(self) -> list[JSON]:
        """The ledger as GET .../ledger lists it: writes in timestamp order here, so no entry
        is ever restated (revision 0), and with a lateness window of 0 the watermark is the
        clock: entries before it are final."""
        return [{**e, "revision": 0, "final": e["timestamp"] < self.clock} for e in self.recorded]

    @property
    def available(self) -> int:
        return sum(b[2] for b in self.held)

    def in_consumption_order(self) -> list[list[int]]:
        return sorted(self.held, key=lambda b: (b[0], b[1]))

    def copy(self) -> Account:
        """An independent copy (recorded entries never change, so they are shared)."""
        return replace(
            self,
            held=[list(b) for b in self.held],
            recorded=list(self.recorded),
            expired=list(self.expired),
            labels=dict(self.labels),
        )

    # -- writes ----------------------------------------------------------------------------

    def grant(
        self,
        amount: object,
        timestamp: object,
        expiry: object,
        name: str | None = None,
        metadata: dict[str, str] | None = None,
    ) -> JSON:
        if not (is_valid(amount, 1) and is_valid(timestamp, 0) and is_valid(expiry, 0)):
            raise Rejected("invalid")
        if expiry <= timestamp:
            raise Rejected("invalid")
        self._check_time(timestamp)
        settled = min(amount, self.debt)
        retained = amount - settled
        if self._live_at(timestamp) + retained > MAX_VALUE:
            raise Rejected("overflow", evicting=self._expires_by(timestamp))
        self._move_clock(timestamp)
        grant_id = self.next_grant_id
        self.next_grant_id += 1
        self.debt -= settled
        if retained:
            self.held.append([expiry, grant_id, retained])
        self.labels[grant_id] = (name, metadata)
        return self._write(
            "grant",
            timestamp,
            grant_id=grant_id,
            amount=amount,
            expiry=expiry,
            settled_debt=settled,
            retained=retained,
            resources=None,
            name=name,
            metadata=metadata,
        )

    def consume(self, amount: object, timestamp: object) -> JSON:
        if not (is_valid(amount, 1) and is_valid(timestamp, 0)):
            raise Rejected("invalid")
        self._check_time(timestamp)
        consumed = min(amount, self._live_at(timestamp))
        debt_added = amount - consumed
        if self.debt + debt_added > MAX_VALUE:
            raise Rejected("overflow")
        self._move_clock(timestamp)
        allocation: list[JSON] = []
        left = consumed
        for live in self.in_consumption_order():
            if not left:
                break
            take = min(left, live[2])
            live[2] -= take
            left -= take
            allocation.append(
                {"grant_id": live[1], "expiry": live[0], "amount": take, "resources": None}
            )
        self.held = [b for b in self.held if b[2] > 0]
        self.debt += debt_added
        return self._write(
            "consumption",
            timestamp,
            amount=amount,
            consumed=consumed,
            debt_added=debt_added,
            allocation=allocation,
            resource=None,
        )

    # -- reads -----------------------------------------------------------------------------

    def read_balance(self, timestamp: int | None = None) -> JSON:
        """``GET .../balance[?timestamp=T]``: changes nothing."""
        if timestamp is None:
            return self._view(self.clock, self.available, self.debt)
        if not is_valid(timestamp, 0):
            raise Rejected("invalid")
        if timestamp >= self.clock:
            return self._view(timestamp, self._live_at(timestamp), self.debt)
        last = [e for e in self.recorded if e["timestamp"] <= timestamp]
        available, debt = (last[-1]["available"], last[-1]["debt"]) if last else (0, 0)
        return self._view(timestamp, available, debt)

    def live_grants(self) -> JSON:
        """``GET .../grants``: the state at the clock and the live grants in consumption
        order."""
        grants = [
            {
                "grant_id": g,
                "expiry": e,
                "remaining": r,
                "resources": None,
                "name": self.labels[g][0],
                "metadata": self.labels[g][1],
            }
            for e, g, r in self.in_consumption_order()
        ]
        return {**self.read_balance(), "grants": grants}

    def get_balance(self, timestamp: object) -> JSON:
        """The core class's ``get_balance``: moves the clock to ``timestamp``."""
        if not is_valid(timestamp, 0):
            raise Rejected("invalid")
        self._check_time(timestamp)
        self._move_clock(timestamp)
        return self._view(timestamp, self.available, self.debt)

    # -- the parts -------------------------------------------------------------------------

    def _check_time(self, timestamp: int) -> None:
        if timestamp < self.clock:
            raise Rejected("regression")

    def _live_at(self, timestamp: int) -> int:
        return sum(b[2] for b in self.held if b[0] > timestamp)

    def _expires_by(self, timestamp: int) -> bool:
        return any(b[0] <= timestamp for b in self.held)

    def _move_clock(self, timestamp: int) -> None:
        self.expired = []
        for expiry, grant_id, remaining in sorted(b for b in self.held if b[0] <= timestamp):
            self.held.remove([expiry, grant_id, remaining])
            self._record(
                "expiration",
                expiry,
                grant_id=grant_id,
                expiry=expiry,
                amount=remaining,
                resources=None,
            )
            self.expired.append((grant_id, expiry, remaining))
        self.clock = timestamp

    def _record(self, kind: str, timestamp: int, **details: Any) -> JSON:
        available = self.available
        entry: JSON = {
            "sequence": len(self.recorded) + 1,
            "kind": kind,
            "timestamp": timestamp,
            "balance": available - self.debt,
            "available": available,
            "debt": self.debt,
            **details,
        }
        self.recorded.append(entry)
        return entry

    def _write(self, kind: str, timestamp: int, **details: Any) -> JSON:
        entry = self._record(kind, timestamp, **details)
        return {
            "account_id": self.account_id,
            **{k: v for k, v in entry.items() if k != "kind"},
            "watermark": self.clock,  # a lateness window of 0: the clock
            "restated": 0,
        }

    def _view(self, timestamp: int, available: int, debt: int) -> JSON:
        return {
            "account_id": self.account_id,
            "timestamp": timestamp,
            "balance": available - debt,
            "available": available,
            "debt": debt,
            "resource": None,
            "watermark": self.clock,
            "final": timestamp < self.clock,
        }
