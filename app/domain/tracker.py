"""The pure ledger core: expiring GPU credit grants, debt, and monotonic time for one account.

Standard library only, no clock reads (every call carries its timestamp), no I/O. The HTTP
service, the storage backends and the tests all drive this one class, so the rules of SPEC
section 1 live here and nowhere else.

Design (TIGER_STYLE: limits on everything, assertions on invariants, units in names):

- Live grants sit in a binary min-heap of ``[expiry, grant_id, remaining]`` lists. The key
  ``(expiry, grant_id)`` is unique, so ties on expiry fall back to grant order and the mutable
  ``remaining`` slot is never compared.
- Expired live grants are evicted lazily: every operation first pops the live grants whose expiry
  is at or before its timestamp. Time never goes backwards per account, so an evicted live grant
  can never become live again and eviction is permanent and exact.
- ``_available`` is the running sum of ``remaining`` over the heap, so a balance read is O(1)
  after eviction. Each live grant is pushed once and popped at most once, so every operation is
  O(log n) amortised.
- Every operation validates and computes before it mutates: a rejected call changes nothing,
  not even the clock. Expired live grants popped during a rejected call are pushed back.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Final

_heappush = heapq.heappush  # module globals: one lookup fewer on the hot path
_heappop = heapq.heappop

# 2^53-1: the largest integer every JSON client (JavaScript included) represents exactly.
MAX_VALUE: Final = 2**53 - 1
# Live grants per tracker unless the caller sets another limit: bounds memory per account.
DEFAULT_MAX_LIVE_GRANTS: Final = 1_000_000


class LedgerError(ValueError):
    """Base of every error the core raises; the tracker is unchanged when it is raised."""


class InvalidInput(LedgerError):
    """An argument outside SPEC section 1's input domain."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class TimestampRegression(LedgerError):
    """A call whose timestamp is earlier than the latest one the account has seen."""

    def __init__(self, timestamp: int, account_timestamp: int) -> None:
        super().__init__(
            f"timestamp {timestamp} is earlier than the account's latest timestamp "
            f"{account_timestamp}"
        )
        self.timestamp = timestamp
        self.account_timestamp = account_timestamp


class LiveGrantLimit(LedgerError):
    """A grant that would keep more live grants than the tracker's limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the account already holds {limit} live grants, the most it may hold; "
            "consume or let some expire first"
        )
        self.limit = limit


class NoLiveRoom(LedgerError):
    """A grant that would keep a new live grant when the caller allowed no more (a limit
    outside this account, such as a tenant's quota: see ``apply_grant``'s ``live_room``)."""

    def __init__(self) -> None:
        super().__init__("no room for another live grant")


class TotalOverflow(LedgerError):
    """An operation that would push a running total (available credits, debt) past 2^53-1."""

    def __init__(self, total: str, would_be: int) -> None:
        super().__init__(
            f"the operation would raise the account's {total} to {would_be}, "
            f"past the limit {MAX_VALUE}"
        )
        self.total = total
        self.would_be = would_be


@dataclass(frozen=True, slots=True)
class Expiration:
    """Credits of one grant that expired unused when the account's clock reached its expiry."""

    grant_id: int
    expiry: int
    amount: int


@dataclass(frozen=True, slots=True)
class Allocation:
    """How much one consumption took from one live grant."""

    grant_id: int
    expiry: int
    amount: int


@dataclass(frozen=True, slots=True)
class LiveGrant:
    """A live grant as seen from outside: the rest of one grant, with its expiry."""

    grant_id: int
    expiry: int
    remaining: int


@dataclass(frozen=True, slots=True)
class GrantResult:
    grant_id: int
    settled_debt: int
    retained: int
    available: int
    debt: int
    expired: tuple[Expiration, ...]


@dataclass(frozen=True, slots=True)
class ConsumeResult:
    consumed: int
    debt_added: int
    available: int
    debt: int
    allocation: tuple[Allocation, ...]
    expired: tuple[Expiration, ...]


@dataclass(frozen=True, slots=True)
class BalanceResult:
    available: int
    debt: int
    expired: tuple[Expiration, ...]


@dataclass(frozen=True, slots=True)
class TrackerState:
    """Everything needed to rebuild a tracker exactly: what storage backends persist."""

    clock: int
    debt: int
    next_grant_id: int
    live_grants: tuple[LiveGrant, ...]


_NO_EXPIRATIONS: Final[tuple[Expiration, ...]] = ()
_Popped = list[list[int]]  # live grants evicted by one call, as [expiry, grant_id, remaining]
_NONE: Final[_Popped] = []  # shared "nothing expired"; never mutated


def _invalid(field: str, value: object, low: int) -> InvalidInput:
    # type() rather than isinstance(): bool is a subclass of int and is not an amount.
    if type(value) is not int:
        return InvalidInput(field, f"must be an integer, got {type(value).__name__}")
    return InvalidInput(field, f"must be between {low} and {MAX_VALUE}, got {value}")


def _expirations(popped: _Popped) -> tuple[Expiration, ...]:
    if not popped:
        return _NO_EXPIRATIONS
    return tuple(Expiration(grant_id=b[1], expiry=b[0], amount=b[2]) for b in popped)


def _check_int(field: str, value: object, low: int, high: int) -> int:
    # type() rather than isinstance(): bool is a subclass of int and is not an amount.
    if type(value) is not int:
        raise InvalidInput(field, f"must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidInput(field, f"must be between {low} and {high}, got {value}")
    return value


class GPUCreditTracker:
    """One account's credits. See the module docstring for the design."""

    __slots__ = ("_available", "_clock", "_debt", "_heap", "_max_live_grants", "_next_grant_id")

    def __init__(self, *, max_live_grants: int = DEFAULT_MAX_LIVE_GRANTS) -> None:
        assert max_live_grants >= 1
        self._max_live_grants = max_live_grants
        self._heap: list[list[int]] = []  # [expiry, grant_id, remaining]
        self._available = 0  # sum of remaining over _heap
        self._debt = 0
        self._clock = 0  # latest timestamp seen; timestamps start at 0
        self._next_grant_id = 1

    # -- the interface of SPEC section 2 -------------------------------------------------
    # These three are the hot path: they share the lean ``_grant``/``_consume``/``_advance``
    # with the detailed ``apply_*`` methods below but build no result objects.

    def grant(self, amount: int, timestamp: int, expiry: int) -> None:
        self._grant(amount, timestamp, expiry)

    def consume(self, amount: int, timestamp: int) -> int:
        """Consume ``amount`` at ``timestamp``; return the outstanding debt afterwards."""
        self._consume(amount, timestamp, None)
        return self._debt

    def get_balance(self, timestamp: int) -> int:
        """Active credits at ``timestamp`` minus outstanding debt; advances the clock."""
        self._advance(timestamp)
        return self._available - self._debt

    # -- the detailed operations the service uses ----------------------------------------

    @property
    def clock(self) -> int:
        return self._clock

    @property
    def available(self) -> int:
        return self._available

    @property
    def debt(self) -> int:
        return self._debt

    @property
    def next_grant_id(self) -> int:
        return self._next_grant_id

    @property
    def live_grant_count(self) -> int:
        return len(self._heap)

    def first_live_grant(self) -> LiveGrant | None:
        """The live grant the next consumption draws from first (a partly drawn one stays here)."""
        if not self._heap:
            return None
        expiry, grant_id, remaining = self._heap[0]
        return LiveGrant(grant_id=grant_id, expiry=expiry, remaining=remaining)

    def apply_grant(
        self, amount: int, timestamp: int, expiry: int, live_room: int | None = None
    ) -> GrantResult:
        """``live_room``: how many more live grants than this tracker holds now the caller
        allows (its own limits across accounts); the live grants this grant expires free room.
        A grant that would keep a live grant without room raises ``NoLiveRoom``."""
        grant_id, settled, popped = self._grant(amount, timestamp, expiry, live_room)
        return GrantResult(
            grant_id,
            settled,
            amount - settled,
            self._available,
            self._debt,
            _expirations(popped),
        )

    def apply_consume(self, amount: int, timestamp: int) -> ConsumeResult:
        allocation: list[Allocation] = []
        consumed, debt_added, popped = self._consume(amount, timestamp, allocation)
        return ConsumeResult(
            consumed,
            debt_added,
            self._available,
            self._debt,
            tuple(allocation),
            _expirations(popped),
        )

    def apply_balance(self, timestamp: int) -> BalanceResult:
        popped = self._advance(timestamp)
        return BalanceResult(self._available, self._debt, _expirations(popped))

    def available_at(self, timestamp: int) -> int:
        """The live credits at ``timestamp`` (at or after the clock) if nothing else happens
        before it: a projection that changes nothing, not even the clock. Live grants
        expiring at or before ``timestamp`` no longer count.

        O(k) for the k live grants that expire by then: in a min-heap every one below a node
        expires no earlier than the node, so the walk stops at the first live node of each
        path instead of visiting all n live grants."""
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_VALUE:
            raise _invalid("timestamp", timestamp, 0)
        if timestamp < self._clock:
            raise TimestampRegression(timestamp, self._clock)
        heap = self._heap
        size = len(heap)
        expiring = 0
        stack = [0] if heap and heap[0][0] <= timestamp else []
        while stack:
            index = stack.pop()
            expiring += heap[index][2]
            for child in (2 * index + 1, 2 * index + 2):
                if child < size and heap[child][0] <= timestamp:
                    stack.append(child)
        assert 0 <= expiring <= self._available
        return self._available - expiring

    def live_grants(self) -> list[LiveGrant]:
        """Live grants in the order they will be consumed (earliest expiry, then grant)."""
        return [LiveGrant(grant_id=b[1], expiry=b[0], remaining=b[2]) for b in sorted(self._heap)]

    def copy(self) -> GPUCreditTracker:
        """An independent copy (O(n)): what a caller restores to undo a series of calls."""
        twin = GPUCreditTracker(max_live_grants=self._max_live_grants)
        twin._heap = [live[:] for live in self._heap]  # heap entries are mutable: copy each
        twin._available = self._available
        twin._debt = self._debt
        twin._clock = self._clock
        twin._next_grant_id = self._next_grant_id
        return twin

    # -- persistence ---------------------------------------------------------------------

    def state(self) -> TrackerState:
        return TrackerState(self._clock, self._debt, self._next_grant_id, tuple(self.live_grants()))

    @classmethod
    def from_state(
        cls, state: TrackerState, *, max_live_grants: int = DEFAULT_MAX_LIVE_GRANTS
    ) -> GPUCreditTracker:
        """Rebuild a tracker from ``state``, refusing any state the rules could not produce.
        A state holding more live grants than ``max_live_grants`` (a limit lowered since) is
        kept whole; only new live grants are refused until it is back under the limit."""
        tracker = cls(max_live_grants=max_live_grants)
        _check_int("clock", state.clock, 0, MAX_VALUE)
        _check_int("debt", state.debt, 0, MAX_VALUE)
        _check_int("next_grant_id", state.next_grant_id, 1, MAX_VALUE)
        seen: set[int] = set()
        for live in state.live_grants:
            _check_int("remaining", live.remaining, 1, MAX_VALUE)
            _check_int("expiry", live.expiry, state.clock + 1, MAX_VALUE)
            _check_int("grant_id", live.grant_id, 1, state.next_grant_id - 1)
            if live.grant_id in seen:
                raise InvalidInput("grant_id", f"duplicate live grant {live.grant_id}")
            seen.add(live.grant_id)
            tracker._heap.append([live.expiry, live.grant_id, live.remaining])
            tracker._available += live.remaining
        heapq.heapify(tracker._heap)
        _check_int("available", tracker._available, 0, MAX_VALUE)
        if state.debt and tracker._available:
            raise InvalidInput("debt", "debt and live credits cannot coexist")
        tracker._clock = state.clock
        tracker._debt = state.debt
        tracker._next_grant_id = state.next_grant_id
        return tracker

    def check_invariants(self) -> None:
        """O(n) full check, for tests: the running sum matches the live grants, and so on."""
        assert self._available == sum(b[2] for b in self._heap), "running sum drifted"
        assert all(b[2] > 0 for b in self._heap), "empty live grant kept"
        assert all(b[0] > self._clock for b in self._heap), "expired live grant kept"
        assert 0 <= self._available <= MAX_VALUE
        assert 0 <= self._debt <= MAX_VALUE
        assert self._debt == 0 or self._available == 0, "debt and credits coexist"

    # -- internals -----------------------------------------------------------------------

    def _grant(
        self, amount: int, timestamp: int, expiry: int, live_room: int | None = None
    ) -> tuple[int, int, _Popped]:
        """Validate, then apply; return (grant_id, settled_debt, expired live grants)."""
        # Validation inlined: this is the hot path, and a call costs more than the check.
        if type(amount) is not int or not 0 < amount <= MAX_VALUE:
            raise _invalid("amount", amount, 1)
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_VALUE:
            raise _invalid("timestamp", timestamp, 0)
        if type(expiry) is not int or not 0 <= expiry <= MAX_VALUE:
            raise _invalid("expiry", expiry, 0)
        if expiry <= timestamp:
            raise InvalidInput("expiry", f"must be after timestamp {timestamp}, got {expiry}")
        if timestamp < self._clock:
            raise TimestampRegression(timestamp, self._clock)

        heap = self._heap
        popped = self._pop_expired(timestamp) if heap and heap[0][0] <= timestamp else _NONE
        debt = self._debt
        settled = amount if amount <= debt else debt
        retained = amount - settled
        if self._available + retained > MAX_VALUE:
            self._unpop(popped)
            raise TotalOverflow("available credits", self._available + retained)
        if retained and len(heap) >= self._max_live_grants:
            self._unpop(popped)
            raise LiveGrantLimit(self._max_live_grants)
        if retained and live_room is not None and live_room + len(popped) < 1:
            self._unpop(popped)
            raise NoLiveRoom()

        grant_id = self._next_grant_id
        self._next_grant_id = grant_id + 1
        self._clock = timestamp
        if settled:
            self._debt = debt - settled
        if retained:
            _heappush(heap, [expiry, grant_id, retained])
            self._available += retained
        assert self._debt == 0 or self._available == 0, "debt and credits coexist"
        return grant_id, settled, popped

    def _consume(
        self, amount: int, timestamp: int, allocation: list[Allocation] | None
    ) -> tuple[int, int, _Popped]:
        """Validate, then apply; return (consumed, debt_added, expired live grants)."""
        if type(amount) is not int or not 0 < amount <= MAX_VALUE:
            raise _invalid("amount", amount, 1)
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_VALUE:
            raise _invalid("timestamp", timestamp, 0)
        if timestamp < self._clock:
            raise TimestampRegression(timestamp, self._clock)

        heap = self._heap
        popped = self._pop_expired(timestamp) if heap and heap[0][0] <= timestamp else _NONE
        available = self._available
        if amount <= available:
            consumed, debt_added = amount, 0
        else:
            consumed, debt_added = available, amount - available
            if self._debt + debt_added > MAX_VALUE:
                self._unpop(popped)
                raise TotalOverflow("debt", self._debt + debt_added)

        to_take = consumed
        while to_take:
            live = heap[0]
            if live[2] <= to_take:
                _heappop(heap)
                to_take -= live[2]
                if allocation is not None:
                    allocation.append(Allocation(live[1], live[0], live[2]))
            else:
                live[2] -= to_take  # the heap key (expiry, grant_id) is unchanged
                if allocation is not None:
                    allocation.append(Allocation(live[1], live[0], to_take))
                to_take = 0
        self._clock = timestamp
        self._available = available - consumed
        if debt_added:
            self._debt += debt_added
        assert self._debt == 0 or self._available == 0, "debt and credits coexist"
        return consumed, debt_added, popped

    def _advance(self, timestamp: int) -> _Popped:
        """Move the clock to ``timestamp`` (a balance read), evicting what expired."""
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_VALUE:
            raise _invalid("timestamp", timestamp, 0)
        if timestamp < self._clock:
            raise TimestampRegression(timestamp, self._clock)
        heap = self._heap
        popped = self._pop_expired(timestamp) if heap and heap[0][0] <= timestamp else _NONE
        self._clock = timestamp
        return popped

    def _pop_expired(self, timestamp: int) -> _Popped:
        heap = self._heap
        popped: list[list[int]] = []
        while heap and heap[0][0] <= timestamp:
            live = _heappop(heap)
            self._available -= live[2]
            popped.append(live)
        return popped

    def _unpop(self, popped: _Popped) -> None:
        """Undo ``_pop_expired`` for a call that is being rejected."""
        for live in popped:
            _heappush(self._heap, live)
            self._available += live[2]
