"""One account in event time (SPEC section 6): late writes, restatements, the watermark.

Standard library only, no clock reads, no I/O, like the tracker it drives. The service gives
``AccountTimeline.write`` each write with its timestamp; the timeline places it in effective
order, (timestamp, arrival), and says what storage must change: the ledger lines that are
new, restated or gone, the live grants of the current state, and now and then a checkpoint.

Terms. The clock ``C`` is the latest timestamp among accepted writes; the watermark is
``M = max(M, C - W)`` for the lateness window ``W`` (it never moves back). A write with
timestamp ``>= M`` is accepted, an earlier one is ``TooLate``. Effective order is
(timestamp, arrival), and arrival is the ledger ``sequence`` a write gets when it is accepted,
so effective order is (timestamp, sequence).

Design:

- Two trackers. The FINAL tracker holds every accepted write with timestamp ``<= M`` (the
  folded writes), applied in effective order. A write AT ``M`` can be folded: any write
  accepted later has a timestamp ``>= M`` and arrives later, so it goes after it. (SPEC's
  display rule, entries with timestamp ``< M`` are final, is the service's and separate.) The
  PROVISIONAL writes, timestamp ``> M``, are kept in effective order with the ledger lines
  each produced (its group: the expiration lines it made appear, then its own line). The
  CURRENT tracker is final + provisional. Every read and answer at ``C`` comes from it.
- ``W = 0`` (the default, every account today): every write folds as soon as it is accepted,
  so final and current are one tracker object, there is no provisional list and no replay
  mark: a write is the tracker call, its lines and its answer (and, every K writes, a stored
  checkpoint, below), nothing more.
  ``W > 0``: the trackers split (one O(n) copy, at the first write that stays provisional)
  and every write is applied twice, once to the current tracker when it is accepted and
  once to the final one when it folds: amortised O(log n) each, twice the memory.
- In-order writes (timestamp ``>= C``) are applied to the current tracker: O(log n)
  amortised, and what storage must change comes from the tracker's results, as the journal
  has always done.
- Late writes (``M <= timestamp < C``) go after every provisional write with timestamp ``<=``
  theirs. The current state after them has to be recomputed: the timeline keeps REPLAY
  MARKS, copies of the current tracker every ``K_p`` provisional writes, ``K_p = max(64,
  live grants / 8)``; a late write copies the nearest mark at or before its position, replays
  the writes from there (at most ``K_p`` whose lines are unchanged, then itself and every
  write after it, recomputing their lines and re-making the marks after it), and diffs the
  lines after its position against the old ones, building each line once (or keeping the
  old object when nothing changed). Cost O((following writes + K_p) log n + n): the copy
  is O(n), marks cost O(n / K_p) = O(8) entries per write replayed, amortised. Memory: at
  most ``P / K_p`` marks of n entries each for P provisional writes, and n / K_p <= 8, so
  at most about ``8 * max_provisional`` entries however large n is.
- Folding: as ``C`` moves, ``M`` moves, and the provisional writes with timestamp ``<= M``
  are applied to the final tracker in order (the marks before them are dropped). Past
  ``max_provisional`` provisional writes (SPEC: 10,000), the oldest are folded early and
  ``M`` moves to the newest folded one's timestamp; the answer says so (``watermark``).
- Stored checkpoints: every ``K`` folded writes an answer carries a ``Checkpoint`` (the final
  tracker's state after a folded write, with that write's sequence and timestamp), ``K =
  max(256, live grants of the final tracker when the previous checkpoint was taken)``. (Read
  at each fold, the live count would run away from an account that grows by a live grant a
  write, and no checkpoint would ever come.) The service stores them; an as-of read before
  the watermark loads the nearest checkpoint at or before its time and replays at most ``K``
  stored writes after it (``replay``), so its cost does not grow with the history.
  ``state()`` is O(n log n) for n <= 2K, so that is O(log n) per folded write. After a
  restart K is recomputed from the live grants then.

Ledger lines. Every line has a ``sequence`` (its identity, never reused), a ``timestamp``, a
``rank`` (order within a timestamp: an expiration line's is ``grant_id - 2**53``, before
every write, whose rank is its sequence; the ledger is ORDER BY timestamp, rank), the totals
right after it in that order (``available``, ``debt``) and a ``revision``. A write's line
exists from its arrival; an expiration line exists while some write's timestamp reaches the
grant's expiry with credits of it left (lazy, stamped with the expiry, as the tracker has
always done). Within one write's group the expiration lines come first, by (expiry, grant).
The new lines of one answer are numbered in listing order, so an in-order write's expiration
lines get the sequences just before its own, as the journal has always numbered them.

What a late write reports. ``upserted``: every line that is new, or whose effect, balance
after or revision changed (storage writes them). ``removed``: the sequences of lines that no
longer exist (an expiration whose grant no longer has credits left at its expiry).
``restated``: lines whose EFFECT changed (``revision`` + 1) plus lines removed; a line whose
only change is the balance after it is upserted but neither restated nor revised (SPEC
Example 4: the late grant 2 restates 0). An expiration line is identified by its grant (a
grant expires at most once); one removed by a late write and made to appear again by a
later one is a NEW line with a new sequence and revision 0: sequences are never reused, so
storage needs no tombstones and a client never sees a sequence come back.

Reads (``balance_at``, change nothing). At or after ``C``: the projection from the current
tracker. From ``M`` to ``C``: a total is the balance after the last line at or before T (a
bisect and a look at one group: O(log P)); a class read copies the nearest replay mark and
replays up to K_p writes. Before ``M``: the service's stored checkpoints and ``replay``.

Refusals. A write before the watermark raises ``TooLate``. A late write that is valid at its
position but makes a later write invalid when replayed (``TotalOverflow``, ``ClassLimit``,
``LiveGrantLimit``, ...) is refused with that error. Either way, like every refusal here,
nothing changes: no clock move, no sequence or grant id consumed (the replay runs on copies
and is swapped in only once it all succeeded).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal, NamedTuple

from app.domain.tracker import (
    DEFAULT_MAX_LIVE_GRANTS,
    MAX_CLASSES,
    MAX_VALUE,
    Allocation,
    ClassList,
    ConsumeResult,
    Expiration,
    GPUCreditTracker,
    GrantResult,
    InvalidInput,
    LiveGrant,
    NoLiveRoom,
    TimestampRegression,
    TrackerState,
    VoidResult,
)

# SPEC section 6: at most this many provisional writes per account.
DEFAULT_MAX_PROVISIONAL: Final = 10_000
# Stored checkpoints every K folded writes, K = max(this, live grants): a state costs
# O(n log n), so K >= n keeps it O(log n) per write, and this floor keeps small accounts from
# storing a state every few writes.
CHECKPOINT_SPACING_MIN: Final = 256
# Replay marks every K_p provisional writes, K_p = max(this, live grants // 8): a copy costs
# O(n), so K_p >= n / 8 keeps copies O(8) per write, and memory at ~8 entries per write.
REPLAY_SPACING_MIN: Final = 64
REPLAY_SPACING_DIVISOR: Final = 8
# An expiration line's rank: its grant id minus this, so it sorts before every write line
# (rank = sequence >= 1) at its timestamp, and among expirations by grant id.
EXPIRATION_RANK_BASE: Final = 2**53
# Provisional writes already folded stay in the list (a head index moves past them) until
# there are this many and they are at least half of it: removal is amortised O(1).
_COMPACT_MIN: Final = 256


@dataclass(frozen=True, slots=True)
class TimelineLimits:
    """The bounds of one timeline: ``max_provisional`` (SPEC section 6: 10,000), the
    tracker's own limits, and the spacing floors of stored checkpoints and replay marks (the
    defaults suit production; tests lower them to exercise the machinery at small sizes)."""

    max_provisional: int = DEFAULT_MAX_PROVISIONAL
    max_live_grants: int = DEFAULT_MAX_LIVE_GRANTS
    max_classes: int = MAX_CLASSES
    checkpoint_spacing_min: int = CHECKPOINT_SPACING_MIN
    replay_spacing_min: int = REPLAY_SPACING_MIN

    def __post_init__(self) -> None:
        assert 1 <= self.max_provisional <= MAX_VALUE
        assert self.max_live_grants >= 1
        assert self.max_classes >= 1
        assert self.checkpoint_spacing_min >= 1
        assert self.replay_spacing_min >= 1


DEFAULT_LIMITS: Final = TimelineLimits()


class TooLate(TimestampRegression):
    """A write whose timestamp is before the account's watermark (SPEC section 6): refused,
    changes nothing. A ``TimestampRegression``, so the HTTP layer keeps its 409; it carries
    the ``watermark`` too. With a window of 0 the watermark is the clock."""

    def __init__(self, timestamp: int, account_timestamp: int, watermark: int) -> None:
        super().__init__(timestamp, account_timestamp)
        self.args = (
            f"timestamp {timestamp} is earlier than the account's watermark {watermark} "
            f"(its latest timestamp is {account_timestamp})",
        )
        self.watermark = watermark


# -- writes --------------------------------------------------------------------------------
# Named tuples, as the lines below: immutable, and one is made per write (a frozen dataclass
# sets each field through object.__setattr__: 0.35 against 0.15 us). Kinds never compare
# equal: each has its own number of fields.


class GrantWrite(NamedTuple):
    amount: int
    timestamp: int
    expiry: int
    resources: ClassList | None = None  # None: unrestricted


class ConsumeWrite(NamedTuple):
    amount: int
    timestamp: int
    resource: str | None = None  # None: no class


class VoidWrite(NamedTuple):
    grant_id: int
    timestamp: int


Write = GrantWrite | ConsumeWrite | VoidWrite
# A stored write for ``replay``: (sequence, grant id for a grant else None, the write).
SequencedWrite = tuple[int, int | None, Write]


# -- ledger lines ----------------------------------------------------------------------------
# One record per kind, mirroring app.storage.base's entries, plus rank and revision. Named
# tuples: immutable (the timeline keeps the lines it hands out and compares them with the
# next version) and made several times per write, where a frozen dataclass's __init__ costs
# four times as much. Kinds never compare equal: each has its own number of fields.


class GrantLine(NamedTuple):
    sequence: int
    timestamp: int
    rank: int
    available: int
    debt: int
    revision: int
    grant_id: int
    amount: int
    expiry: int
    resources: tuple[str, ...] | None
    settled_debt: int
    retained: int

    @property
    def kind(self) -> Literal["grant"]:
        return "grant"

    def effect(self) -> tuple[object, ...]:
        return (self.settled_debt, self.retained)


class ConsumptionLine(NamedTuple):
    sequence: int
    timestamp: int
    rank: int
    available: int
    debt: int
    revision: int
    amount: int
    resource: str | None
    consumed: int
    debt_added: int
    allocation: tuple[Allocation, ...]  # grants' arrival ids, in the order drawn

    @property
    def kind(self) -> Literal["consumption"]:
        return "consumption"

    def effect(self) -> tuple[object, ...]:
        return (self.consumed, self.debt_added, self.allocation)


class VoidLine(NamedTuple):
    sequence: int
    timestamp: int
    rank: int
    available: int
    debt: int
    revision: int
    grant_id: int
    amount: int  # the live remainder removed

    @property
    def kind(self) -> Literal["void"]:
        return "void"

    def effect(self) -> tuple[object, ...]:
        return (self.amount,)


class ExpirationLine(NamedTuple):
    sequence: int
    timestamp: int  # the grant's expiry
    rank: int  # grant_id - 2**53
    available: int
    debt: int
    revision: int
    grant_id: int
    expiry: int
    amount: int
    resources: tuple[str, ...] | None

    @property
    def kind(self) -> Literal["expiration"]:
        return "expiration"

    def effect(self) -> tuple[object, ...]:
        return (self.amount,)


Line = GrantLine | ConsumptionLine | VoidLine | ExpirationLine
WriteLine = GrantLine | ConsumptionLine | VoidLine


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """The final tracker's state right after the folded write ``sequence`` (at
    ``timestamp``): an as-of read at T >= timestamp replays the stored writes after it in
    effective order, (timestamp, sequence) > (``timestamp``, ``sequence``), up to T."""

    state: TrackerState
    sequence: int
    timestamp: int


class WriteOutcome(NamedTuple):
    """What one accepted write did. ``line``: its own line at its effective position.
    ``upserted`` (effective order) and ``removed``: what storage must write and delete of the
    ledger. ``restated``: lines whose effect changed, plus lines removed. ``available`` and
    ``debt``: the totals at the clock. ``live_upserted``/``live_removed``: the current
    state's live grants that changed. ``folded``: writes that became final (this one
    included, with a window of 0). ``checkpoints``: states to store, usually none."""

    line: WriteLine
    upserted: tuple[Line, ...]
    removed: tuple[int, ...]
    restated: int
    clock: int
    watermark: int
    available: int
    debt: int
    live_upserted: tuple[LiveGrant, ...]
    live_removed: tuple[int, ...]
    folded: int
    checkpoints: tuple[Checkpoint, ...]

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The newest checkpoint of this write, if any (a write folds at most one batch, and
        a batch past 2 * K writes, after a jump of the clock, yields several)."""
        return self.checkpoints[-1] if self.checkpoints else None


@dataclass(frozen=True, slots=True)
class FoldOutcome:
    """What a window change did: the watermark now, writes that became final, checkpoints."""

    watermark: int
    folded: int
    checkpoints: tuple[Checkpoint, ...]


# -- internal records ----------------------------------------------------------------------


class _Pending:
    """A provisional write: its identity, the write (classes normalised), and its group of
    lines in listing order (the expiration lines it made appear, then its own line)."""

    __slots__ = ("grant_id", "lines", "sequence", "timestamp", "write")

    def __init__(self, sequence: int, grant_id: int, write: Write, lines: tuple[Line, ...]) -> None:
        self.sequence = sequence
        self.grant_id = grant_id  # 0: not a grant
        self.write = write
        self.timestamp = write.timestamp
        self.lines = lines


_Result = GrantResult | ConsumeResult | VoidResult
_NO_LINES: Final[tuple[Line, ...]] = ()
_NO_CHECKPOINTS: Final[tuple[Checkpoint, ...]] = ()
_NO_IDS: Final[tuple[int, ...]] = ()
_NO_LIVE: Final[tuple[LiveGrant, ...]] = ()
# Every timeline's provisional containers until it holds a provisional write: never mutated
# (``_own_provisional`` replaces them first; ``check_invariants`` asserts they stay empty).
_SHARED_PENDING: Final[list[_Pending]] = []
_SHARED_STAMPS: Final[list[int]] = []
_SHARED_MARKS: Final[list[tuple[int, GPUCreditTracker]]] = []
_SHARED_GRANTS: Final[dict[int, int]] = {}


class AccountTimeline:
    """One account in event time. See the module docstring for the design and costs."""

    __slots__ = (
        "_checkpoint_spacing",
        "_clock",
        "_current",
        "_final",
        "_folded_since",
        "_head",
        "_limits",
        "_marks",
        "_next_sequence",
        "_pending",
        "_pending_grants",
        "_stamps",
        "_watermark",
        "_window",
    )

    def __init__(self, window: int = 0, *, limits: TimelineLimits = DEFAULT_LIMITS) -> None:
        _check_window(window)
        self._window = window
        self._limits = limits
        self._final = GPUCreditTracker(
            max_live_grants=limits.max_live_grants, max_classes=limits.max_classes
        )
        # Final and current are one object while no write is provisional and until one has
        # to be (always with a window of 0); see ``_in_order``.
        self._current = self._final
        self._clock = 0
        self._watermark = 0
        self._next_sequence = 1
        self._folded_since = 0  # folded writes since the last stored checkpoint
        # K: fixed when a checkpoint is taken (a live count read at each fold would run away
        # from a growing account: it grows by one a write, as fast as the count).
        self._checkpoint_spacing = limits.checkpoint_spacing_min
        # Provisional writes in effective order from index ``_head`` (before it: folded,
        # dropped at the next compaction), with their timestamps alongside for bisect.
        # Shared empty containers until the first provisional write (``_own_provisional``):
        # an account that never has one (every account with a window of 0) holds none.
        self._pending: list[_Pending] = _SHARED_PENDING
        self._stamps: list[int] = _SHARED_STAMPS
        self._head = 0
        # Replay marks: (index i into ``_pending``, the current tracker after the writes
        # ``_pending[_head:i]``), i ascending and > ``_head``.
        self._marks: list[tuple[int, GPUCreditTracker]] = _SHARED_MARKS
        self._pending_grants: dict[int, int] = (
            _SHARED_GRANTS  # provisional grant id -> its timestamp
        )

    # -- reading -------------------------------------------------------------------------

    @property
    def clock(self) -> int:
        return self._clock

    @property
    def watermark(self) -> int:
        return self._watermark

    @property
    def window(self) -> int:
        return self._window

    @property
    def next_sequence(self) -> int:
        return self._next_sequence

    @property
    def next_grant_id(self) -> int:
        return self._current.next_grant_id

    @property
    def folded_since_checkpoint(self) -> int:
        return self._folded_since

    @property
    def available(self) -> int:
        return self._current.available

    @property
    def debt(self) -> int:
        return self._current.debt

    @property
    def current(self) -> GPUCreditTracker:
        """The state at the clock (every accepted write). Read it, never call it: a call on
        it would bypass the timeline."""
        return self._current

    @property
    def final(self) -> GPUCreditTracker:
        """The state after the folded writes (timestamp <= watermark). Read it only."""
        return self._final

    @property
    def provisional_count(self) -> int:
        return len(self._pending) - self._head

    def replay_cost(
        self,
        timestamp: int,
        *,
        late: bool = False,
        earlier: int = 0,
        grown: int = 0,
        read: bool = False,
    ) -> int | None:
        """About what a late write at ``timestamp`` costs, in replayed writes: it copies its
        replay base (the mark at or before its position, or the final tracker), O(n) for n
        live grants, counted as n / REPLAY_SPACING_DIVISOR writes (a copy of 10,000 live
        grants took about as long as 1,800 replayed writes), and replays every provisional
        write from that base on (up to the replay spacing before it, and all after it). The
        live grants are the base's (or the clock's, if more); those live at the base and not
        at the clock count twice (copied, then expired again by the replay).
        ``read``: a class read at that time (``balance_at``), which replays from the base up
        to its position only. 0 for a write in order, unless ``late``.

        For a caller that counts a run of writes before it applies them (a batch, a usage
        stream's chunk): ``late``, the run has writes to this account after it (applied
        before it: the caller counts them); ``earlier``, the run's writes to this account
        at or before its time (between its base and it, unless a mark came between: up to a
        replay spacing of them counts); ``grown``, the live grants the run may add before
        it (in the copy and the spacing). None when a write at ``timestamp`` replays nothing
        and no later write replays it: the account has no window (every write folds at
        once; one behind the clock is ``TooLate``), or it is before the watermark
        (``TooLate``; the watermark never moves back). O(log P); changes nothing."""
        if not self._window or timestamp < self._watermark:
            return None
        if timestamp >= self._clock and not late:
            return 0
        stamps = self._stamps
        index = bisect.bisect_right(stamps, timestamp, self._head)
        position, base = self._mark_at(index)
        # The copy is of the base, with the grants live there; those that expired since
        # (at least as many as are live there and not at the clock) are expired again by
        # the replay, their lines made and matched again: about twice a copy's cost, so
        # counted as a second copy of them. The clock's count covers grants the writes
        # after the base added.
        base_live, now_live = base.live_grant_count, self._current.live_grant_count
        live = max(base_live, now_live) + grown
        copy = min(live, self._limits.max_live_grants) // REPLAY_SPACING_DIVISOR
        again = max(0, base_live - now_live) // REPLAY_SPACING_DIVISOR
        since_base = index - position
        if earlier:
            # The run's own writes before it may hold a mark (at most a spacing apart).
            spacing = max(self._limits.replay_spacing_min, copy)
            since_base = min(since_base + earlier, max(spacing, since_base))
        return (0 if read else len(stamps) - index) + since_base + copy + again

    def provisional(self) -> list[SequencedWrite]:
        """The provisional writes in effective order, as ``restore`` and ``replay`` take them."""
        return [(p.sequence, p.grant_id or None, p.write) for p in self._pending[self._head :]]

    def lines(self) -> list[Line]:
        """The provisional region's ledger lines in listing order: every line with a timestamp
        after the final tracker's clock (what ``restore`` takes back)."""
        return [line for p in self._pending[self._head :] for line in p.lines]

    def balance_at(self, timestamp: int, resource: str | None = None) -> tuple[int, int]:
        """(available, debt) at ``timestamp``, in total or for class ``resource``; changes
        nothing. At or after the clock: the projection (credits expiring by then no longer
        count). From the watermark to the clock: the as-of state, after every write with a
        timestamp ``<=`` it and every expiry ``<=`` it (SPEC section 6). Before the watermark
        the timeline no longer holds the state: ``TooLate`` (the service reads its stored
        checkpoints, see ``replay``).

        Cost: the projection O(h + e) as ``available_at``; an as-of total O(log P) from the
        lines; an as-of class read O(n + K_p log n) (a mark copied and replayed)."""
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_VALUE:
            raise _invalid_timestamp(timestamp)
        if timestamp >= self._clock:
            tracker = self._current
            return tracker.available_at(timestamp, resource), tracker.debt_of(resource)
        if timestamp < self._watermark:
            raise TooLate(timestamp, self._clock, self._watermark)
        index = bisect.bisect_right(self._stamps, timestamp, self._head)
        assert index < len(self._pending), "as-of reads before the clock have a write after"
        if resource is None:
            # The last line with a timestamp <= T: an expiration line of the next write's
            # group, or the previous write's own line; the lines carry the totals after them.
            last: Line | None = None
            for line in self._pending[index].lines:
                if line.timestamp > timestamp:
                    break
                last = line
            if last is None and index > self._head:
                last = self._pending[index - 1].lines[-1]
            if last is not None:
                return last.available, last.debt
            final = self._final
            return final.available_at(timestamp), final.debt
        position, tracker = self._mark_at(index)
        if position < index:
            tracker = tracker.copy()
            for p in self._pending[position:index]:
                _apply(tracker, p.write, p.grant_id or None)
        return tracker.available_at(timestamp, resource), tracker.debt_of(resource)

    # -- writing -------------------------------------------------------------------------

    def write(self, write: Write, *, live_room: int | None = None) -> WriteOutcome:
        """Accept ``write`` at its effective position, or refuse it and change nothing.

        ``live_room``: how many more live grants the current state may hold after the write
        than before (a limit outside the account); past it, ``NoLiveRoom``. Raises
        ``TooLate`` before the watermark, ``InvalidInput`` for input outside SPEC's domain
        (and a void of a grant the account never had, or of a provisional grant at a time
        before the grant's), and any ``LedgerError`` the write, or a later write replayed
        after a late one, raises at its position."""
        kind = type(write)
        if kind is not GrantWrite and kind is not ConsumeWrite and kind is not VoidWrite:
            raise InvalidInput("write", f"not a write: {kind.__name__}")
        timestamp = write.timestamp
        if type(timestamp) is not int or not 0 <= timestamp <= MAX_VALUE:
            raise _invalid_timestamp(timestamp)
        if timestamp < self._watermark:
            _check_write(write)  # input errors first, as the tracker orders them
            raise TooLate(timestamp, self._clock, self._watermark)
        if kind is VoidWrite:
            self._check_void(write)  # type: ignore[arg-type]
        if timestamp < self._clock:
            return self._late(write, live_room)
        if self._current is self._final and (not self._window or timestamp <= self._watermark):
            return self._in_order_final(write, live_room)  # folds at once: M = C = timestamp
        return self._in_order(write, live_room)

    def grant_at_clock(
        self,
        amount: int,
        timestamp: int,
        expiry: int,
        live_room: int | None,
        resources: ClassList | None = None,
    ) -> tuple[GrantResult, int, tuple[LiveGrant, ...], tuple[Checkpoint, ...]] | None:
        """``write(GrantWrite(...))`` for the grant every account makes most, without the
        ledger lines and the outcome ``write`` makes (a batch's operations come here one by
        one): a grant at or after the clock that folds at once and expires nothing
        (``_folds_at_once``). Returns the tracker's result, the grant's sequence, the live
        grant it keeps (if any) and the checkpoint now due (if one is); raises as ``write``
        does, and changes nothing then. None, and nothing changed, for any other grant:
        ``write`` it."""
        if not self._folds_at_once(timestamp):
            return None
        granted = self._final.apply_grant(amount, timestamp, expiry, live_room, resources=resources)
        assert not granted.expired, "nothing expires by the timestamp (checked above)"
        sequence = self._next_sequence
        checkpoints = self._fold_at_once(sequence, timestamp)
        return granted, sequence, _granted_live(granted, expiry, timestamp), checkpoints

    def consume_at_clock(
        self, amount: int, timestamp: int, resource: str | None = None
    ) -> (
        tuple[ConsumeResult, int, tuple[LiveGrant, ...], tuple[int, ...], tuple[Checkpoint, ...]]
        | None
    ):
        """``grant_at_clock`` for a consumption: the tracker's result, the consumption's
        sequence, the live grant it left partly drawn (if any), the ids of the live grants it
        used up, and the checkpoint now due, if one is. None, and nothing changed, for a
        consumption that is not in order, folding at once and expiring nothing."""
        if not self._folds_at_once(timestamp):
            return None
        tracker = self._final
        consumed = tracker.apply_consume(amount, timestamp, resource)
        assert not consumed.expired, "nothing expires by the timestamp (checked above)"
        upserted, removed = _consumed_live(tracker, consumed, resource)
        sequence = self._next_sequence
        checkpoints = self._fold_at_once(sequence, timestamp)
        return consumed, sequence, upserted, removed, checkpoints

    def copy(self) -> AccountTimeline:
        """An independent copy, for a caller that may have to undo what it does next (an
        atomic batch): O(n + P). The replay marks are shared: they are never changed, only
        replaced."""
        other = AccountTimeline.__new__(AccountTimeline)
        other._window = self._window
        other._limits = self._limits
        other._final = self._final.copy()
        other._current = other._final if self._current is self._final else self._current.copy()
        other._clock = self._clock
        other._watermark = self._watermark
        other._next_sequence = self._next_sequence
        other._folded_since = self._folded_since
        other._checkpoint_spacing = self._checkpoint_spacing
        other._head = self._head
        # A late write sets the lines of the writes after it in place: copy the records.
        if self._pending is _SHARED_PENDING:  # nothing provisional was ever held
            other._pending, other._stamps = _SHARED_PENDING, _SHARED_STAMPS
            other._marks, other._pending_grants = _SHARED_MARKS, _SHARED_GRANTS
        else:
            other._pending = [
                _Pending(p.sequence, p.grant_id, p.write, p.lines) for p in self._pending
            ]
            other._stamps = list(self._stamps)
            other._marks = list(self._marks)
            other._pending_grants = dict(self._pending_grants)
        return other

    def set_window(self, window: int) -> FoldOutcome:
        """Change the lateness window. Lowering it moves the watermark forward (the writes it
        passes fold); raising it never moves the watermark back."""
        _check_window(window)
        self._window = window
        watermark = max(self._watermark, self._clock - window)
        folded, checkpoints = self._fold_to(watermark)
        if window == 0 and self._current is not self._final:
            # Everything folded (M = C): both trackers hold every write. Keep one.
            assert self.provisional_count == 0
            assert _full_state(self._current) == _full_state(self._final)
            self._current = self._final
            self._marks.clear()
        return FoldOutcome(self._watermark, folded, checkpoints)

    # -- rebuilding ----------------------------------------------------------------------

    @classmethod
    def from_state(
        cls,
        state: TrackerState,
        *,
        next_sequence: int,
        window: int = 0,
        folded_since_checkpoint: int = 0,
        limits: TimelineLimits = DEFAULT_LIMITS,
    ) -> AccountTimeline:
        """The common case after a restart: no provisional write, so the state is both the
        final and the current one (one tracker; O(n) as ``GPUCreditTracker.from_state``).
        With nothing provisional every write is folded, so the watermark is the clock."""
        timeline = cls(window, limits=limits)
        tracker = GPUCreditTracker.from_state(
            state, max_live_grants=limits.max_live_grants, max_classes=limits.max_classes
        )
        timeline._adopt(tracker, next_sequence, folded_since_checkpoint)
        return timeline

    @classmethod
    def restore(
        cls,
        state: TrackerState,
        *,
        next_sequence: int,
        watermark: int,
        window: int,
        folded: Iterable[SequencedWrite] = (),
        lines: Sequence[Line] = (),
        next_grant_id: int | None = None,
        folded_since_checkpoint: int | None = None,
        limits: TimelineLimits = DEFAULT_LIMITS,
    ) -> AccountTimeline:
        """Rebuild a timeline after a restart. ``state``: the final state, or a stored
        checkpoint with ``folded`` the folded writes after it (effective order). ``lines``:
        every stored line with a timestamp after the final clock (the final state's, after
        ``folded``), in listing order: the provisional writes are read from their write lines,
        replayed, and the recomputed lines must equal the stored ones (effect, balance after;
        expiration lines are matched by grant and keep their stored sequence; every line
        keeps its stored revision), else ``InvalidInput`` (a pair assertion: storage and the
        rules disagree). ``folded_since_checkpoint`` defaults to the number of ``folded``.

        Cost O(n + (F + P) log n) for F folded and P provisional writes."""
        folded_list = list(folded)
        final = replay(
            state,
            folded_list,
            max_live_grants=limits.max_live_grants,
            max_classes=limits.max_classes,
        )
        timeline = cls(window, limits=limits)
        since = len(folded_list) if folded_since_checkpoint is None else folded_since_checkpoint
        timeline._adopt(final, next_sequence, since)
        timeline._restore_provisional(lines, watermark)
        if next_grant_id is not None and next_grant_id != timeline.next_grant_id:
            raise InvalidInput(
                "next_grant_id",
                f"is {next_grant_id} but the writes give {timeline.next_grant_id}",
            )
        return timeline

    def check_invariants(self) -> None:
        """O(P + n) full check, for tests: the structure is what the design says."""
        shared = (_SHARED_PENDING, _SHARED_STAMPS, _SHARED_MARKS, _SHARED_GRANTS)
        assert all(len(c) == 0 for c in shared), "a shared container was written"
        final, current = self._final, self._current
        final.check_invariants()
        if current is not final:
            current.check_invariants()
        assert self._window > 0 or current is final, "a window of 0 keeps one tracker"
        assert 0 <= self._watermark <= self._clock
        assert self._watermark >= self._clock - self._window
        assert final.clock <= self._watermark
        pending = self._pending[self._head :]
        assert len(pending) <= self._limits.max_provisional
        assert current is not final or not pending
        stamps = self._stamps[self._head :]
        assert stamps == [p.timestamp for p in pending]
        assert all(t > self._watermark for t in stamps), "a write <= M not folded"
        keys = [(p.timestamp, p.sequence) for p in pending]
        assert keys == sorted(keys), "not in effective order"
        assert self._clock == (stamps[-1] if stamps else self._clock)
        assert current.clock == self._clock or not pending
        assert all(p.sequence < self._next_sequence for p in pending)
        assert self._pending_grants == {p.grant_id: p.timestamp for p in pending if p.grant_id}
        previous = -1
        for index, _ in self._marks:
            assert self._head < index <= len(self._pending), "mark outside the provisional"
            assert index > previous
            previous = index
        listed = [(line.timestamp, line.rank) for line in self.lines()]
        assert listed == sorted(listed), "lines not in ledger order"
        assert all(t > final.clock for t, _ in listed), "provisional line at or before final"
        for p in pending:
            own = p.lines[-1]
            assert own.sequence == p.sequence
            assert own.rank == p.sequence
            assert all(type(line) is ExpirationLine for line in p.lines[:-1])
        assert self._folded_since >= 0

    # -- internals: in-order writes --------------------------------------------------------

    def _in_order_final(self, write: Write, live_room: int | None) -> WriteOutcome:
        """A write at or after the clock that folds at once (a window of 0): one tracker call
        on the shared tracker, its lines and answer. The hot path of every account."""
        tracker = self._final
        result, lines, upserted, removed = _apply_in_order(
            tracker, write, live_room, self._next_sequence
        )
        own = lines[-1]
        assert not isinstance(own, ExpirationLine)
        timestamp = write.timestamp
        checkpoints = self._fold_at_once(own.sequence, timestamp)
        return WriteOutcome(
            own,
            lines,
            _NO_IDS,
            0,
            timestamp,
            self._watermark,
            result.available,
            result.debt,
            upserted,
            removed,
            1,
            checkpoints,
        )

    def _fold_at_once(self, sequence: int, timestamp: int) -> tuple[Checkpoint, ...]:
        """Book a write in order that folds at once (its own line ``sequence``): with a window
        of 0, M = C = ``timestamp``; with another, only a write at M folds at once. Returns
        the checkpoint now due, if one is."""
        self._next_sequence = sequence + 1
        self._clock = self._watermark = timestamp
        since = self._folded_since + 1
        checkpoints = _NO_CHECKPOINTS
        if since >= self._checkpoint_spacing:
            checkpoints = (self._checkpoint(sequence, timestamp),)
            since = 0
        self._folded_since = since
        return checkpoints

    def _folds_at_once(self, timestamp: int) -> bool:
        """A write at ``timestamp`` goes in order (at or after the clock), folds at once and
        expires nothing: ``write`` would take it to ``_in_order_final`` and its lines would be
        its own line alone. Conservative: False sends a write to ``write``, always right."""
        return (
            type(timestamp) is int
            and self._clock <= timestamp <= MAX_VALUE
            and self._current is self._final
            and (not self._window or timestamp <= self._watermark)
            and self._final.expires_nothing_by(timestamp)
        )

    def _in_order(self, write: Write, live_room: int | None) -> WriteOutcome:
        """A write at or after the clock that stays provisional: applied to the current
        tracker, appended, then whatever the moved watermark passes folds."""
        tracker = self._current
        if tracker is self._final:
            # The first write that stays provisional: the current tracker becomes a copy, so
            # the final one can stay behind (O(n), once per split; kept only if it succeeds).
            assert self.provisional_count == 0
            tracker = tracker.copy()
        result, lines, upserted, removed = _apply_in_order(
            tracker, write, live_room, self._next_sequence
        )
        self._current = tracker
        own = lines[-1]
        assert not isinstance(own, ExpirationLine)
        self._next_sequence = own.sequence + 1
        grant_id = result.grant_id if type(result) is GrantResult else 0
        self._append(_Pending(own.sequence, grant_id, _normalised(write, result), lines))
        self._clock = write.timestamp
        folded, checkpoints = self._settle_watermark()
        return WriteOutcome(
            own,
            lines,
            _NO_IDS,
            0,
            self._clock,
            self._watermark,
            tracker.available,
            tracker.debt,
            upserted,
            removed,
            folded,
            checkpoints,
        )

    def _own_provisional(self) -> None:
        """Give the timeline containers of its own for provisional writes (see __init__)."""
        if self._pending is _SHARED_PENDING:
            self._pending, self._stamps, self._marks, self._pending_grants = [], [], [], {}

    def _append(self, pending: _Pending) -> None:
        self._own_provisional()
        self._pending.append(pending)
        self._stamps.append(pending.timestamp)
        if pending.grant_id:
            self._pending_grants[pending.grant_id] = pending.timestamp
        last = self._marks[-1][0] if self._marks else self._head
        end = len(self._pending)
        if end - last >= self._replay_spacing(self._current):
            self._marks.append((end, self._current.copy()))

    # -- internals: late writes ------------------------------------------------------------

    def _late(self, write: Write, live_room: int | None) -> WriteOutcome:
        """A write before the clock, at or after the watermark: inserted after every
        provisional write with a timestamp <= its own, the writes after it replayed from
        the nearest mark, their lines diffed against the old ones."""
        # Nothing provisional means M = C (every write folded), so no write is late then.
        assert self._current is not self._final
        pending = self._pending
        timestamp = write.timestamp
        index = bisect.bisect_right(self._stamps, timestamp, self._head)
        position, base = self._mark_at(index)
        tracker = base.copy()
        for p in pending[position:index]:  # lines unchanged: applied only
            _apply(tracker, p.write, p.grant_id or None)
        # The new write first, then the ones after it, each with its lines recomputed.
        marks = [m for m in self._marks if m[0] <= index]
        last_mark = marks[-1][0] if marks else self._head
        spacing = self._replay_spacing(tracker)  # once: n moves little within one replay
        suffix = pending[index:]
        old = [line for p in suffix for line in p.lines]
        restater = _Restater(old, self._next_sequence)
        before_available, before_debt = tracker.available, tracker.debt
        grant_id = self.next_grant_id if type(write) is GrantWrite else 0
        result = _apply(tracker, write, grant_id or None)
        new = _Pending(0, grant_id, _normalised(write, result), ())
        groups = [restater.group(new, result, before_available, before_debt)]
        for offset, p in enumerate(suffix):
            if index + offset + 1 - last_mark >= spacing:
                last_mark = index + offset + 1
                marks.append((last_mark, tracker.copy()))
            before_available, before_debt = tracker.available, tracker.debt
            result = _apply(tracker, p.write, p.grant_id or None)
            groups.append(restater.group(p, result, before_available, before_debt))
        end = index + len(suffix) + 1
        if end - last_mark >= spacing:
            marks.append((end, tracker.copy()))
        # Live grants: only grants some line before or after touched can differ.
        touched = _grants_touched(old, groups)
        old_live = self._current.live_grants_of(touched)
        new_live = tracker.live_grants_of(touched)
        if live_room is not None:
            grown = tracker.live_grant_count - self._current.live_grant_count
            if grown > live_room:
                raise NoLiveRoom()
        # Everything succeeded: swap the replay in.
        upserted, removed, restated = restater.finish()
        self._next_sequence = restater.next_sequence
        own = groups[0][-1]
        assert not isinstance(own, ExpirationLine)
        new.sequence = own.sequence
        new.lines = groups[0]
        for p, lines in zip(suffix, groups[1:], strict=True):
            p.lines = lines
        pending.insert(index, new)
        self._stamps.insert(index, timestamp)
        if grant_id:
            self._pending_grants[grant_id] = timestamp
        self._marks = marks  # kept ones (at or before ``index``) and new ones: new numbering
        self._current = tracker
        live_upserted = tuple(
            sorted(
                (g for i, g in new_live.items() if not _same_live(g, old_live.get(i))),
                key=_consumption_order,
            )
        )
        live_removed = tuple(sorted(i for i in old_live if i not in new_live))
        folded, checkpoints = self._settle_watermark()
        return WriteOutcome(
            own,
            upserted,
            removed,
            restated,
            self._clock,
            self._watermark,
            tracker.available,
            tracker.debt,
            live_upserted,
            live_removed,
            folded,
            checkpoints,
        )

    def _checkpoint(self, sequence: int, timestamp: int) -> Checkpoint:
        """The final tracker's state after the folded write ``sequence``; the next one comes
        K = max(floor, live grants now) folded writes later. The state costs O(n log n) and
        holds at most n + K <= 2K grants by then, so O(log n) per folded write."""
        final = self._final
        self._checkpoint_spacing = max(self._limits.checkpoint_spacing_min, final.live_grant_count)
        return Checkpoint(final.state(), sequence, timestamp)

    def _mark_at(self, index: int) -> tuple[int, GPUCreditTracker]:
        """The nearest replay base at or before ``_pending`` index ``index``: a mark, or the
        final tracker (at ``_head``). Read only: copy it to replay on it."""
        marks = self._marks
        at = bisect.bisect_right(marks, index, key=_mark_index) - 1
        if at >= 0:
            return marks[at]
        return self._head, self._final

    def _replay_spacing(self, tracker: GPUCreditTracker) -> int:
        floor = self._limits.replay_spacing_min
        return max(floor, tracker.live_grant_count // REPLAY_SPACING_DIVISOR)

    # -- internals: folding ----------------------------------------------------------------

    def _settle_watermark(
        self, *, emit_checkpoints: bool = True
    ) -> tuple[int, tuple[Checkpoint, ...]]:
        """After a write: the watermark follows the clock, then the bound on provisional
        writes; whatever either passes folds."""
        folded, checkpoints = self._fold_to(
            max(self._watermark, self._clock - self._window), emit_checkpoints=emit_checkpoints
        )
        excess = self.provisional_count - self._limits.max_provisional
        if excess > 0:
            more, later = self._fold_to(
                self._stamps[self._head + excess - 1], emit_checkpoints=emit_checkpoints
            )
            folded += more
            checkpoints += later
        return folded, checkpoints

    def _fold_to(
        self, watermark: int, *, emit_checkpoints: bool = True
    ) -> tuple[int, tuple[Checkpoint, ...]]:
        """Move the watermark to ``watermark`` (never back) and apply the provisional writes
        it passes to the final tracker, emitting a checkpoint every K of them (unless
        ``emit_checkpoints`` is false: then the count passes K and the next fold emits)."""
        assert watermark <= self._clock
        if watermark <= self._watermark and (
            self._head == len(self._pending) or self._stamps[self._head] > self._watermark
        ):
            return 0, _NO_CHECKPOINTS
        self._watermark = max(self._watermark, watermark)
        final = self._final
        pending, stamps = self._pending, self._stamps
        head, end = self._head, len(pending)
        checkpoints: list[Checkpoint] = []
        since = self._folded_since
        while head < end and stamps[head] <= self._watermark:
            p = pending[head]
            _apply(final, p.write, p.grant_id or None)
            own = p.lines[-1]
            # Pair assertion: the final tracker reaches what the current one did there.
            assert (final.available, final.debt) == (own.available, own.debt)
            if p.grant_id:
                del self._pending_grants[p.grant_id]
            head += 1
            since += 1
            if emit_checkpoints and since >= self._checkpoint_spacing:
                checkpoints.append(self._checkpoint(p.sequence, p.timestamp))
                since = 0
        folded = head - self._head
        self._head = head
        self._folded_since = since
        marks = self._marks
        drop = 0
        while drop < len(marks) and marks[drop][0] <= head:
            drop += 1
        if drop:
            del marks[:drop]
        if head >= _COMPACT_MIN and 2 * head >= end:
            del pending[:head]
            del stamps[:head]
            self._marks = [(i - head, t) for i, t in marks]
            self._head = 0
        return folded, tuple(checkpoints)

    # -- internals: checks and rebuilding --------------------------------------------------

    def _check_void(self, write: VoidWrite) -> None:
        grant_id = write.grant_id
        if type(grant_id) is not int or not 1 <= grant_id < self.next_grant_id:
            if type(grant_id) is not int:
                raise InvalidInput("grant_id", f"must be an integer, got {type(grant_id).__name__}")
            raise InvalidInput("grant_id", f"no grant {grant_id} on this account")
        granted = self._pending_grants.get(grant_id)
        if granted is not None and write.timestamp < granted:
            raise InvalidInput(
                "timestamp", f"{write.timestamp} is before grant {grant_id}'s timestamp {granted}"
            )

    def _adopt(
        self,
        tracker: GPUCreditTracker,
        next_sequence: int,
        folded_since_checkpoint: int,
    ) -> None:
        """Take ``tracker`` as the final (and current) state of a timeline being rebuilt,
        every write folded: the watermark is the clock."""
        if type(next_sequence) is not int or not 1 <= next_sequence <= MAX_VALUE:
            raise InvalidInput("next_sequence", f"must be from 1, got {next_sequence}")
        if type(folded_since_checkpoint) is not int or folded_since_checkpoint < 0:
            raise InvalidInput("folded_since_checkpoint", "must be an integer from 0")
        self._final = self._current = tracker
        self._clock = self._watermark = tracker.clock
        self._checkpoint_spacing = max(
            self._limits.checkpoint_spacing_min, tracker.live_grant_count
        )
        self._next_sequence = next_sequence
        # A count past K (a checkpoint lost, limits changed) emits one at the next fold.
        self._folded_since = folded_since_checkpoint

    def _restore_provisional(self, lines: Sequence[Line], watermark: int) -> None:
        """Replay the provisional writes read from ``lines`` on the final tracker and check
        the recomputed lines against the stored ones (see ``restore``)."""
        if lines:
            self._own_provisional()
        final = self._final
        stored: dict[int, Line] = {}
        records: list[_Pending] = []
        previous: tuple[int, int] | None = None
        for line in lines:
            if previous is not None and (line.timestamp, line.rank) <= previous:
                raise InvalidInput("lines", "not in ledger order (timestamp, rank)")
            previous = (line.timestamp, line.rank)
            if line.timestamp <= final.clock:
                raise InvalidInput("lines", f"line {line.sequence} is not after the final clock")
            if line.sequence >= self._next_sequence:
                raise InvalidInput("lines", f"line {line.sequence} is past next_sequence")
            stored[_identity(line)] = line
            if type(line) is not ExpirationLine:
                records.append(_Pending(line.sequence, *_write_of(line), ()))
        if not records:
            if stored:
                raise InvalidInput("lines", "expiration lines without a provisional write")
            if watermark != final.clock:
                raise InvalidInput("watermark", "with nothing provisional it is the clock")
            return
        clock = records[-1].timestamp
        if type(watermark) is not int or not final.clock <= watermark < records[0].timestamp:
            raise InvalidInput(
                "watermark", f"{watermark} must be from the final clock to the first provisional"
            )
        tracker = final.copy()
        last_mark = 0
        for index, p in enumerate(records):
            if index - last_mark >= self._replay_spacing(tracker):
                last_mark = index
                self._marks.append((index, tracker.copy()))
            before_available, before_debt = tracker.available, tracker.debt
            result = _apply(tracker, p.write, p.grant_id or None)
            group: list[Line] = []
            for draft in _draft_group(p, result, before_available, before_debt):
                kept = stored.pop(_identity(draft), None)
                if kept is None or _replace_key(kept) != _replace_key(draft):
                    raise InvalidInput(
                        "lines", f"stored {kept!r} but the writes give {draft!r} (pair assertion)"
                    )
                group.append(kept)
            p.lines = tuple(group)
            self._pending.append(p)
            self._stamps.append(p.timestamp)
            if p.grant_id:
                self._pending_grants[p.grant_id] = p.timestamp
        if stored:
            raise InvalidInput("lines", f"stored lines the writes do not give: {sorted(stored)}")
        if len(records) - last_mark >= self._replay_spacing(tracker):
            self._marks.append((len(records), tracker.copy()))
        self._current = tracker
        self._clock = clock
        self._watermark = watermark
        # A window or bound lowered since these writes were stored (configuration changed
        # across the restart): the rules say M = max(M, C - W) and at most max_provisional
        # writes stay provisional, so what they pass folds now, as a write would fold it.
        # Nothing is written on a load, so no checkpoint is emitted here; the count of
        # folded writes carries on and the next fold that is written emits one.
        self._settle_watermark(emit_checkpoints=False)
        if self._window == 0 and self.provisional_count == 0:
            assert _full_state(self._current) == _full_state(self._final)
            self._current = self._final
            self._marks.clear()


# -- pure functions ----------------------------------------------------------------------


def replay(
    state: TrackerState,
    writes: Iterable[SequencedWrite],
    until_timestamp: int | None = None,
    *,
    max_live_grants: int = DEFAULT_MAX_LIVE_GRANTS,
    max_classes: int = MAX_CLASSES,
) -> GPUCreditTracker:
    """A tracker rebuilt from ``state`` (a stored checkpoint) and the stored writes after it,
    in effective order, up to those with a timestamp ``<= until_timestamp`` (all without
    one): what the service uses for an as-of read before the watermark (then read it with
    ``available_at(T, resource)`` and ``debt_of(resource)``) and ``restore`` for the final
    state. Writes must come in effective order, (timestamp, sequence) ascending, and grants
    carry the id they got at arrival; anything else is ``InvalidInput``."""
    tracker = GPUCreditTracker.from_state(
        state, max_live_grants=max_live_grants, max_classes=max_classes
    )
    previous = (tracker.clock, 0)
    for sequence, grant_id, write in writes:
        timestamp = write.timestamp
        if until_timestamp is not None and timestamp > until_timestamp:
            break  # effective order: every later write is later still
        if type(sequence) is not int or (timestamp, sequence) <= previous:
            raise InvalidInput("writes", f"write {sequence} is not in effective order")
        previous = (timestamp, sequence)
        if (type(write) is GrantWrite) != (grant_id is not None):
            raise InvalidInput("writes", f"write {sequence}: a grant id goes with grants only")
        _apply(tracker, write, grant_id)
    return tracker


def _apply(
    tracker: GPUCreditTracker, write: Write, grant_id: int | None, live_room: int | None = None
) -> _Result:
    """One write on one tracker (``grant_id``: a grant's arrival id in a replay)."""
    if type(write) is ConsumeWrite:
        return tracker.apply_consume(write.amount, write.timestamp, write.resource)
    if type(write) is GrantWrite:
        return tracker.apply_grant(
            write.amount,
            write.timestamp,
            write.expiry,
            live_room,
            resources=write.resources,
            grant_id=grant_id,
        )
    if type(write) is VoidWrite:
        return tracker.apply_void(write.grant_id, write.timestamp)
    raise InvalidInput("write", f"not a write: {type(write).__name__}")


def _apply_in_order(
    tracker: GPUCreditTracker, write: Write, live_room: int | None, sequence: int
) -> tuple[_Result, tuple[Line, ...], tuple[LiveGrant, ...], tuple[int, ...]]:
    """Apply a write in order (the tracker gives a grant the next id) and return the result,
    its lines (its expiration lines, then its own, numbered from ``sequence``) and the live
    grants it changed, from the tracker's result alone: O(log n). The hot path of every
    account, so one branch per kind, and the totals before the write (where the balance
    chain of expiration lines starts) are worked back from the result, only when something
    expired."""
    timestamp = write.timestamp
    upserted: tuple[LiveGrant, ...] = _NO_LIVE
    removed: tuple[int, ...] = _NO_IDS
    if type(write) is ConsumeWrite:
        consumed = tracker.apply_consume(write.amount, timestamp, write.resource)
        expired = consumed.expired
        first = sequence + len(expired)
        own: Line = ConsumptionLine(
            first, timestamp, first, consumed.available, consumed.debt, 0, write.amount,
            write.resource, consumed.consumed, consumed.debt_added, consumed.allocation,
        )  # fmt: skip
        upserted, removed = _consumed_live(tracker, consumed, write.resource)
        result: _Result = consumed
        if expired:
            available = consumed.available + consumed.consumed
            debt = consumed.debt - consumed.debt_added
    elif type(write) is GrantWrite:
        granted = tracker.apply_grant(
            write.amount, timestamp, write.expiry, live_room, resources=write.resources
        )
        expired = granted.expired
        first = sequence + len(expired)
        own = GrantLine(
            first, timestamp, first, granted.available, granted.debt, 0, granted.grant_id,
            write.amount, write.expiry, granted.resources, granted.settled_debt, granted.retained,
        )  # fmt: skip
        upserted = _granted_live(granted, write.expiry, timestamp)
        result = granted
        if expired:
            available = granted.available - granted.retained
            debt = granted.debt + granted.settled_debt
    else:
        assert type(write) is VoidWrite
        voided = tracker.apply_void(write.grant_id, timestamp)
        expired = voided.expired
        first = sequence + len(expired)
        own = _void_line(write, voided, first, 0)
        if voided.removed:
            removed = (voided.grant_id,)
        result = voided
        if expired:
            available = voided.available + voided.removed
            debt = voided.debt
    if not expired:
        return result, (own,), upserted, removed
    gone = [e.grant_id for e in expired]
    available += sum(e.amount for e in expired)
    lines = _expiration_lines(expired, sequence, available, debt)
    lines.append(own)
    return result, tuple(lines), upserted, (*gone, *removed)


def _granted_live(granted: GrantResult, expiry: int, timestamp: int) -> tuple[LiveGrant, ...]:
    """The live grant a grant in order keeps, if it keeps one (what it did not settle)."""
    if not granted.retained:
        return _NO_LIVE
    return (LiveGrant(granted.grant_id, expiry, granted.retained, granted.resources, timestamp),)


def _consumed_live(
    tracker: GPUCreditTracker, consumed: ConsumeResult, resource: str | None
) -> tuple[tuple[LiveGrant, ...], tuple[int, ...]]:
    """The live grants a consumption in order changed, as (upserted, removed ids), from its
    result and the tracker after it: every grant drawn but the last is used up; the last may
    be left partly drawn, and is then the first a consumption of this class draws."""
    allocation = consumed.allocation
    if not allocation:
        return _NO_LIVE, _NO_IDS
    if consumed.remaining[-1]:
        partly = tracker.first_live_grant(resource)
        assert partly is not None
        assert partly.grant_id == allocation[-1].grant_id
        return (partly,), tuple(part.grant_id for part in allocation[:-1])
    return _NO_LIVE, tuple(part.grant_id for part in allocation)


def _expiration_lines(
    expired: tuple[Expiration, ...], sequence: int, available: int, debt: int
) -> list[Line]:
    """Expiration lines in listing order (the tracker reports them by (expiry, grant)), the
    balance chain from the totals before the write; ``sequence`` 0: drafts, numbered later."""
    lines: list[Line] = []
    for e in expired:
        available -= e.amount
        lines.append(
            ExpirationLine(
                sequence,
                e.expiry,
                e.grant_id - EXPIRATION_RANK_BASE,
                available,
                debt,
                0,
                e.grant_id,
                e.expiry,
                e.amount,
                e.resources,
            )
        )
        if sequence:
            sequence += 1
    return lines


def _grant_line(write: GrantWrite, result: GrantResult, sequence: int, revision: int) -> GrantLine:
    return GrantLine(
        sequence,
        write.timestamp,
        sequence,
        result.available,
        result.debt,
        revision,
        result.grant_id,
        write.amount,
        write.expiry,
        result.resources,
        result.settled_debt,
        result.retained,
    )


def _consumption_line(
    write: ConsumeWrite, result: ConsumeResult, sequence: int, revision: int
) -> ConsumptionLine:
    return ConsumptionLine(
        sequence,
        write.timestamp,
        sequence,
        result.available,
        result.debt,
        revision,
        write.amount,
        write.resource,
        result.consumed,
        result.debt_added,
        result.allocation,
    )


def _void_line(write: VoidWrite, result: VoidResult, sequence: int, revision: int) -> VoidLine:
    return VoidLine(
        sequence,
        write.timestamp,
        sequence,
        result.available,
        result.debt,
        revision,
        result.grant_id,
        result.removed,
    )


def _draft_group(
    pending: _Pending, result: _Result, before_available: int, before_debt: int
) -> list[Line]:
    """A replayed write's group with the identities known so far: its own line carries its
    sequence (0 for the write being accepted), expiration lines 0, revisions 0."""
    lines = _expiration_lines(result.expired, 0, before_available, before_debt)
    write = pending.write
    sequence = pending.sequence
    if type(result) is ConsumeResult:
        assert type(write) is ConsumeWrite
        lines.append(_consumption_line(write, result, sequence, 0))
    elif type(result) is GrantResult:
        assert type(write) is GrantWrite
        lines.append(_grant_line(write, result, sequence, 0))
    else:
        assert type(result) is VoidResult
        assert type(write) is VoidWrite
        lines.append(_void_line(write, result, sequence, 0))
    return lines


class _Restater:
    """The lines of a replay after a late write, built once each against the old ones:
    same identity and content keeps the old line object; a changed balance after it keeps
    its revision; a changed effect is a restatement (revision + 1); no old line is a new
    one, numbered from ``next_sequence`` in listing order. ``finish`` reports the old lines
    left over as removed (and counts them as restated)."""

    __slots__ = ("before", "next_sequence", "restated", "upserted")

    def __init__(self, old: list[Line], next_sequence: int) -> None:
        self.before = {_identity(line): line for line in old}
        self.next_sequence = next_sequence
        self.upserted: list[Line] = []
        self.restated = 0

    def group(
        self, pending: _Pending, result: _Result, available: int, debt: int
    ) -> tuple[Line, ...]:
        """The group of a replayed write (its sequence 0: the write being accepted)."""
        before = self.before
        lines: list[Line] = []
        for e in result.expired:  # (expiry, grant) order: listing order
            available -= e.amount
            prev = before.pop(-e.grant_id, None)
            assert prev is None or type(prev) is ExpirationLine
            if prev is not None and prev.amount == e.amount:
                if prev.available == available and prev.debt == debt:
                    lines.append(prev)
                    continue
                sequence, revision = prev.sequence, prev.revision
            elif prev is not None:
                sequence, revision = prev.sequence, prev.revision + 1
                self.restated += 1
            else:
                sequence, revision = self.next_sequence, 0
                self.next_sequence += 1
            line: Line = ExpirationLine(
                sequence, e.expiry, e.grant_id - EXPIRATION_RANK_BASE, available, debt, revision,
                e.grant_id, e.expiry, e.amount, e.resources,
            )  # fmt: skip
            lines.append(line)
            self.upserted.append(line)
        write = pending.write
        sequence = pending.sequence
        prev = before.pop(sequence, None) if sequence else None
        if sequence == 0:
            sequence = self.next_sequence
            self.next_sequence += 1
        if type(result) is ConsumeResult:
            assert type(write) is ConsumeWrite
            line = _consumption_line(write, result, sequence, 0)
        elif type(result) is GrantResult:
            assert type(write) is GrantWrite
            line = _grant_line(write, result, sequence, 0)
        else:
            assert type(result) is VoidResult
            assert type(write) is VoidWrite
            line = _void_line(write, result, sequence, 0)
        if prev is not None:
            if prev.effect() != line.effect():
                line = line._replace(revision=prev.revision + 1)
                self.restated += 1
            elif prev.available == line.available and prev.debt == line.debt:
                lines.append(prev)
                return tuple(lines)
            elif prev.revision:
                line = line._replace(revision=prev.revision)
        lines.append(line)
        self.upserted.append(line)
        return tuple(lines)

    def finish(self) -> tuple[tuple[Line, ...], tuple[int, ...], int]:
        """(upserted, removed, restated) once every group is built."""
        removed = tuple(sorted(line.sequence for line in self.before.values()))
        return tuple(self.upserted), removed, self.restated + len(removed)


def _identity(line: Line) -> int:
    """A line's identity across replays: a write line's sequence; an expiration line's grant
    (negative, so the two never meet). A draft's expiration line is matched by grant too."""
    if type(line) is ExpirationLine:
        return -line.grant_id
    return line.sequence


def _replace_key(line: Line) -> Line:
    """``line`` with what a restore cannot recompute (an expiration's sequence, revisions)
    zeroed, to compare a stored line with a recomputed draft."""
    if type(line) is ExpirationLine:
        return line._replace(sequence=0, revision=0)
    return line._replace(revision=0)


def _write_of(line: Line) -> tuple[int, Write]:
    """(grant id or 0, the write) a stored write line records."""
    if type(line) is GrantLine:
        return line.grant_id, GrantWrite(line.amount, line.timestamp, line.expiry, line.resources)
    if type(line) is ConsumptionLine:
        return 0, ConsumeWrite(line.amount, line.timestamp, line.resource)
    assert type(line) is VoidLine
    return 0, VoidWrite(line.grant_id, line.timestamp)


def _normalised(write: Write, result: _Result) -> Write:
    """A grant's classes as the tracker normalised them (a sorted tuple): what is kept and
    replayed, and what its line shows."""
    if type(write) is GrantWrite and write.resources is not None:
        assert type(result) is GrantResult
        if write.resources != result.resources:
            return GrantWrite(write.amount, write.timestamp, write.expiry, result.resources)
    return write


def _grants_touched(old: list[Line], groups: list[tuple[Line, ...]]) -> set[int]:
    """Grants whose live remainder a write in these lines may have changed."""
    touched: set[int] = set()
    for line in old + [line for group in groups for line in group]:
        if isinstance(line, ConsumptionLine):
            touched.update(a.grant_id for a in line.allocation)
        elif not isinstance(line, VoidLine) or line.amount:
            touched.add(line.grant_id)
    return touched


def _same_live(a: LiveGrant, b: LiveGrant | None) -> bool:
    return b is not None and a == b and a.granted_at == b.granted_at


def _consumption_order(live: LiveGrant) -> tuple[int, int, int, int]:
    width = len(live.resources) if live.resources is not None else MAX_VALUE
    return live.expiry, width, live.granted_at, live.grant_id


def _mark_index(mark: tuple[int, GPUCreditTracker]) -> int:
    return mark[0]


def _full_state(tracker: GPUCreditTracker) -> tuple[object, ...]:
    """A tracker's state with what ``LiveGrant ==`` leaves out (granted_at)."""
    state = tracker.state()
    return state, tuple(g.granted_at for g in state.live_grants)


def _check_window(window: object) -> None:
    if type(window) is not int or not 0 <= window <= MAX_VALUE:
        raise InvalidInput("window", f"must be an integer from 0 to {MAX_VALUE}, got {window!r}")


def _invalid_timestamp(timestamp: object) -> InvalidInput:
    if type(timestamp) is not int:
        return InvalidInput("timestamp", f"must be an integer, got {type(timestamp).__name__}")
    return InvalidInput("timestamp", f"must be between 0 and {MAX_VALUE}, got {timestamp}")


def _check_write(write: Write) -> None:
    """The input checks of a write, without applying it: a scratch tracker does them (only
    for writes refused anyway, so the cost does not matter)."""
    scratch = GPUCreditTracker()
    if type(write) is GrantWrite:
        scratch.apply_grant(write.amount, write.timestamp, write.expiry, resources=write.resources)
    elif type(write) is ConsumeWrite:
        scratch.apply_consume(write.amount, write.timestamp, write.resource)
    elif isinstance(write, VoidWrite) and (type(write.grant_id) is not int or write.grant_id < 1):
        raise InvalidInput("grant_id", f"must be an integer from 1, got {write.grant_id!r}")


__all__ = [
    "CHECKPOINT_SPACING_MIN",
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_PROVISIONAL",
    "EXPIRATION_RANK_BASE",
    "REPLAY_SPACING_DIVISOR",
    "REPLAY_SPACING_MIN",
    "AccountTimeline",
    "Checkpoint",
    "ConsumeWrite",
    "ConsumptionLine",
    "ExpirationLine",
    "FoldOutcome",
    "GrantLine",
    "GrantWrite",
    "Line",
    "SequencedWrite",
    "TimelineLimits",
    "TooLate",
    "VoidLine",
    "VoidWrite",
    "Write",
    "WriteLine",
    "WriteOutcome",
    "replay",
]
