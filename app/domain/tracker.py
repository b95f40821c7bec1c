"""The pure ledger core: expiring GPU credit grants, debt, and monotonic time for one account.

Standard library only, no clock reads (every call carries its timestamp), no I/O. The HTTP
service, the storage backends and the tests all drive this one class, so the rules of SPEC
sections 1 and 5 (and the core part of section 7, voiding a grant) live here and nowhere else.

Design (TIGER_STYLE: limits on everything, assertions on invariants, units in names):

- A live grant is a list ``[expiry, width, granted_at, grant_id, remaining]``, plus its class
  set (a sorted tuple) as a sixth item when it is scoped to GPU classes. ``width`` is the
  number of classes (unrestricted: 17, wider than any list), so entries compare in SPEC
  section 5's order: earliest expiry, then the narrower class set, then grant order, which
  SPEC section 6 makes effective order: (``granted_at``, the grant's timestamp, then
  ``grant_id``, its arrival). Written in order, ids follow timestamps and this is grant_id
  order; a replay that gives a late grant the id it got at arrival (``apply_grant``'s
  ``grant_id``) keeps it ahead of earlier-arriving grants with later timestamps. ``grant_id``
  is unique, so the mutable ``remaining`` is never compared.
- Unrestricted grants sit in one binary min-heap, ``_heap``. A scoped grant's entry sits in
  one heap per class it lists (``_Scopes.class_heaps``: the same list object in each). A
  consumption of class X compares two tops, the unrestricted heap's and X's, and draws from
  the lesser: O(log n) per grant drawn. A consumption of no class touches the unrestricted
  heap alone, exactly as before classes existed. A grant listing c classes costs O(c log n).
- A scoped grant used up (or expired, or voided) through one of its heaps stays in its other
  classes' heaps as a dead entry (``remaining`` 0): popped when it reaches a top (tops are
  always live), and a heap whose dead entries outnumber its live ones is rebuilt, so dead
  entries cost O(1) amortised each and never more than the live ones in memory. A class heap
  is dropped when no live grant lists its class.
- Expired live grants are evicted lazily: ``_next_expiry`` is a lower bound of every heap's
  earliest expiry, and an operation whose timestamp reaches it pops the expired tops of every
  heap (at most 64 class heaps) and recomputes the bound. Time never goes backwards per
  account, so eviction is permanent and exact, and each entry is popped at most once.
- Running sums: ``_available`` over all live grants, ``_Scopes.available`` over the scoped
  ones and ``_Scopes.class_available`` per class (over the scoped grants listing it), so a
  total read and a per-class read are O(1) after eviction.
- Debt is a queue in the order it was incurred (``_DebtQueue``: a doubly linked list of items,
  one per maximal run of one class, plus a list per class). A grant settles the debt it could
  have paid in queue order: an unrestricted grant from the head, a scoped one from the earliest
  of its classes' heads. While all debt is of no class (every account that never named a class)
  there is no queue object at all: ``_queue is None`` and ``_debt`` is that one item.
- Voiding (SPEC section 7) kills the grant's entry (``remaining`` 0, popped when it reaches a
  top) found through an index from grant_id to entry that is built at the first void (O(n)
  once) and kept up to date from then on, so the accounts that never void pay nothing for it
  and a void costs O(c log n) amortised.
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
from collections.abc import Collection
from dataclasses import dataclass, field, fields
from typing import Any, Final, NamedTuple, cast

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
# A class heap is rebuilt when it holds more dead entries than this and than live ones.
_DEAD_SLACK: Final = 32

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
    classes it is valid on (``None``: unrestricted; otherwise sorted, distinct).

    ``granted_at`` is the grant's timestamp: grants tie at equal expiry and width in
    effective order (SPEC section 6), that is (``granted_at``, ``grant_id``), so a late grant
    is drawn before an earlier-arriving grant with a later timestamp. 0, the default, means
    "granted before any grant that carries a real timestamp": a state written before the
    field existed (every write in order, so ``grant_id`` order is timestamp order) keeps its
    order, grant_id order, as every grant granted since sorts after it or by id at 0.

    ``granted_at`` takes no part in ``==`` (nor in the hash): it is a function of the grant
    (one grant, one timestamp), so two correct records of one grant's remainder agree on it
    anyway, and records written without it (before the field, or by callers that do not
    track it) still compare equal to the tracker's. Code that must see it (persistence
    round trips, the timeline's pair assertions) compares it explicitly."""

    grant_id: int
    expiry: int
    remaining: int
    resources: tuple[str, ...] | None = None
    granted_at: int = field(default=0, compare=False)


# The two results of every write are named tuples, not frozen dataclasses: as immutable,
# and made in a third of the time (a frozen dataclass sets each field through
# object.__setattr__: 0.62 against 0.18 us for eight fields), once per grant or consumption.
class GrantResult(NamedTuple):
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


class ConsumeResult(NamedTuple):
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

# A live grant: [expiry, width, granted_at, grant_id, remaining], + [class set] for a scoped
# one (Any: the class set is a tuple among ints). Entries compare in consumption order, and
# (granted_at, grant_id) is effective order among grants of equal expiry and width.
_Entry = list[Any]
_Key = tuple[str, ...] | None  # a normalised class set; None: unrestricted
# Live grants evicted by one call: (entry, its remaining then, its class set).
_Popped = list[tuple[_Entry, int, _Key]]
_NONE: Final[_Popped] = []  # shared "nothing expired"; never mutated
_NO_EXPIRATIONS: Final[tuple[Expiration, ...]] = ()
_NO_DEBTS: Final[tuple[Debt, ...]] = ()
_UNUSED: Final[list[int]] = []  # ``remaining`` when no allocation is recorded; never appended


class _Scopes:
    """What an account that names GPU classes needs besides the unrestricted heap: a heap per
    class of the live scoped grants listing it (sharing entries), and running sums."""

    __slots__ = (
        "available",
        "class_available",
        "class_dead",
        "class_heaps",
        "in_use",
        "live",
    )

    def __init__(self) -> None:
        # class -> heap of the entries listing it; exists while a live grant lists the class.
        self.class_heaps: dict[str, list[_Entry]] = {}
        self.class_dead: dict[str, int] = {}  # class -> dead entries in its heap
        # class -> credits of its live entries (0 exactly when none is live: a live grant
        # holds at least one credit).
        self.class_available: dict[str, int] = {}
        # class -> 1 while a live grant lists it, + 1 while it has debt: the classes in use.
        self.in_use: dict[str, int] = {}
        self.available = 0  # credits of the live scoped grants
        self.live = 0  # live scoped grants

    def ref(self, resource: str) -> None:
        self.in_use[resource] = self.in_use.get(resource, 0) + 1

    def unref(self, resource: str) -> None:
        count = self.in_use[resource] - 1
        if count:
            self.in_use[resource] = count
        else:
            del self.in_use[resource]

    def add(self, entry: _Entry) -> None:
        """A live scoped grant: into the heap of every class it lists."""
        credits = entry[4]
        self.available += credits
        self.live += 1
        heaps = self.class_heaps
        for resource in entry[5]:
            heap = heaps.get(resource)
            if heap is None:
                self.open(resource, entry)
            else:
                _heappush(heap, entry)
                self.class_available[resource] += credits

    def open(self, resource: str, entry: _Entry) -> None:
        """The heap of a class no live grant listed, with its first entry."""
        self.class_heaps[resource] = [entry]
        self.class_dead[resource] = 0
        self.class_available[resource] = entry[4]
        self.ref(resource)

    def kill(self, entry: _Entry) -> None:
        """The rest of a scoped grant goes (used up, expired or voided): its entry is dead in
        every heap it is in. The caller pops it from one (``class_dead`` down by one there)
        and tidies the heaps of its classes."""
        credits = entry[4]
        entry[4] = 0
        self.available -= credits
        self.live -= 1
        class_available = self.class_available
        class_dead = self.class_dead
        for resource in entry[5]:
            class_available[resource] -= credits
            class_dead[resource] += 1

    def tidy(self, resource: str) -> None:
        """After deaths in a class heap: pop dead tops (tops are live), rebuild the heap when
        dead entries outnumber live ones, drop it (and the class from use) when none is live."""
        heap = self.class_heaps.get(resource)
        if heap is None:
            return
        if not self.class_available[resource]:  # no live entry left
            heap.clear()  # a caller may still hold the list: it must not see dead entries
            del self.class_heaps[resource]
            del self.class_dead[resource]
            del self.class_available[resource]
            self.unref(resource)
            return
        dead = self.class_dead[resource]
        while not heap[0][4]:  # a live entry is left, so the heap does not run empty
            _heappop(heap)
            dead -= 1
        if dead > _DEAD_SLACK and 2 * dead > len(heap):  # more dead entries than live ones
            heap[:] = [e for e in heap if e[4]]  # same list object: callers may hold it
            heapq.heapify(heap)
            dead = 0
        self.class_dead[resource] = dead

    def copy(self) -> _Scopes:
        """The live entries, each copied once, in heaps of the same classes, with no debt's
        use of a class (the tracker's copy adds its debts after). What ``add`` of each
        entry's copy would make, built a heap at a time: a class's heap is a filtered copy
        heapified in C, not one push per class an entry lists (9,990 grants of 16 classes:
        160,000 pushes; the copy 23 against 27 ms, best of 15 interleaved; a late write off
        the loop makes it on the loop)."""
        twin = _Scopes()
        copied = {id(e): [*e] for e in self.entries(None)}  # id of a live entry -> its copy
        for resource, heap in self.class_heaps.items():
            twin_heap = [copied[id(e)] for e in heap if e[4]]
            heapq.heapify(twin_heap)
            twin.class_heaps[resource] = twin_heap
            twin.class_dead[resource] = 0
            twin.class_available[resource] = self.class_available[resource]
            twin.in_use[resource] = 1  # a live grant lists it (a heap is dropped when none)
        twin.available = self.available
        twin.live = len(copied)
        assert twin.live == self.live, "live scoped grants miscounted"
        return twin

    def entries(self, resource: str | None) -> list[_Entry]:
        """The live scoped entries listing ``resource``, or all of them (each once)."""
        if resource is not None:
            return [e for e in self.class_heaps.get(resource, ()) if e[4]]
        return [e for c, heap in self.class_heaps.items() for e in heap if e[4] and e[5][0] == c]


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
    """``resources`` normalised (sorted tuple), or ``InvalidInput``. ``known``: class names
    already checked (the classes in use)."""
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
    return tuple(Expiration(e[3], e[0], credits, key) for e, credits, key in popped)


def _expiry_and_grant(popped: tuple[_Entry, int, _Key]) -> tuple[int, int]:
    return popped[0][0], popped[0][3]


def _expiring(heap: list[_Entry], timestamp: int, owner: str | None = None) -> int:
    """The credits in ``heap`` that expire at or before ``timestamp`` (with ``owner``, only
    those of entries whose first class it is: each scoped grant counted once over all class
    heaps), in O(k) for the k entries that do: in a min-heap every entry below a node expires
    no earlier than the node, so the walk stops at the first live node of each path."""
    size = len(heap)
    expiring = 0
    stack = [0] if heap and heap[0][0] <= timestamp else []
    while stack:
        index = stack.pop()
        entry = heap[index]
        if owner is None or entry[5][0] == owner:
            expiring += entry[4]  # 0 for a dead entry
        for child in (2 * index + 1, 2 * index + 2):
            if child < size and heap[child][0] <= timestamp:
                stack.append(child)
    return expiring


def _purge(heap: list[_Entry]) -> None:
    """Pop the voided grants' dead entries off the top: tops are always live."""
    while heap and not heap[0][4]:
        _heappop(heap)


def _grant_id_of(live: LiveGrant) -> int:
    return live.grant_id


# ``LiveGrant``s built from entries, the bulk of ``state()`` and ``live_grants()`` (every
# checkpoint the timeline stores is one ``state()``): a frozen dataclass's ``__init__`` sets
# each field through ``object.__setattr__``; the slots' own descriptors set the same fields
# about 3x faster. The field list is checked here, so a new field cannot be missed.
assert tuple(f.name for f in fields(LiveGrant)) == (
    "grant_id",
    "expiry",
    "remaining",
    "resources",
    "granted_at",
)
_new_live_grant = object.__new__
_set_grant_id = LiveGrant.__dict__["grant_id"].__set__
_set_expiry = LiveGrant.__dict__["expiry"].__set__
_set_remaining = LiveGrant.__dict__["remaining"].__set__
_set_resources = LiveGrant.__dict__["resources"].__set__
_set_granted_at = LiveGrant.__dict__["granted_at"].__set__


def _live_grant(entry: _Entry) -> LiveGrant:
    live: LiveGrant = _new_live_grant(LiveGrant)
    _set_grant_id(live, entry[3])
    _set_expiry(live, entry[0])
    _set_remaining(live, entry[4])
    _set_resources(live, entry[5] if len(entry) == 6 else None)
    _set_granted_at(live, entry[2])
    return live


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
        "_reordered",
        "_scopes",
    )

    def __init__(
        self, *, max_live_grants: int = DEFAULT_MAX_LIVE_GRANTS, max_classes: int = MAX_CLASSES
    ) -> None:
        assert max_live_grants >= 1
        assert max_classes >= 1
        self._max_live_grants = max_live_grants
        self._max_classes = max_classes
        self._heap: list[_Entry] = []  # unrestricted live grants
        self._available = 0  # sum of remaining over every live grant
        self._debt = 0  # total outstanding debt
        self._clock = 0  # latest timestamp seen; timestamps start at 0
        self._next_grant_id = 1
        self._next_expiry = _NEVER  # at most the earliest expiry of any heap's top
        self._scopes: _Scopes | None = None  # created by the first class named
        self._queue: _DebtQueue | None = None  # None: no debt, or all of it of no class
        self._index: dict[int, _Entry] | None = None  # grant_id -> entry, from the first void
        # Whether some grant got an id below a grant with a later timestamp (a replay in
        # effective order, see ``apply_grant``): grant ids then no longer follow heap order
        # among equal expiries, and what expires together is sorted by grant id.
        self._reordered = False

    # -- the interface of SPEC sections 2 and 5 -------------------------------------------
    # These three are the hot path: they share the lean ``_grant``/``_consume``/``_advance``
    # with the detailed ``apply_*`` methods below but build no result objects.

    def grant(
        self, amount: int, timestamp: int, expiry: int, resources: ClassList | None = None
    ) -> None:
        """Grant ``amount`` valid from ``timestamp`` until ``expiry`` (exclusive), on the
        classes ``resources`` lists (None: unrestricted). It first settles the debt it could
        have paid, in the order incurred, and keeps the rest."""
        self._grant(amount, timestamp, expiry, resources, None, None)

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
        scopes = self._scopes  # without the index there are no dead unrestricted entries
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

    @property
    def debt_may_name_a_class(self) -> bool:
        """False: all debt (if any) is of no class, and ``debts()`` is at most one item of
        None. O(1), where ``debts()`` makes the queue."""
        return self._queue is not None

    def debts(self) -> tuple[Debt, ...]:
        """The debt queue in the order incurred, one item per run of one class."""
        if self._queue is not None:
            return self._queue.items()
        return (Debt(None, self._debt),) if self._debt else ()

    def expires_nothing_by(self, timestamp: int) -> bool:
        """No live grant expires at or before ``timestamp``, so an operation at it expires
        nothing. O(1) and conservative: the bound it reads may still be a grant since used up
        or voided, and False says only that something may expire."""
        return timestamp < self._next_expiry

    def first_live_grant(self, resource: str | None = None) -> LiveGrant | None:
        """The live grant a consumption of ``resource`` (None: of no class) draws from first
        (a partly drawn one stays first)."""
        if resource is not None:
            self._check_resource(resource)
        heap = self._heap
        best = heap[0] if heap else None  # tops are live
        if resource is not None and self._scopes is not None:
            scoped = self._scopes.class_heaps.get(resource)
            if scoped and (best is None or scoped[0] < best):
                best = scoped[0]
        return None if best is None else _live_grant(best)

    def live_grant(self, grant_id: int) -> LiveGrant | None:
        """Grant ``grant_id``'s live remainder, or None (used up, expired, voided, swallowed
        by debt, or never granted). O(1) once a void built the index, O(n) before."""
        index = self._index
        if index is not None:
            entry = index.get(grant_id)
            return None if entry is None else _live_grant(entry)
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
        grant_id: int | None = None,
    ) -> GrantResult:
        """``live_room``: how many more live grants than this tracker holds now the caller
        allows (its own limits across accounts); the live grants this grant expires free room.
        A grant that would keep a live grant without room raises ``NoLiveRoom``.

        ``grant_id``: the id to give the grant instead of the next one, for a replay in
        effective order that must keep the ids grants got when they arrived (SPEC section 6).
        It must be at least 1 and not the id of a live grant; ``next_grant_id`` becomes at
        least ``grant_id + 1``. An id below ``next_grant_id`` means ids no longer follow
        timestamps: the tracker then keeps the void index (O(n) once, see the module
        docstring) to check the id, and sorts what expires together by grant id."""
        grant_id, settled, parts, key, popped = self._grant(
            amount, timestamp, expiry, resources, live_room, grant_id
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
            removed = entry[4]
            if len(entry) == 5:
                entry[4] = 0  # dead until it reaches the top
                _purge(self._heap)
            else:
                scopes = self._scopes
                assert scopes is not None
                scopes.kill(entry)
                for resource in entry[5]:
                    scopes.tidy(resource)
            self._available -= removed
        return VoidResult(grant_id, removed, self._available, self._debt, _expirations(popped))

    def available_at(self, timestamp: int, resource: str | None = None) -> int:
        """The live credits at ``timestamp`` (at or after the clock) if nothing else happens
        before it, in total or for class ``resource``: a projection that changes nothing, not
        even the clock. Live grants expiring at or before ``timestamp`` no longer count.

        O(h + e) for the h heaps looked at and the e entries that expire by then."""
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_VALUE:
            raise _invalid("timestamp", timestamp, 0)
        if resource is not None:
            self._check_resource(resource)
        if timestamp < self._clock:
            raise TimestampRegression(timestamp, self._clock)
        total = self._available if resource is None else self._eligible(resource)
        if timestamp < self._next_expiry:
            return total
        expiring = _expiring(self._heap, timestamp)
        scopes = self._scopes
        if scopes is not None:
            if resource is None:
                for owner, heap in scopes.class_heaps.items():
                    expiring += _expiring(heap, timestamp, owner)
            else:
                expiring += _expiring(scopes.class_heaps.get(resource, []), timestamp)
        assert 0 <= expiring <= total
        return total - expiring

    def live_grants_of(self, grant_ids: Collection[int]) -> dict[int, LiveGrant]:
        """The live remainders of those of ``grant_ids`` that are live, by id: O(k) for k ids
        once the index exists, else one O(n) pass that builds nothing for the other grants
        (what a diff of a few touched grants needs)."""
        index = self._index
        if index is not None:
            found = (index.get(g) for g in grant_ids)
            return {e[3]: _live_grant(e) for e in found if e is not None}
        entries = [e for e in self._heap if e[4] and e[3] in grant_ids]
        if self._scopes is not None:
            entries.extend(e for e in self._scopes.entries(None) if e[3] in grant_ids)
        return {e[3]: _live_grant(e) for e in entries}

    def live_grants(self, resource: str | None = None) -> list[LiveGrant]:
        """Live grants in consumption order: earliest expiry, then the narrower class set
        (unrestricted last), then grant order. All of them, or those a consumption of class
        ``resource`` could draw (in the order it would)."""
        if resource is not None:
            self._check_resource(resource)
        entries = [e for e in self._heap if e[4]]
        if self._scopes is not None:
            entries.extend(self._scopes.entries(resource))
        entries.sort()  # entries compare in consumption order
        return [_live_grant(e) for e in entries]

    def copy(self) -> GPUCreditTracker:
        """An independent copy (O(n log n)): what a caller restores to undo a series of calls."""
        twin = GPUCreditTracker(
            max_live_grants=self._max_live_grants, max_classes=self._max_classes
        )
        # Entries are mutable: copy each; dead ones are left behind (the copy has no index).
        twin._heap = [[*e] for e in self._heap if e[4]]  # [*e]: the cheapest list copy
        heapq.heapify(twin._heap)
        twin._available = self._available
        twin._clock = self._clock
        twin._next_grant_id = self._next_grant_id
        twin._next_expiry = self._next_expiry
        twin._reordered = self._reordered
        if self._scopes is not None:
            twin._scopes = self._scopes.copy()
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
            granted_at = _check_int("granted_at", live.granted_at, 0, clock)
            if key is None:
                tracker._heap.append(
                    [live.expiry, _UNRESTRICTED_WIDTH, granted_at, live.grant_id, live.remaining]
                )
            else:
                tracker._scoped().add(
                    [live.expiry, len(key), granted_at, live.grant_id, live.remaining, key]
                )
            tracker._available += live.remaining
            if live.expiry < tracker._next_expiry:
                tracker._next_expiry = live.expiry
        heapq.heapify(tracker._heap)
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
        by_id = sorted(state.live_grants, key=_grant_id_of)
        tracker._reordered = any(a.granted_at > b.granted_at for a, b in itertools.pairwise(by_id))
        return tracker

    def check_invariants(self) -> None:
        """O(n) full check, for tests: the running sums match the live grants, and so on."""
        index = self._index
        scopes = self._scopes
        queue = self._queue
        heap = self._heap
        assert all(heap[(i - 1) // 2] <= heap[i] for i in range(1, len(heap))), "not a heap"
        assert not heap or heap[0][4] > 0, "dead entry on top"
        assert index is not None or all(e[4] for e in heap), "dead entry without index"
        assert all(len(e) == 5 and e[1] == _UNRESTRICTED_WIDTH for e in heap)
        live_entries = {e[3]: e for e in heap if e[4]}
        assert len(live_entries) == len([e for e in heap if e[4]]), "grant in the heap twice"
        low = heap[0][0] if heap else _NEVER
        if scopes is not None:
            scoped: dict[int, _Entry] = {}
            members: dict[str, set[int]] = {}
            for resource, cheap in scopes.class_heaps.items():
                assert all(cheap[(i - 1) // 2] <= cheap[i] for i in range(1, len(cheap)))
                assert cheap, "empty class heap kept"
                assert cheap[0][4] > 0, "dead entry on top"
                assert len({id(e) for e in cheap}) == len(cheap), "entry twice in a heap"
                members[resource] = {id(e) for e in cheap}
                live = [e for e in cheap if e[4]]
                assert live, "class heap without a live entry kept"
                assert scopes.class_dead[resource] == len(cheap) - len(live), "dead count drifted"
                assert scopes.class_dead[resource] <= max(_DEAD_SLACK, len(live)) + 1
                assert scopes.class_available[resource] == sum(e[4] for e in live)
                for e in cheap:
                    assert len(e) == 6
                    assert resource in e[5]
                    assert e[1] == len(e[5])
                for e in live:
                    assert scoped.setdefault(e[3], e) is e, "two entries for one grant"
                low = min(low, cheap[0][0])
            for e in scoped.values():
                key = e[5]
                assert 1 <= len(key) <= MAX_RESOURCES
                assert key == tuple(sorted(set(key))), "class set not normalised"
                assert all(id(e) in members[c] for c in key), "live grant missing from a heap"
                assert e[3] not in live_entries, "grant unrestricted and scoped"
            assert scopes.available == sum(e[4] for e in scoped.values()), "scoped sum drifted"
            assert scopes.live == len(scoped)
            names = set(scopes.class_heaps)
            assert names == set(scopes.class_dead)
            assert names == set(scopes.class_available)
            debt_classes = {c for c in (queue.by_class if queue else {}) if c is not None}
            want_use = {c: (c in names) + (c in debt_classes) for c in names | debt_classes}
            assert scopes.in_use == want_use, "classes in use drifted"
            live_entries.update(scoped)
        assert all(e[0] > self._clock for e in live_entries.values()), "expired grant kept"
        assert all(0 <= e[2] <= self._clock for e in live_entries.values()), "granted later"
        if not self._reordered:  # ids follow timestamps: heap order is grant_id order
            by_id = sorted(live_entries.values(), key=lambda e: e[3])
            assert all(a[2] <= b[2] for a, b in itertools.pairwise(by_id)), "reordered"
        assert all(1 <= g < self._next_grant_id for g in live_entries)
        assert self._next_expiry <= low, "eviction bound above an expiry"
        assert self._available == sum(e[4] for e in live_entries.values()), "running sum drifted"
        assert 0 <= self._available <= MAX_VALUE
        assert 0 <= self._debt <= MAX_VALUE
        if index is not None:
            assert index.keys() == live_entries.keys(), "void index drifted"
            assert all(index[g] is e for g, e in live_entries.items())
        assert self.live_grant_count == len(live_entries)
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
            assert scopes is not None
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
        given_id: int | None,
    ) -> tuple[int, int, tuple[Debt, ...], _Key, _Popped]:
        """Validate, then apply; return (grant_id, settled_debt, settled per debt item,
        normalised classes, expired live grants). ``given_id``: see ``apply_grant``."""
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
        known = False  # every class of ``key`` in use (before eviction)
        if resources is not None:
            in_use = self._scopes.in_use if self._scopes is not None else None
            # Inlined for the usual grant: one or two classes the account already uses
            # (checked when they came in), in a list as JSON gives it.
            if in_use is not None and (type(resources) is list or type(resources) is tuple):
                size = len(resources)
                if size == 1:
                    only = resources[0]
                    if type(only) is str and only in in_use:
                        key = (only,)
                elif size == 2:
                    first, second = resources
                    if (
                        type(first) is str
                        and type(second) is str
                        and first in in_use
                        and second in in_use
                        and first != second
                    ):
                        key = (first, second) if first < second else (second, first)
            if key is None:
                key = _check_classes(resources, in_use)
            else:
                known = True
        if timestamp < self._clock:
            raise TimestampRegression(timestamp, self._clock)
        if given_id is not None:
            self._check_given_id(given_id)

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
        scopes = self._scopes
        if retained:
            # The common case is checked inline: in range, room left, no class new.
            index = self._index
            count = len(self._heap) if index is None else len(index)
            if scopes is not None and index is None:
                count += scopes.live
            suspect = (
                self._available + retained > MAX_VALUE
                or count >= self._max_live_grants
                or live_room is not None
            )
            if key is not None and not suspect and not (known and not popped):
                if scopes is None:
                    suspect = True
                else:
                    in_use = scopes.in_use
                    for resource in key:
                        if resource not in in_use:
                            suspect = True
                            break
            if suspect:
                refusal = self._grant_refusal(retained, key, live_room, len(popped))
                if refusal is not None:
                    self._unpop(popped)
                    raise refusal

        if given_id is None:
            grant_id = self._next_grant_id
            self._next_grant_id = grant_id + 1
        else:
            grant_id = given_id
            if grant_id >= self._next_grant_id:
                self._next_grant_id = grant_id + 1
            else:
                self._reordered = True
        self._clock = timestamp
        parts = self._settle(key, settled) if settled else _NO_DEBTS
        if retained:
            entry: _Entry
            if key is None:
                entry = [expiry, _UNRESTRICTED_WIDTH, timestamp, grant_id, retained]
                _heappush(self._heap, entry)
            else:
                entry = [expiry, len(key), timestamp, grant_id, retained, key]
                if scopes is None:
                    scopes = self._scopes = _Scopes()
                # ``scopes.add``, inlined for the usual case: every class has its heap.
                scopes.available += retained
                scopes.live += 1
                heaps = scopes.class_heaps
                class_available = scopes.class_available
                for resource in key:
                    heap = heaps.get(resource)
                    if heap is None:
                        scopes.open(resource, entry)
                    else:
                        _heappush(heap, entry)
                        class_available[resource] += retained
            if self._index is not None:
                self._index[grant_id] = entry
            self._available += retained
            if expiry < self._next_expiry:
                self._next_expiry = expiry
        return grant_id, settled, parts, key, popped

    def _check_given_id(self, grant_id: object) -> None:
        """An explicit grant id (``apply_grant``) is an integer from 1 and no live grant's."""
        if type(grant_id) is not int or not 1 <= grant_id <= MAX_VALUE:
            raise _invalid("grant_id", grant_id, 1)
        if grant_id >= self._next_grant_id:
            return  # above every id given so far: not live
        index = self._index
        if index is None:
            # Ids below the next one come from replays in effective order; the index makes
            # the check O(1) from here on (the same one a void builds).
            index = self._index = self._build_index()
        if grant_id in index:
            raise InvalidInput("grant_id", f"grant {grant_id} is live already")

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
        scopes = self._scopes
        if resource is not None and (
            type(resource) is not str or scopes is None or resource not in scopes.in_use
        ):
            self._check_resource(resource)  # a class in use was checked when it came in
        if timestamp < self._clock:
            raise TimestampRegression(timestamp, self._clock)

        popped = self._pop_expired(timestamp) if timestamp >= self._next_expiry else _NONE
        scoped: list[_Entry] | None = None  # the heap of ``resource``'s grants
        if scopes is None:
            available = self._available
        else:
            available = self._available - scopes.available  # unrestricted credits
            if resource is not None:
                scoped = scopes.class_heaps.get(resource)
                if scoped is not None:
                    available += scopes.class_available[resource]
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

        if scoped is not None and consumed:
            assert scopes is not None
            assert resource is not None
            self._draw(scopes, resource, scoped, consumed, allocation, remaining)
        elif consumed:
            # Unrestricted credits alone (inlined: the hot path of SPEC section 1).
            heap = self._heap
            index = self._index
            self._available -= consumed
            to_take = consumed
            while to_take:
                live = heap[0]  # tops are live
                left = live[4]
                if left <= to_take:
                    _heappop(heap)
                    to_take -= left
                    if index is not None:
                        del index[live[3]]
                        _purge(heap)
                    if allocation is not None:
                        allocation.append(Allocation(live[3], live[0], left))
                        remaining.append(0)
                else:
                    live[4] = left - to_take  # the heap key is unchanged
                    if allocation is not None:
                        allocation.append(Allocation(live[3], live[0], to_take))
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
        resource: str,
        scoped: list[_Entry],
        to_take: int,
        allocation: list[Allocation] | None,
        remaining: list[int],
    ) -> None:
        """Draw ``to_take`` for a consumption of ``resource``: each time from the lesser top of
        the unrestricted heap and ``resource``'s heap (``scoped``), which is the grant SPEC
        section 5 orders first, as entries compare by (expiry, width, granted_at, grant_id)."""
        heap = self._heap
        index = self._index
        class_heaps = scopes.class_heaps
        class_dead = scopes.class_dead
        class_available = scopes.class_available
        self._available -= to_take
        while to_take:
            if scoped and (not heap or scoped[0] < heap[0]):
                live = scoped[0]
                left = live[4]
                classes: tuple[str, ...] = live[5]
                key: _Key = classes
                if left <= to_take:
                    take, left = left, 0
                    _heappop(scoped)
                    if index is not None:
                        del index[live[3]]
                    # ``scopes.kill`` inlined: dead in its other classes' heaps, gone from
                    # this one; then each heap tidied unless there is nothing to do.
                    live[4] = 0
                    scopes.available -= take
                    scopes.live -= 1
                    for owner in classes:
                        class_available[owner] -= take
                        if owner != resource:
                            class_dead[owner] += 1
                    for owner in classes:
                        owned = class_heaps[owner]
                        if not (
                            class_available[owner]
                            and owned[0][4]
                            and class_dead[owner] <= _DEAD_SLACK
                        ):
                            scopes.tidy(owner)  # may drop ``resource``'s: ``scoped`` empties
                else:
                    take = to_take
                    left -= take
                    live[4] = left
                    scopes.available -= take
                    for owner in classes:
                        class_available[owner] -= take
            else:
                live = heap[0]
                left = live[4]
                key = None
                if left <= to_take:
                    take, left = left, 0
                    _heappop(heap)
                    if index is not None:
                        del index[live[3]]
                        _purge(heap)
                else:
                    take = to_take
                    left -= take
                    live[4] = left
            to_take -= take
            if allocation is not None:
                allocation.append(Allocation(live[3], live[0], take, key))
                remaining.append(left)

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
            credits = live[4]
            if credits:
                popped.append((live, credits, None))
                expired += credits
                if index is not None:
                    del index[live[3]]
        if index is not None:
            _purge(heap)
        low = heap[0][0] if heap else _NEVER
        scopes = self._scopes
        if scopes is not None and scopes.class_heaps:
            unrestricted = len(popped)
            class_dead = scopes.class_dead
            touched: list[str] = []
            for resource, scoped in scopes.class_heaps.items():
                if scoped[0][0] > timestamp:
                    low = min(low, scoped[0][0])
                    continue
                touched.append(resource)
                while scoped and scoped[0][0] <= timestamp:
                    live = _heappop(scoped)
                    credits = live[4]
                    if credits:  # its first heap to pop it: dead in the others from here
                        popped.append((live, credits, live[5]))
                        expired += credits
                        if index is not None:
                            del index[live[3]]
                        scopes.kill(live)
                    class_dead[resource] -= 1
            for resource in touched:
                scopes.tidy(resource)
                scoped = scopes.class_heaps.get(resource, [])
                if scoped:
                    low = min(low, scoped[0][0])
            if len(popped) > unrestricted > 0 or len(popped) > unrestricted + 1:
                popped.sort(key=_expiry_and_grant)
        if self._reordered and len(popped) > 1:
            popped.sort(key=_expiry_and_grant)  # heap order is (expiry, granted_at, grant)
        self._available -= expired
        self._next_expiry = low
        return popped

    def _unpop(self, popped: _Popped) -> None:
        """Undo ``_pop_expired`` for a call that is being rejected (every heap gave up all of
        its expired entries, so each comes back once into each of its heaps)."""
        index = self._index
        for entry, credits, key in popped:
            entry[4] = credits
            if key is None:
                _heappush(self._heap, entry)
            else:
                self._scoped().add(entry)
            self._available += credits
            if index is not None:
                index[entry[3]] = entry
            if entry[0] < self._next_expiry:
                self._next_expiry = entry[0]

    def _scoped(self) -> _Scopes:
        scopes = self._scopes
        if scopes is None:
            scopes = self._scopes = _Scopes()
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
            total += scopes.class_available.get(resource, 0)
        return total

    def _debt_classes(self) -> list[str | None]:
        """The classes (None: no class) with outstanding debt."""
        if self._queue is not None:
            return list(self._queue.by_class)
        return [None] if self._debt else []

    def _build_index(self) -> dict[int, _Entry]:
        index = {e[3]: e for e in self._heap}  # no dead entries before the index exists
        if self._scopes is not None:
            index.update((e[3], e) for e in self._scopes.entries(None))
        return index
