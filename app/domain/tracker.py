"""The pure ledger core: expiring GPU credit grants, debt, and monotonic time for one account.

Standard library only, no clock reads (every call carries its timestamp), no I/O. The HTTP
service, the storage backends and the tests all drive this one class, so the rules of SPEC
sections 1 and 5 (and the core part of section 7, voiding a grant) live here and nowhere else.

Design (TIGER_STYLE: limits on everything, assertions on invariants, units in names):

- Live grants sit in binary min-heaps of ``[expiry, grant_id, remaining]`` lists, one heap per
  distinct class set (a "bucket"): unrestricted grants in ``_heap``, grants scoped to GPU
  classes in the bucket of their normalised class set (a sorted tuple), whose entries carry
  the bucket's serial as a fourth item. The key ``(expiry, grant_id)`` is unique, so ties on
  expiry fall back to grant order and the mutable ``remaining`` slot is never compared.
- A consumption of class X draws from the unrestricted heap and the buckets listing X only
  (``_Scopes.class_buckets``), each time from the best top: earliest expiry, then the narrower
  class set (unrestricted is wider than any list), then grant order. With k such buckets a
  consumption costs O(k + d (k + log n)) for d grants drawn; a consumption without a class
  touches the unrestricted heap alone, exactly as before classes existed.
- Expired live grants are evicted lazily: ``_next_expiry`` is a lower bound of every heap's
  earliest expiry, and an operation whose timestamp reaches it pops the expired tops of every
  heap and recomputes the bound. Time never goes backwards per account, so eviction is
  permanent and exact. Each live grant is pushed once and popped at most once; a scan of the
  k buckets happens only when something expired or the bound went stale because a
  consumption drew the earliest live grant, so eviction is amortised O(k + log n).
- Running sums: ``_available`` over all live grants, ``_Bucket.available`` per class set and
  ``_Scopes.available`` over the scoped ones, so a total read is O(1) and a per-class read is
  O(k) after eviction.
- Debt is a queue in the order it was incurred (``_DebtQueue``: a doubly linked list of items,
  one per maximal run of one class, plus a list per class). A grant settles the debt it could
  have paid in queue order: an unrestricted grant from the head, a scoped one from the earliest
  of its classes' heads. While all debt is of no class (every account that never named a class)
  there is no queue object at all: ``_queue is None`` and ``_debt`` is that one item.
- Voiding (SPEC section 7) zeroes the grant's heap entry (a tombstone, popped when it reaches a
  top: tops are always live) through an index from grant_id to entry that is built at the
  first void (O(n) once) and kept up to date from then on, so the accounts that never void
  pay nothing for it and a void costs O(log n) amortised.
- Every operation validates and computes before it mutates: a rejected call changes nothing,
  not even the clock. Expired live grants popped during a rejected call are pushed back.
- Structures for classes (``_Scopes``), the debt queue and the void index are created only when
  first needed: an account that never names a class costs what it did before classes existed.

Views take ``resource=None`` as "over everything" (SPEC section 5: totals without a class);
a consumption with ``resource=None`` is a consumption of no class, which only unrestricted
grants pay.
"""

from __future__ import annotations

import heapq
import itertools
import re
from dataclasses import dataclass
from operator import itemgetter
from typing import Final, cast

_heappush = heapq.heappush  # module globals: one lookup fewer on the hot path
_heappop = heapq.heappop

# 2^53-1: the largest integer every JSON client (JavaScript included) represents exactly.
MAX_VALUE: Final = 2**53 - 1
# Live grants per tracker unless the caller sets another limit: bounds memory per account.
DEFAULT_MAX_LIVE_GRANTS: Final = 1_000_000
# SPEC section 5: classes one grant may list, and distinct classes an account may use.
MAX_RESOURCES: Final = 16
MAX_CLASSES: Final = 64
MAX_CLASS_NAME_LENGTH: Final = 32

# A class name: 1 to 32 of A-Z a-z 0-9 . _ - starting with a letter or digit (ASCII only;
# fullmatch, so a trailing newline does not pass as ``$`` would let it).
_CLASS_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,31}").fullmatch
# Unrestricted grants sort after every class list of equal expiry (SPEC section 5, order).
_UNRESTRICTED_WIDTH: Final = MAX_RESOURCES + 1
_NEVER: Final = MAX_VALUE + 1  # ``_next_expiry`` when nothing is live
_CLASS_LISTS: Final = (list, tuple, set, frozenset)

ClassList = list[str] | tuple[str, ...] | set[str] | frozenset[str]
"""What ``resources`` may be: any of these holding class names (a bare string is not one)."""


class LedgerError(ValueError):
    """Base of every error the core raises; the tracker is unchanged when it is raised."""


class InvalidInput(LedgerError):
    """An argument outside SPEC section 1's (or section 5's) input domain."""

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


class ClassLimit(LedgerError):
    """An operation that would leave the account using more distinct GPU classes than its
    limit (SPEC section 5: 64). A class is in use while a live grant lists it or it has
    outstanding debt. ``resources``: the classes the operation would have added."""

    def __init__(self, limit: int, resources: tuple[str, ...]) -> None:
        super().__init__(
            f"the account already uses {limit} GPU classes, the most it may use; "
            f"{', '.join(resources)} would be more (a class stops counting once no live "
            "grant lists it and it has no debt)"
        )
        self.limit = limit
        self.resources = resources


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
class Debt:
    """Outstanding debt of one class (``None``: of no class): one item of the debt queue, or
    the part of one item a grant settled."""

    resource: str | None
    amount: int


@dataclass(frozen=True, slots=True)
class Expiration:
    """Credits of one grant that expired unused when the account's clock reached its expiry."""

    grant_id: int
    expiry: int
    amount: int
    resources: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Allocation:
    """How much one consumption took from one live grant."""

    grant_id: int
    expiry: int
    amount: int
    resources: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class LiveGrant:
    """A live grant as seen from outside: the rest of one grant, with its expiry and the
    classes it is valid on (``None``: unrestricted; otherwise sorted, distinct)."""

    grant_id: int
    expiry: int
    remaining: int
    resources: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class GrantResult:
    grant_id: int
    settled_debt: int
    retained: int
    available: int
    debt: int
    expired: tuple[Expiration, ...]
    # The grant's classes as normalised (sorted, distinct); None: unrestricted.
    resources: tuple[str, ...] | None = None
    # What it settled, per item of the debt queue, in queue order (sums to settled_debt).
    settled: tuple[Debt, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumeResult:
    consumed: int
    debt_added: int
    available: int  # total, all classes
    debt: int  # total, all classes
    allocation: tuple[Allocation, ...]
    expired: tuple[Expiration, ...]
    resource: str | None = None
    # What each grant of ``allocation`` has left after it, in the same order (0: used up).
    remaining: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class BalanceResult:
    available: int  # of ``resource`` (live credits a consumption of it could draw), or total
    debt: int  # of ``resource``, or total
    expired: tuple[Expiration, ...]
    resource: str | None = None


@dataclass(frozen=True, slots=True)
class VoidResult:
    grant_id: int
    removed: int  # the live remainder removed (0: already used up, expired or voided)
    available: int
    debt: int
    expired: tuple[Expiration, ...]


@dataclass(frozen=True, slots=True)
class TrackerState:
    """Everything needed to rebuild a tracker exactly: what storage backends persist.

    ``debt`` is the total. ``debts`` is the debt queue in the order incurred, one item per
    maximal run of one class; it is ``()`` when there is no debt or all of it is one item of
    no class (so a state written before classes existed, or by an account that never names
    one, reads back unchanged). ``live_grants`` are in consumption order (see
    ``GPUCreditTracker.live_grants``)."""

    clock: int
    debt: int
    next_grant_id: int
    live_grants: tuple[LiveGrant, ...]
    debts: tuple[Debt, ...] = ()


# -- internal structures ---------------------------------------------------------------

_Entry = list[int]  # [expiry, grant_id, remaining] (+ [bucket serial] for a scoped grant)
_Key = tuple[str, ...] | None  # a normalised class set; None: unrestricted
_Popped = list[tuple[_Entry, _Key]]  # live grants evicted by one call, with their class set
_NONE: Final[_Popped] = []  # shared "nothing expired"; never mutated
_NO_EXPIRATIONS: Final[tuple[Expiration, ...]] = ()
_NO_DEBTS: Final[tuple[Debt, ...]] = ()
_entry_of: Final = itemgetter(0)
_UNUSED: Final[list[int]] = []  # ``remaining`` when no allocation is recorded; never appended


class _Bucket:
    """The live grants of one class set: a heap, its running sum and its live count."""

    __slots__ = ("available", "heap", "key", "live", "serial", "width")

    def __init__(self, key: _Key, serial: int, heap: list[_Entry]) -> None:
        self.key = key
        self.serial = serial
        self.width = _UNRESTRICTED_WIDTH if key is None else len(key)
        self.heap = heap
        self.available = 0  # not kept for the unrestricted pseudo-bucket (see _Scopes.free)
        self.live = 0  # likewise


class _Scopes:
    """What an account that names GPU classes needs besides the unrestricted heap."""

    __slots__ = (
        "available",
        "buckets",
        "by_serial",
        "class_buckets",
        "free",
        "in_use",
        "live",
        "next_serial",
    )

    def __init__(self, unrestricted_heap: list[_Entry]) -> None:
        # The unrestricted heap as a bucket, so that a consumption of a class compares its
        # top with the scoped buckets' tops; its sum is the tracker's total minus ``available``.
        self.free = _Bucket(None, 0, unrestricted_heap)
        self.buckets: dict[tuple[str, ...], _Bucket] = {}  # non-empty scoped buckets
        self.by_serial: dict[int, _Bucket] = {}
        self.class_buckets: dict[str, dict[int, _Bucket]] = {}  # class -> buckets listing it
        # class -> number of buckets listing it, plus 1 while it has debt: classes in use.
        self.in_use: dict[str, int] = {}
        self.available = 0  # sum over the scoped buckets
        self.live = 0  # live grants in the scoped buckets
        self.next_serial = 1

    def ref(self, resource: str) -> None:
        self.in_use[resource] = self.in_use.get(resource, 0) + 1

    def unref(self, resource: str) -> None:
        count = self.in_use[resource] - 1
        if count:
            self.in_use[resource] = count
        else:
            del self.in_use[resource]

    def new_bucket(self, key: tuple[str, ...]) -> _Bucket:
        serial = self.next_serial
        self.next_serial = serial + 1
        bucket = _Bucket(key, serial, [])
        self.buckets[key] = bucket
        self.by_serial[serial] = bucket
        for resource in key:
            self.class_buckets.setdefault(resource, {})[serial] = bucket
            self.ref(resource)
        return bucket

    def drop(self, bucket: _Bucket) -> None:
        """Forget a bucket whose last live grant went (its heap holds tombstones at most)."""
        assert bucket.live == 0
        assert bucket.available == 0
        assert bucket.key is not None
        del self.buckets[bucket.key]
        del self.by_serial[bucket.serial]
        for resource in bucket.key:
            group = self.class_buckets[resource]
            del group[bucket.serial]
            if not group:
                del self.class_buckets[resource]
            self.unref(resource)


class _DebtItem:
    __slots__ = ("amount", "cnext", "next", "prev", "resource", "seq")

    def __init__(self, resource: str | None, amount: int, seq: int) -> None:
        self.resource = resource
        self.amount = amount
        self.seq = seq  # queue order (an item merged into another keeps the earlier one's)
        self.prev: _DebtItem | None = None  # queue neighbours
        self.next: _DebtItem | None = None
        self.cnext: _DebtItem | None = None  # the next item of the same class


class _DebtQueue:
    """Outstanding debt in the order incurred: no two neighbours share a class (a run of one
    class is one item), and each class's items are also linked in order from ``chead``."""

    __slots__ = ("by_class", "chead", "ctail", "head", "seq", "tail")

    def __init__(self) -> None:
        self.head: _DebtItem | None = None
        self.tail: _DebtItem | None = None
        self.chead: dict[str | None, _DebtItem] = {}
        self.ctail: dict[str | None, _DebtItem] = {}
        self.by_class: dict[str | None, int] = {}  # class -> its outstanding debt
        self.seq = 0

    def items(self) -> tuple[Debt, ...]:
        out: list[Debt] = []
        item = self.head
        while item is not None:
            out.append(Debt(item.resource, item.amount))
            item = item.next
        return tuple(out)

    def compact(self) -> bool:
        """Whether the queue is empty or one item of no class (the tracker then drops it)."""
        head = self.head
        return head is None or (head is self.tail and head.resource is None)

    def append(self, resource: str | None, amount: int) -> bool:
        """Add debt of ``resource`` at the end; return whether that class had none before."""
        tail = self.tail
        if tail is not None and tail.resource == resource:
            tail.amount += amount
        else:
            self.seq += 1
            item = _DebtItem(resource, amount, self.seq)
            item.prev = tail
            if tail is None:
                self.head = item
            else:
                tail.next = item
            self.tail = item
            last = self.ctail.get(resource)
            if last is None:
                self.chead[resource] = item
            else:
                last.cnext = item
            self.ctail[resource] = item
        before = self.by_class.get(resource, 0)
        self.by_class[resource] = before + amount
        return not before

    def take(self, item: _DebtItem, amount: int) -> bool:
        """Settle ``amount`` of ``item`` (the first of its class); return whether its class's
        debt is now cleared."""
        assert 0 < amount <= item.amount
        assert self.chead[item.resource] is item
        item.amount -= amount
        resource = item.resource
        left = self.by_class[resource] - amount
        if left:
            self.by_class[resource] = left
        else:
            del self.by_class[resource]
        if not item.amount:
            self._unlink(item)
        return not left

    def _unlink(self, item: _DebtItem) -> None:
        resource = item.resource
        if item.cnext is None:
            del self.chead[resource]
            del self.ctail[resource]
        else:
            self.chead[resource] = item.cnext
        before, after = item.prev, item.next
        if before is None:
            self.head = after
        else:
            before.next = after
        if after is None:
            self.tail = before
        else:
            after.prev = before
        if before is not None and after is not None and before.resource == after.resource:
            # Two runs of one class meet: one item again (they are neighbours in their
            # class's list too, as only ``item`` stood between them).
            assert before.cnext is after
            before.amount += after.amount
            before.next = after.next
            if after.next is None:
                self.tail = before
            else:
                after.next.prev = before
            before.cnext = after.cnext
            if after.cnext is None:
                self.ctail[before.resource] = before


# -- validation ------------------------------------------------------------------------


def _invalid(field: str, value: object, low: int) -> InvalidInput:
    # type() rather than isinstance(): bool is a subclass of int and is not an amount.
    if type(value) is not int:
        return InvalidInput(field, f"must be an integer, got {type(value).__name__}")
    return InvalidInput(field, f"must be between {low} and {MAX_VALUE}, got {value}")


def _check_int(field: str, value: object, low: int, high: int) -> int:
    # type() rather than isinstance(): bool is a subclass of int and is not an amount.
    if type(value) is not int:
        raise InvalidInput(field, f"must be an integer, got {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidInput(field, f"must be between {low} and {high}, got {value}")
    return value


def _check_name(field: str, name: object, known: dict[str, int] | None) -> str:
    """A class name, or ``InvalidInput``. ``known``: names already checked (classes in use)."""
    if type(name) is not str:
        raise InvalidInput(field, f"class names are strings, got {type(name).__name__}")
    if (known is None or name not in known) and _CLASS_NAME(name) is None:
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise InvalidInput(
            field,
            f"{shown!r} is not a class name: 1 to {MAX_CLASS_NAME_LENGTH} of A-Z a-z 0-9 . _ - "
            "starting with a letter or digit",
        )
    return name


def _check_classes(resources: object, known: dict[str, int] | None) -> tuple[str, ...]:
    """``resources`` normalised (sorted tuple), or ``InvalidInput``."""
    if type(resources) not in _CLASS_LISTS:
        raise InvalidInput(
            "resources", f"must be a list of class names, got {type(resources).__name__}"
        )
    names = cast(ClassList, resources)
    count = len(names)
    if not 1 <= count <= MAX_RESOURCES:
        raise InvalidInput("resources", f"must list 1 to {MAX_RESOURCES} classes, got {count}")
    for name in names:
        _check_name("resources", name, known)
    if count == 1:
        return (next(iter(names)),)
    key: tuple[str, ...] = tuple(sorted(names))
    for i in range(1, count):
        if key[i] == key[i - 1]:
            raise InvalidInput("resources", f"lists the class {key[i]!r} twice")
    return key


def _check_key(field: str, resources: object) -> _Key:
    """A stored class set (``LiveGrant.resources``): None or a sorted tuple of distinct names."""
    if resources is None:
        return None
    if type(resources) is not tuple:
        raise InvalidInput(field, f"must be a tuple of class names, got {type(resources).__name__}")
    key = _check_classes(resources, None)
    if key != resources:
        raise InvalidInput(field, "classes must be sorted")
    return key


def _expirations(popped: _Popped) -> tuple[Expiration, ...]:
    if not popped:
        return _NO_EXPIRATIONS
    return tuple(Expiration(e[1], e[0], e[2], key) for e, key in popped)


def _expiring(heap: list[_Entry], timestamp: int) -> int:
    """The credits in ``heap`` that expire at or before ``timestamp``, in O(k) for the k
    entries that do: in a min-heap every entry below a node expires no earlier than the node,
    so the walk stops at the first live node of each path instead of visiting all of them."""
    size = len(heap)
    expiring = 0
    stack = [0] if heap and heap[0][0] <= timestamp else []
    while stack:
        index = stack.pop()
        expiring += heap[index][2]  # 0 for a tombstone
        for child in (2 * index + 1, 2 * index + 2):
            if child < size and heap[child][0] <= timestamp:
                stack.append(child)
    return expiring


def _purge(heap: list[_Entry]) -> None:
    """Pop the voided grants' tombstones off the top: tops are always live."""
    while heap and not heap[0][2]:
        _heappop(heap)


class GPUCreditTracker:
    """One account's credits. See the module docstring for the design.

    Class limit (SPEC section 5): a class is in use while a live grant lists it or it has
    outstanding debt; an operation that would leave more than ``max_classes`` (64) classes in
    use is refused with ``ClassLimit`` and changes nothing: a grant that keeps credits for a
    class not in use, or a consumption that leaves debt of a class not in use. Classes of
    grants used up, expired or voided, and of debt settled, stop counting, so an account that
    moves on to new hardware is not locked out by the classes it used years ago. A grant
    swallowed whole by debt keeps no credits and adds no class.
    """

    __slots__ = (
        "_available",
        "_clock",
        "_debt",
        "_heap",
        "_index",
        "_max_classes",
        "_max_live_grants",
        "_next_expiry",
        "_next_grant_id",
        "_queue",
        "_scopes",
    )

    def __init__(
        self, *, max_live_grants: int = DEFAULT_MAX_LIVE_GRANTS, max_classes: int = MAX_CLASSES
    ) -> None:
        assert max_live_grants >= 1
        assert max_classes >= 1
        self._max_live_grants = max_live_grants
        self._max_classes = max_classes
        self._heap: list[_Entry] = []  # unrestricted live grants: [expiry, grant_id, remaining]
        self._available = 0  # sum of remaining over every live grant
        self._debt = 0  # total outstanding debt
        self._clock = 0  # latest timestamp seen; timestamps start at 0
        self._next_grant_id = 1
        self._next_expiry = _NEVER  # at most the earliest expiry of any heap's top
        self._scopes: _Scopes | None = None  # created by the first class named
        self._queue: _DebtQueue | None = None  # None: no debt, or all of it of no class
        self._index: dict[int, _Entry] | None = None  # grant_id -> entry, from the first void

    # -- the interface of SPEC sections 2 and 5 -------------------------------------------
    # These three are the hot path: they share the lean ``_grant``/``_consume``/``_advance``
    # with the detailed ``apply_*`` methods below but build no result objects.

    def grant(
        self, amount: int, timestamp: int, expiry: int, resources: ClassList | None = None
    ) -> None:
        """Grant ``amount`` valid from ``timestamp`` until ``expiry`` (exclusive), on the
        classes ``resources`` lists (None: unrestricted). It first settles the debt it could
        have paid, in the order incurred, and keeps the rest."""
        self._grant(amount, timestamp, expiry, resources, None)

    def consume(self, amount: int, timestamp: int, resource: str | None = None) -> int:
        """Consume ``amount`` at ``timestamp`` on class ``resource`` (None: no class, which
        only unrestricted grants pay); return the total outstanding debt afterwards."""
        self._consume(amount, timestamp, resource, None, _UNUSED)
        return self._debt

    def get_balance(self, timestamp: int, resource: str | None = None) -> int:
        """Active credits at ``timestamp`` minus outstanding debt (advances the clock): in
        total, or for class ``resource`` (the credits a consumption of it could draw minus
        its own debt)."""
        if resource is None:
            self._advance(timestamp)
            return self._available - self._debt
        self._check_resource(resource)
        self._advance(timestamp)
        return self._eligible(resource) - self.debt_of(resource)

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
        if self._index is not None:
            return len(self._index)
        scopes = self._scopes
        return len(self._heap) + (scopes.live if scopes is not None else 0)

    @property
    def classes_in_use(self) -> tuple[str, ...]:
        """The classes a live grant lists or that have debt, sorted (see the class limit)."""
        return tuple(sorted(self._scopes.in_use)) if self._scopes is not None else ()

    def debt_of(self, resource: str | None = None) -> int:
        """Outstanding debt of class ``resource``, or the total without one."""
        if resource is None:
            return self._debt
        queue = self._queue
        return queue.by_class.get(resource, 0) if queue is not None else 0

    def debts(self) -> tuple[Debt, ...]:
        """The debt queue in the order incurred, one item per run of one class."""
        if self._queue is not None:
            return self._queue.items()
        return (Debt(None, self._debt),) if self._debt else ()

    def first_live_grant(self, resource: str | None = None) -> LiveGrant | None:
        """The live grant a consumption of ``resource`` (None: of no class) draws from first
        (a partly drawn one stays first)."""
        if resource is not None:
            self._check_resource(resource)
        best: tuple[int, int, int, _Entry, _Key] | None = None
        for heap, width, key in self._heaps(resource, everything=False):
            if heap:
                top = heap[0]
                candidate = (top[0], width, top[1], top, key)
                if best is None or candidate[:3] < best[:3]:
                    best = candidate
        if best is None:
            return None
        entry = best[3]
        return LiveGrant(entry[1], entry[0], entry[2], best[4])

    def live_grant(self, grant_id: int) -> LiveGrant | None:
        """Grant ``grant_id``'s live remainder, or None (used up, expired, voided, swallowed
        by debt, or never granted). O(1) once a void built the index, O(n) before."""
        index = self._index
        if index is not None:
            entry = index.get(grant_id)
            if entry is None:
                return None
            return LiveGrant(entry[1], entry[0], entry[2], self._key_of(entry))
        for live in self.live_grants():
            if live.grant_id == grant_id:
                return live
        return None

    def apply_grant(
        self,
        amount: int,
        timestamp: int,
        expiry: int,
        live_room: int | None = None,
        *,
        resources: ClassList | None = None,
    ) -> GrantResult:
        """``live_room``: how many more live grants than this tracker holds now the caller
        allows (its own limits across accounts); the live grants this grant expires free room.
        A grant that would keep a live grant without room raises ``NoLiveRoom``."""
        grant_id, settled, parts, key, popped = self._grant(
            amount, timestamp, expiry, resources, live_room
        )
        return GrantResult(
            grant_id,
            settled,
            amount - settled,
            self._available,
            self._debt,
            _expirations(popped),
            key,
            parts,
        )

    def apply_consume(
        self, amount: int, timestamp: int, resource: str | None = None
    ) -> ConsumeResult:
        allocation: list[Allocation] = []
        remaining: list[int] = []
        consumed, debt_added, popped = self._consume(
            amount, timestamp, resource, allocation, remaining
        )
        return ConsumeResult(
            consumed,
            debt_added,
            self._available,
            self._debt,
            tuple(allocation),
            _expirations(popped),
            resource,
            tuple(remaining),
        )

    def apply_balance(self, timestamp: int, resource: str | None = None) -> BalanceResult:
        if resource is None:
            popped = self._advance(timestamp)
            return BalanceResult(self._available, self._debt, _expirations(popped))
        self._check_resource(resource)
        popped = self._advance(timestamp)
        return BalanceResult(
            self._eligible(resource), self.debt_of(resource), _expirations(popped), resource
        )

    def apply_void(self, grant_id: int, timestamp: int) -> VoidResult:
        """Void grant ``grant_id`` at ``timestamp`` (SPEC section 7): a write like any other
        (the clock moves, what expired by then is evicted first and reported), then the
        grant's live remainder, if any, is removed. Credits it already paid and debt it
        already settled stay. Whether it was voided before, and whether ``timestamp`` is
        before the grant's own, the ledger knows and the caller checks."""
        if type(grant_id) is not int or not 1 <= grant_id < self._next_grant_id:
            if type(grant_id) is not int:
                raise InvalidInput("grant_id", f"must be an integer, got {type(grant_id).__name__}")
            raise InvalidInput(
                "grant_id", f"no grant {grant_id}: grants are 1 to {self._next_grant_id - 1}"
            )
        popped = self._advance(timestamp)
        index = self._index
        if index is None:
            index = self._index = self._build_index()
        entry = index.pop(grant_id, None)
        removed = 0
        if entry is not None:
            removed = entry[2]
            entry[2] = 0  # a tombstone until it reaches its heap's top
            if len(entry) == 3:
                _purge(self._heap)
            else:
                scopes = self._scopes
                assert scopes is not None
                bucket = scopes.by_serial[entry[3]]
                bucket.available -= removed
                bucket.live -= 1
                scopes.available -= removed
                scopes.live -= 1
                _purge(bucket.heap)
                if not bucket.live:
                    scopes.drop(bucket)
            self._available -= removed
        return VoidResult(grant_id, removed, self._available, self._debt, _expirations(popped))

    def available_at(self, timestamp: int, resource: str | None = None) -> int:
        """The live credits at ``timestamp`` (at or after the clock) if nothing else happens
        before it, in total or for class ``resource``: a projection that changes nothing, not
        even the clock. Live grants expiring at or before ``timestamp`` no longer count.

        O(k + e) for the k heaps looked at and the e live grants that expire by then."""
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_VALUE:
            raise _invalid("timestamp", timestamp, 0)
        if resource is not None:
            self._check_resource(resource)
        if timestamp < self._clock:
            raise TimestampRegression(timestamp, self._clock)
        total = self._available if resource is None else self._eligible(resource)
        if timestamp < self._next_expiry:
            return total
        expiring = 0
        for heap, _, _ in self._heaps(resource, everything=True):
            expiring += _expiring(heap, timestamp)
        assert 0 <= expiring <= total
        return total - expiring

    def live_grants(self, resource: str | None = None) -> list[LiveGrant]:
        """Live grants in consumption order: earliest expiry, then the narrower class set
        (unrestricted last), then grant order. All of them, or those a consumption of class
        ``resource`` could draw (in the order it would)."""
        if resource is not None:
            self._check_resource(resource)
        rows: list[tuple[int, int, int, _Entry, _Key]] = []
        for heap, width, key in self._heaps(resource, everything=True):
            rows.extend((e[0], width, e[1], e, key) for e in heap if e[2])
        rows.sort(key=lambda row: (row[0], row[1], row[2]))
        return [LiveGrant(e[1], e[0], e[2], key) for _, _, _, e, key in rows]

    def copy(self) -> GPUCreditTracker:
        """An independent copy (O(n)): what a caller restores to undo a series of calls."""
        twin = GPUCreditTracker(
            max_live_grants=self._max_live_grants, max_classes=self._max_classes
        )
        # Entries are mutable: copy each; tombstones are left behind (the copy has no index).
        twin._heap = [e[:] for e in self._heap if e[2]]
        heapq.heapify(twin._heap)
        twin._available = self._available
        twin._clock = self._clock
        twin._next_grant_id = self._next_grant_id
        twin._next_expiry = self._next_expiry
        scopes = self._scopes
        if scopes is not None:
            other = twin._scopes = _Scopes(twin._heap)
            for key, bucket in scopes.buckets.items():
                copied = other.new_bucket(key)
                copied.heap = [[e[0], e[1], e[2], copied.serial] for e in bucket.heap if e[2]]
                heapq.heapify(copied.heap)
                copied.available = bucket.available
                copied.live = bucket.live
            other.available = scopes.available
            other.live = scopes.live
        for item in self.debts():
            twin._add_debt(item.resource, item.amount)
        assert twin._debt == self._debt
        return twin

    # -- persistence ---------------------------------------------------------------------

    def state(self) -> TrackerState:
        debts = self._queue.items() if self._queue is not None else _NO_DEBTS
        return TrackerState(
            self._clock, self._debt, self._next_grant_id, tuple(self.live_grants()), debts
        )

    @classmethod
    def from_state(
        cls,
        state: TrackerState,
        *,
        max_live_grants: int = DEFAULT_MAX_LIVE_GRANTS,
        max_classes: int = MAX_CLASSES,
    ) -> GPUCreditTracker:
        """Rebuild a tracker from ``state``, refusing any state the rules could not produce.
        A state holding more live grants than ``max_live_grants``, or more classes than
        ``max_classes`` (limits lowered since), is kept whole; only new live grants or classes
        are refused until it is back under the limit. ``debts == ()`` with ``debt > 0`` is one
        debt of no class (states written before classes existed load unchanged)."""
        tracker = cls(max_live_grants=max_live_grants, max_classes=max_classes)
        clock = _check_int("clock", state.clock, 0, MAX_VALUE)
        debt = _check_int("debt", state.debt, 0, MAX_VALUE)
        next_grant_id = _check_int("next_grant_id", state.next_grant_id, 1, MAX_VALUE)
        seen: set[int] = set()
        for live in state.live_grants:
            if type(live) is not LiveGrant:
                raise InvalidInput("live_grants", f"not a LiveGrant: {type(live).__name__}")
            _check_int("remaining", live.remaining, 1, MAX_VALUE)
            _check_int("expiry", live.expiry, clock + 1, MAX_VALUE)
            _check_int("grant_id", live.grant_id, 1, next_grant_id - 1)
            key = _check_key("resources", live.resources)
            if live.grant_id in seen:
                raise InvalidInput("grant_id", f"duplicate live grant {live.grant_id}")
            seen.add(live.grant_id)
            if key is None:
                tracker._heap.append([live.expiry, live.grant_id, live.remaining])
            else:
                scopes = tracker._scoped()
                bucket = scopes.buckets.get(key) or scopes.new_bucket(key)
                bucket.heap.append([live.expiry, live.grant_id, live.remaining, bucket.serial])
                bucket.available += live.remaining
                bucket.live += 1
                scopes.available += live.remaining
                scopes.live += 1
            tracker._available += live.remaining
            if live.expiry < tracker._next_expiry:
                tracker._next_expiry = live.expiry
        heapq.heapify(tracker._heap)
        if tracker._scopes is not None:
            for bucket in tracker._scopes.buckets.values():
                heapq.heapify(bucket.heap)
        _check_int("available", tracker._available, 0, MAX_VALUE)
        debts = tuple(state.debts)
        if debts:
            total = 0
            previous: Debt | None = None
            for item in debts:
                if type(item) is not Debt:
                    raise InvalidInput("debts", f"not a Debt: {type(item).__name__}")
                if item.resource is not None:
                    _check_name("debts", item.resource, None)
                _check_int("debts", item.amount, 1, MAX_VALUE)
                if previous is not None and previous.resource == item.resource:
                    raise InvalidInput("debts", "two neighbouring items of one class")
                previous = item
                total += item.amount
            if total != debt:
                raise InvalidInput("debt", f"is {debt} but the debt queue sums to {total}")
        elif debt:
            debts = (Debt(None, debt),)
        for item in debts:
            tracker._add_debt(item.resource, item.amount)
        for resource in tracker._debt_classes():
            if tracker._eligible(resource):
                what = "of no class" if resource is None else f"of class {resource!r}"
                raise InvalidInput("debt", f"debt {what} and credits that could pay it coexist")
        tracker._clock = clock
        tracker._next_grant_id = next_grant_id
        return tracker

    def check_invariants(self) -> None:
        """O(n) full check, for tests: the running sums match the live grants, and so on."""
        index = self._index
        scopes = self._scopes
        heaps: list[tuple[list[_Entry], _Bucket | None]] = [(self._heap, None)]
        if scopes is not None:
            assert scopes.free.heap is self._heap, "unrestricted heap and bucket differ"
            heaps.extend((b.heap, b) for b in scopes.buckets.values())
        live_entries: dict[int, _Entry] = {}
        scoped_available = scoped_live = 0
        low = _NEVER
        for heap, bucket in heaps:
            assert all(heap[(i - 1) // 2] <= heap[i] for i in range(1, len(heap))), "not a heap"
            assert not heap or heap[0][2] > 0, "tombstone on top"
            assert index is not None or all(e[2] for e in heap), "tombstone without index"
            live = [e for e in heap if e[2]]
            assert all(e[2] > 0 for e in heap if e[2] != 0), "negative live grant"
            assert all(e[0] > self._clock for e in live), "expired live grant kept"
            for e in live:
                assert e[1] not in live_entries, "grant in two heaps"
                live_entries[e[1]] = e
                assert 1 <= e[1] < self._next_grant_id
            if heap:
                low = min(low, heap[0][0])
            if bucket is None:
                assert all(len(e) == 3 for e in heap), "scoped entry in the unrestricted heap"
            else:
                assert scopes is not None
                assert bucket.key is not None
                assert all(len(e) == 4 and e[3] == bucket.serial for e in heap)
                assert bucket.live == len(live) > 0, "bucket live count drifted (or empty kept)"
                assert bucket.available == sum(e[2] for e in live), "bucket sum drifted"
                assert scopes.buckets[bucket.key] is bucket
                assert scopes.by_serial[bucket.serial] is bucket
                assert bucket.key == tuple(sorted(set(bucket.key)))
                assert 1 <= len(bucket.key) <= MAX_RESOURCES
                scoped_available += bucket.available
                scoped_live += bucket.live
        assert self._next_expiry <= low, "eviction bound above an expiry"
        assert self._available == sum(e[2] for e in live_entries.values()), "running sum drifted"
        assert 0 <= self._available <= MAX_VALUE
        assert 0 <= self._debt <= MAX_VALUE
        if index is not None:
            assert index == live_entries, "void index drifted"
            assert all(index[g] is e for g, e in live_entries.items())
        assert self.live_grant_count == len(live_entries)
        queue = self._queue
        if scopes is not None:
            assert scopes.available == scoped_available, "scoped sum drifted"
            assert scopes.live == scoped_live
            assert len(scopes.by_serial) == len(scopes.buckets)
            want_groups: dict[str, set[int]] = {}
            for bucket in scopes.buckets.values():
                assert bucket.key is not None
                for resource in bucket.key:
                    want_groups.setdefault(resource, set()).add(bucket.serial)
            assert {c: set(g) for c, g in scopes.class_buckets.items()} == want_groups
            debt_classes = {c for c in (queue.by_class if queue else {}) if c is not None}
            want_use = {
                c: len(want_groups.get(c, ())) + (c in debt_classes)
                for c in set(want_groups) | debt_classes
            }
            assert scopes.in_use == want_use, "classes in use drifted"
        if queue is not None:
            assert not queue.compact(), "a compact queue is kept"
            items: list[_DebtItem] = []
            item = queue.head
            previous = None
            while item is not None:
                assert item.prev is previous
                assert item.amount > 0
                assert previous is None or (previous.resource != item.resource), "runs unmerged"
                assert previous is None or previous.seq < item.seq
                items.append(item)
                previous, item = item, item.next
            assert queue.tail is previous
            sums: dict[str | None, int] = {}
            for item in items:
                sums[item.resource] = sums.get(item.resource, 0) + item.amount
            assert queue.by_class == sums, "class debt drifted"
            for owner in sums:
                chain = [i for i in items if i.resource == owner]
                assert queue.chead[owner] is chain[0]
                assert queue.ctail[owner] is chain[-1]
                assert all(a.cnext is b for a, b in itertools.pairwise(chain))
                assert chain[-1].cnext is None
            assert set(queue.chead) == set(sums) == set(queue.ctail)
            assert self._debt == sum(sums.values()), "total debt drifted"
            assert scopes is not None or set(sums) == {None}
        # SPEC section 5: per class, if it has debt no credits are eligible for it.
        for owner in self._debt_classes():
            assert self._eligible(owner) == 0, f"debt of {owner!r} and credits coexist"

    # -- internals -----------------------------------------------------------------------

    def _grant(
        self,
        amount: int,
        timestamp: int,
        expiry: int,
        resources: object,
        live_room: int | None,
    ) -> tuple[int, int, tuple[Debt, ...], _Key, _Popped]:
        """Validate, then apply; return (grant_id, settled_debt, settled per debt item,
        normalised classes, expired live grants)."""
        # Validation inlined: this is the hot path, and a call costs more than the check.
        if type(amount) is not int or not 0 < amount <= MAX_VALUE:
            raise _invalid("amount", amount, 1)
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_VALUE:
            raise _invalid("timestamp", timestamp, 0)
        if type(expiry) is not int or not 0 <= expiry <= MAX_VALUE:
            raise _invalid("expiry", expiry, 0)
        if expiry <= timestamp:
            raise InvalidInput("expiry", f"must be after timestamp {timestamp}, got {expiry}")
        key: _Key = None
        if resources is not None:
            key = _check_classes(
                resources, self._scopes.in_use if self._scopes is not None else None
            )
        if timestamp < self._clock:
            raise TimestampRegression(timestamp, self._clock)

        popped = self._pop_expired(timestamp) if timestamp >= self._next_expiry else _NONE
        debt = self._debt
        if not debt:
            settled = 0
        elif key is None:
            settled = amount if amount <= debt else debt
        else:
            queue = self._queue
            owed = 0
            if queue is not None:  # otherwise all debt is of no class: not this grant's
                by_class = queue.by_class
                for resource in key:
                    owed += by_class.get(resource, 0)
            settled = amount if amount <= owed else owed
        retained = amount - settled
        if retained and not (
            # The common case, checked inline: nothing but unrestricted grants, well in range.
            key is None
            and live_room is None
            and self._scopes is None
            and self._index is None
            and self._available + retained <= MAX_VALUE
            and len(self._heap) < self._max_live_grants
        ):
            refusal = self._grant_refusal(retained, key, live_room, len(popped))
            if refusal is not None:
                self._unpop(popped)
                raise refusal

        grant_id = self._next_grant_id
        self._next_grant_id = grant_id + 1
        self._clock = timestamp
        parts = self._settle(key, settled) if settled else _NO_DEBTS
        if retained:
            if key is None:
                entry = [expiry, grant_id, retained]
                _heappush(self._heap, entry)
            else:
                entry = self._push_scoped(key, [expiry, grant_id, retained, 0])
            if self._index is not None:
                self._index[grant_id] = entry
            self._available += retained
            if expiry < self._next_expiry:
                self._next_expiry = expiry
        return grant_id, settled, parts, key, popped

    def _grant_refusal(
        self, retained: int, key: _Key, live_room: int | None, expired: int
    ) -> LedgerError | None:
        """Why a grant keeping ``retained`` cannot be applied (after eviction), if it cannot."""
        if self._available + retained > MAX_VALUE:
            return TotalOverflow("available credits", self._available + retained)
        if self.live_grant_count >= self._max_live_grants:
            return LiveGrantLimit(self._max_live_grants)
        if live_room is not None and live_room + expired < 1:
            return NoLiveRoom()
        if key is not None:
            # Retaining credits means all debt of its classes is settled, and the classes
            # stay in use through this grant: the count after is those in use plus the new.
            in_use = self._scopes.in_use if self._scopes is not None else {}
            new = tuple(c for c in key if c not in in_use)
            if new and len(in_use) + len(new) > self._max_classes:
                return ClassLimit(self._max_classes, new)
        return None

    def _consume(
        self,
        amount: int,
        timestamp: int,
        resource: str | None,
        allocation: list[Allocation] | None,
        remaining: list[int],
    ) -> tuple[int, int, _Popped]:
        """Validate, then apply; return (consumed, debt_added, expired live grants)."""
        if type(amount) is not int or not 0 < amount <= MAX_VALUE:
            raise _invalid("amount", amount, 1)
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_VALUE:
            raise _invalid("timestamp", timestamp, 0)
        if resource is not None:
            self._check_resource(resource)
        if timestamp < self._clock:
            raise TimestampRegression(timestamp, self._clock)

        popped = self._pop_expired(timestamp) if timestamp >= self._next_expiry else _NONE
        scopes = self._scopes
        group: dict[int, _Bucket] | None = None
        if scopes is None:
            available = self._available
        else:
            available = self._available - scopes.available  # unrestricted credits
            if resource is not None:
                group = scopes.class_buckets.get(resource)
                if group is not None:
                    for bucket in group.values():
                        available += bucket.available
        if amount <= available:
            consumed, debt_added = amount, 0
        else:
            consumed, debt_added = available, amount - available
            if self._debt + debt_added > MAX_VALUE:
                self._unpop(popped)
                raise TotalOverflow("debt", self._debt + debt_added)
            if (
                resource is not None
                and (scopes is None or resource not in scopes.in_use)
                and (len(scopes.in_use) if scopes is not None else 0) >= self._max_classes
            ):
                # No live grant lists ``resource``, so this draws unrestricted credits alone
                # and frees no class: the count after is those in use plus this one.
                self._unpop(popped)
                raise ClassLimit(self._max_classes, (resource,))

        if group is not None:
            assert scopes is not None
            self._draw(scopes, group, consumed, allocation, remaining)
        elif consumed:
            # Unrestricted credits alone (inlined: the hot path of SPEC section 1).
            heap = self._heap
            index = self._index
            self._available -= consumed
            to_take = consumed
            while to_take:
                live = heap[0]  # tops are live
                left = live[2]
                if left <= to_take:
                    _heappop(heap)
                    to_take -= left
                    if index is not None:
                        del index[live[1]]
                        _purge(heap)
                    if allocation is not None:
                        allocation.append(Allocation(live[1], live[0], left))
                        remaining.append(0)
                else:
                    live[2] = left - to_take  # the heap key (expiry, grant_id) is unchanged
                    if allocation is not None:
                        allocation.append(Allocation(live[1], live[0], to_take))
                        remaining.append(left - to_take)
                    to_take = 0
            if scopes is None:  # the only heap: keep the eviction bound exact
                self._next_expiry = heap[0][0] if heap else _NEVER
        self._clock = timestamp
        if debt_added:
            self._add_debt(resource, debt_added)
        return consumed, debt_added, popped

    def _draw(
        self,
        scopes: _Scopes,
        group: dict[int, _Bucket],
        to_take: int,
        allocation: list[Allocation] | None,
        remaining: list[int],
    ) -> None:
        """Draw ``to_take`` from the unrestricted heap and the buckets of ``group``, each time
        from the best top (expiry, width, grant_id)."""
        candidates = [scopes.free, *group.values()]
        index = self._index
        emptied: list[_Bucket] = []
        self._available -= to_take
        while to_take:
            best = candidates[0]
            best_top: _Entry | None = None
            best_width = 0
            for bucket in candidates:
                heap = bucket.heap
                if heap:
                    top = heap[0]
                    if (
                        best_top is None
                        or top[0] < best_top[0]
                        or (
                            top[0] == best_top[0]
                            and (
                                bucket.width < best_width
                                or (bucket.width == best_width and top[1] < best_top[1])
                            )
                        )
                    ):
                        best, best_top, best_width = bucket, top, bucket.width
            assert best_top is not None, "eligible credits ran out"
            live = best_top
            left = live[2]
            if left <= to_take:
                take, left = left, 0
                _heappop(best.heap)
                if index is not None:
                    del index[live[1]]
                    _purge(best.heap)
                if best.key is not None:
                    best.live -= 1
                    scopes.live -= 1
                    if not best.live:
                        emptied.append(best)
            else:
                take = to_take
                left -= take
                live[2] = left
            to_take -= take
            if best.key is not None:
                best.available -= take
                scopes.available -= take
            if allocation is not None:
                allocation.append(Allocation(live[1], live[0], take, best.key))
                remaining.append(left)
        for bucket in emptied:
            scopes.drop(bucket)

    def _advance(self, timestamp: int) -> _Popped:
        """Move the clock to ``timestamp`` (a balance read, a void), evicting what expired."""
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_VALUE:
            raise _invalid("timestamp", timestamp, 0)
        if timestamp < self._clock:
            raise TimestampRegression(timestamp, self._clock)
        popped = self._pop_expired(timestamp) if timestamp >= self._next_expiry else _NONE
        self._clock = timestamp
        return popped

    def _pop_expired(self, timestamp: int) -> _Popped:
        """Evict every live grant expiring at or before ``timestamp``, in (expiry, grant)
        order, and make ``_next_expiry`` exact again."""
        heap = self._heap
        index = self._index
        popped: _Popped = []
        expired = 0
        while heap and heap[0][0] <= timestamp:
            live = _heappop(heap)
            if live[2]:
                popped.append((live, None))
                expired += live[2]
                if index is not None:
                    del index[live[1]]
        if index is not None:
            _purge(heap)
        low = heap[0][0] if heap else _NEVER
        scopes = self._scopes
        if scopes is not None and scopes.buckets:
            sources = 1 if popped else 0  # heaps that lost a live grant
            emptied: list[_Bucket] = []
            for bucket in scopes.buckets.values():
                bheap = bucket.heap
                if bheap[0][0] <= timestamp:
                    gone = 0
                    while bheap and bheap[0][0] <= timestamp:
                        live = _heappop(bheap)
                        if live[2]:
                            popped.append((live, bucket.key))
                            gone += live[2]
                            bucket.live -= 1
                            scopes.live -= 1
                            if index is not None:
                                del index[live[1]]
                    if index is not None:
                        _purge(bheap)
                    bucket.available -= gone
                    scopes.available -= gone
                    expired += gone
                    sources += gone > 0
                    if not bucket.live:
                        emptied.append(bucket)
                        continue
                if bheap[0][0] < low:
                    low = bheap[0][0]
            for bucket in emptied:
                scopes.drop(bucket)
            if sources > 1:
                popped.sort(key=_entry_of)  # entries compare by (expiry, grant_id): unique
        self._available -= expired
        self._next_expiry = low
        return popped

    def _unpop(self, popped: _Popped) -> None:
        """Undo ``_pop_expired`` for a call that is being rejected."""
        index = self._index
        for entry, key in popped:
            if key is None:
                _heappush(self._heap, entry)
            else:
                self._push_scoped(key, entry)
            self._available += entry[2]
            if index is not None:
                index[entry[1]] = entry
            if entry[0] < self._next_expiry:
                self._next_expiry = entry[0]

    def _push_scoped(self, key: tuple[str, ...], entry: _Entry) -> _Entry:
        """Add a live grant (``[expiry, grant_id, remaining, _]``) to the bucket of ``key``."""
        scopes = self._scoped()
        bucket = scopes.buckets.get(key)
        if bucket is None:
            bucket = scopes.new_bucket(key)
        entry[3] = bucket.serial
        _heappush(bucket.heap, entry)
        bucket.available += entry[2]
        bucket.live += 1
        scopes.available += entry[2]
        scopes.live += 1
        return entry

    def _scoped(self) -> _Scopes:
        scopes = self._scopes
        if scopes is None:
            scopes = self._scopes = _Scopes(self._heap)
        return scopes

    def _add_debt(self, resource: str | None, amount: int) -> None:
        queue = self._queue
        if queue is None:
            if resource is None:
                self._debt += amount  # one item of no class: no queue needed
                return
            queue = self._queue = _DebtQueue()
            if self._debt:
                queue.append(None, self._debt)  # the debt of no class came first
        if queue.append(resource, amount) and resource is not None:
            self._scoped().ref(resource)
        self._debt += amount

    def _settle(self, key: _Key, amount: int) -> tuple[Debt, ...]:
        """Settle ``amount`` of the debt a grant of class set ``key`` could have paid, in
        queue order; ``amount`` is at most that debt. Return what it settled per item."""
        queue = self._queue
        self._debt -= amount
        if queue is None:
            assert key is None, "only an unrestricted grant settles debt of no class"
            return (Debt(None, amount),)
        parts: list[Debt] = []
        left = amount
        chead = queue.chead
        while left:
            if key is None:
                item = queue.head
            else:
                item = None
                for resource in key:
                    head = chead.get(resource)
                    if head is not None and (item is None or head.seq < item.seq):
                        item = head
            assert item is not None, "settled more than the debt it could pay"
            take = item.amount if item.amount <= left else left
            left -= take
            owner = item.resource
            parts.append(Debt(owner, take))
            if queue.take(item, take) and owner is not None:
                assert self._scopes is not None
                self._scopes.unref(owner)
        if queue.compact():
            assert queue.head is None or queue.by_class.get(None) == self._debt
            self._queue = None
        return tuple(parts)

    def _check_resource(self, resource: object) -> str:
        scopes = self._scopes
        return _check_name("resource", resource, scopes.in_use if scopes is not None else None)

    def _eligible(self, resource: str | None) -> int:
        """Live credits a consumption of class ``resource`` (None: of no class) could draw."""
        scopes = self._scopes
        if scopes is None:
            return self._available
        total = self._available - scopes.available
        if resource is not None:
            group = scopes.class_buckets.get(resource)
            if group is not None:
                for bucket in group.values():
                    total += bucket.available
        return total

    def _debt_classes(self) -> list[str | None]:
        """The classes (None: no class) with outstanding debt."""
        if self._queue is not None:
            return list(self._queue.by_class)
        return [None] if self._debt else []

    def _heaps(
        self, resource: str | None, *, everything: bool
    ) -> list[tuple[list[_Entry], int, _Key]]:
        """(heap, width, class set) of the heaps a consumption of ``resource`` draws from, or
        of every heap when ``everything`` and ``resource`` is None."""
        heaps: list[tuple[list[_Entry], int, _Key]] = [(self._heap, _UNRESTRICTED_WIDTH, None)]
        scopes = self._scopes
        if scopes is not None:
            if resource is None:
                if everything:
                    heaps.extend((b.heap, b.width, b.key) for b in scopes.buckets.values())
            else:
                group = scopes.class_buckets.get(resource, {})
                heaps.extend((b.heap, b.width, b.key) for b in group.values())
        return heaps

    def _key_of(self, entry: _Entry) -> _Key:
        if len(entry) == 3:
            return None
        assert self._scopes is not None
        return self._scopes.by_serial[entry[3]].key

    def _build_index(self) -> dict[int, _Entry]:
        index = {e[1]: e for e in self._heap}
        if self._scopes is not None:
            for bucket in self._scopes.buckets.values():
                index.update((e[1], e) for e in bucket.heap)
        return index
