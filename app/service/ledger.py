"""The ledger service: every operation written once, against ``LedgerPort``.

A write holds its account in a unit of work, replays the stored answer of a retried
Idempotency-Key, applies the rule (``app.service.journal``), and commits the change with the
key. A batch does the same for all of its accounts at once. Which storage keeps the accounts
(process memory with a journal, or a shared database) is the adapter's business, not this
module's: it knows neither SQL nor HTTP.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from app.domain import LedgerError, NoLiveRoom
from app.domain.timeline import AccountTimeline
from app.observe import NULL_OBSERVER, Observer, OperationKind, outcome_of
from app.quotas import Quota
from app.service import journal
from app.service.commands import (
    MAX_BATCH_OPERATIONS,
    BalanceOp,
    ConsumeOp,
    EventOp,
    GrantOp,
    Operation,
    VoidOp,
)
from app.service.errors import (
    AccountNotFound,
    BatchReplayTooLarge,
    EventIdReused,
    ServiceError,
    ServiceUnavailable,
)
from app.service.idempotency import BATCH_SCOPE, Encoder, Idempotency
from app.service.journal import NO_LABEL, AccountState, AsOfRead, Label
from app.service.limits import Limits
from app.service.replay import (
    ATOMIC_COPY_GRANTS_PER_WRITE,
    MAX_BATCH_REPLAYED_WRITES,
    OFF_LOOP_REPLAYED_WRITES,
    ReplayCost,
    TimelineOf,
)
from app.service.results import (
    AccountOverview,
    AccountPage,
    AccountSettings,
    Answer,
    BalanceView,
    BatchOutcome,
    ConsumptionReceipt,
    Duplicate,
    EventResult,
    ForecastView,
    GrantReceipt,
    GrantView,
    LiveGrantView,
    Result,
    VoidReceipt,
)
from app.service.unit_of_work import LedgerPort, UnitOfWork
from app.storage.base import (
    MAX_GRANT_IDS_PER_READ,
    Change,
    Entry,
    EventRecord,
    GrantEntry,
    IdempotencyRecord,
    VoidEntry,
)

_R = TypeVar("_R", GrantReceipt, ConsumptionReceipt)
_E = TypeVar("_E", bound=BaseException)


def _timelines(find: Callable[[str], AccountTimeline | None], limits: Limits) -> TimelineOf:
    """``ReplayCost``'s timelines: ``find``'s, and for an account it does not know (the
    writes will create it) an empty one with the service's window."""
    fresh: list[AccountTimeline] = []

    def timeline_of(account_id: str) -> AccountTimeline:
        timeline = find(account_id)
        if timeline is not None:
            return timeline
        if not fresh:
            fresh.append(journal.new_account(account_id, limits).timeline)
        return fresh[0]

    return timeline_of


def _held_timelines(held: Mapping[str, AccountState], limits: Limits) -> TimelineOf:
    """The timelines of the accounts a unit of work holds (loaded by it, on PostgreSQL
    too)."""

    def find(account_id: str) -> AccountTimeline | None:
        account = held.get(account_id)
        return None if account is None else account.timeline

    return _timelines(find, limits)


def _expires_nothing_by(held: Mapping[str, AccountState], account_id: str, timestamp: int) -> bool:
    account = held.get(account_id)
    return account is None or account.tracker.expires_nothing_by(timestamp)


def _in_order(operations: Iterable[Operation], held: Mapping[str, AccountState]) -> bool:
    """Whether every write, and every class read, is at or after its account's clock and
    the earlier writes to it: then nothing is replayed. Nearly every batch and chunk is;
    this costs 0.1 us an operation, counting them (``ReplayCost``) 0.5."""
    latest: dict[str, int] = {}
    for op in operations:
        account_id = op.account_id
        before = latest.get(account_id)
        if before is None:
            account = held.get(account_id)  # none: the writes create it
            before = -1 if account is None else account.timeline.clock
        if isinstance(op, BalanceOp):
            timestamp = op.timestamp
            if timestamp is None:  # at the clock: nothing expires by then
                continue
            if timestamp < before:
                # A total behind the clock reads the lines (no replay); a class replays.
                if op.resource is not None:
                    return False
            elif account_id in latest or not _expires_nothing_by(held, account_id, timestamp):
                return False  # a projection that may walk expiring grants (its own too)
            continue
        if op.timestamp < before:
            return False
        latest[account_id] = op.timestamp
    return True


def _copy_size(timeline: AccountTimeline) -> int:
    """What ``AccountTimeline.copy`` copies: the live grants of the folded state and of the
    state at the clock (one tracker without a window), and the provisional writes' records
    (about as costly each as a live grant)."""
    size = timeline.final.live_grant_count + timeline.provisional_count
    if timeline.current is not timeline.final:
        size += timeline.current.live_grant_count
    return size


def _check_replay_cost(
    operations: Sequence[Operation],
    held: Mapping[str, AccountState],
    limits: Limits,
    atomic: bool,
) -> None:
    """Refuse a batch whose late writes (and reads that replay or walk expiring grants)
    would replay more than MAX_BATCH_REPLAYED_WRITES provisional writes
    (``app.service.replay``): it would hold the event loop, and every account with it, for
    seconds. Counted from the held accounts, before anything is applied. An atomic batch
    first copies each account it holds (to put it back on a failure): O(live grants) each,
    of its folded state and its state at the clock, and its provisional writes
    (``_copy_size``), about 0.9 us a live grant (30 accounts of 10,000: 0.27 s; a
    provisional write's record about 0.6 us), where a replayed write with
    its share of the work around it costs about 14 us (two late writes behind 10,000
    provisional ones on an account of 10,000 live grants, 22,500 counted: 0.31 s), so
    sixteen live grants count as one write."""
    copies = 0
    if atomic:
        copied = sum(_copy_size(account.timeline) for account in held.values())
        copies = copied // ATOMIC_COPY_GRANTS_PER_WRITE
        if copies > MAX_BATCH_REPLAYED_WRITES:
            raise BatchReplayTooLarge(MAX_BATCH_REPLAYED_WRITES)
    if _in_order(operations, held):
        return
    cost = ReplayCost(_held_timelines(held, limits))
    cost.total = copies
    for op in operations:
        if isinstance(op, BalanceOp):
            if op.timestamp is None:
                continue
            account = held.get(op.account_id)
            clock = max(
                -1 if account is None else account.timeline.clock, cost.latest(op.account_id)
            )
            if op.timestamp >= clock:
                total = cost.project(op.account_id, op.timestamp)
            elif op.resource is not None:
                total = cost.read(op.account_id, op.timestamp)
            else:
                continue
        else:
            total = cost.add(op.account_id, op.timestamp, grant=isinstance(op, GrantOp))
        if total > MAX_BATCH_REPLAYED_WRITES:
            raise BatchReplayTooLarge(MAX_BATCH_REPLAYED_WRITES)


def _within_replay(
    lines: Sequence[EventOp],
    taken: Mapping[tuple[str, str], EventRecord],
    held: Mapping[str, AccountState],
    limits: Limits,
    max_replayed: int,
) -> int:
    """How many of a chunk's first lines replay at most ``max_replayed`` provisional writes
    (at least one): lines whose id is taken apply nothing and count nothing."""
    fresh = [
        (i, line.op)
        for i, line in enumerate(lines)
        if (line.op.account_id, line.event_id) not in taken
    ]
    if _in_order((op for _, op in fresh), held):
        return len(lines)
    cost = ReplayCost(_held_timelines(held, limits))
    for index, op in fresh:
        total = cost.add(op.account_id, op.timestamp, grant=isinstance(op, GrantOp))
        if total > max_replayed and index:
            return index
    return len(lines)


def _without_traceback(exc: _E) -> _E:
    """``exc``, to be kept in a list its catcher's frame holds (a batch's results), without
    its traceback: the traceback holds that frame (every frame in it links to its caller),
    so the two would make a reference cycle, freed only by the cyclic collector, with all the
    frame holds (the batch's operations, results and changes: 8 to 14 objects, 1.4 to 2.6 KB
    per refused operation of a 10,000-op batch). A refusal is answered from its type and
    members; an error ``describe`` does not map is logged without its frames."""
    exc.__traceback__ = None
    return exc


class Replay(Answer):
    """The stored answer of a retried request: send it again, byte for byte."""

    __slots__ = ()


class Ledger:
    def __init__(
        self,
        port: LedgerPort,
        encode: Encoder,
        limits: Limits | None = None,
        wall_clock_s: Callable[[], float] = time.time,
        observer: Observer = NULL_OBSERVER,
    ) -> None:
        self._port = port
        self._encode = encode
        self._limits = limits or Limits()
        self._wall_clock_s = wall_clock_s
        self._observer = observer

    @property
    def port(self) -> LedgerPort:
        """The adapter in use (for operators' tools and tests)."""
        return self._port

    # -- lifecycle and health --------------------------------------------------------------

    async def start(self) -> None:
        await self._port.start()

    async def close(self) -> None:
        await self._port.close()

    async def ready(self) -> bool:
        return await self._port.ready()

    @property
    def failure(self) -> str | None:
        return self._port.failure

    @property
    def healthy(self) -> bool:
        return self._port.failure is None

    async def check_storage(self) -> None:
        await self._port.check_storage()

    async def schema_version(self) -> int | None:
        """The schema version the storage is at (None: memory, which has none)."""
        return await self._port.schema_version()

    async def prune_idempotency(self) -> int:
        """Forget Idempotency-Keys and usage-stream event ids older than the retention
        period."""
        cutoff_s = self._wall_clock_s() - self._limits.idempotency_ttl_s
        return await self._port.prune_idempotency(cutoff_s)

    def configure_tenants(
        self, quotas: Mapping[str, Quota], prefix_of_key: Mapping[str, str]
    ) -> None:
        self._port.configure_tenants(quotas, prefix_of_key)

    async def outstanding_debt(self) -> int:
        """The debt outstanding over every account, at each account's clock."""
        return await self._port.outstanding_debt()

    # -- writes ----------------------------------------------------------------------------

    async def grant(
        self,
        account_id: str,
        amount: int,
        timestamp: int,
        expiry: int,
        idempotency: Idempotency | None = None,
        label: Label = NO_LABEL,
        resources: list[str] | None = None,
    ) -> GrantReceipt | Replay:
        async def apply(uow: UnitOfWork, account: AccountState) -> tuple[Change, GrantReceipt]:
            live_room = uow.live_room(account_id)

            def write(target: AccountState) -> tuple[Change, GrantReceipt]:
                return journal.grant(target, amount, timestamp, expiry, live_room, label, resources)

            try:
                return await _journal_write(
                    uow,
                    account,
                    timestamp,
                    write,
                    lambda: uow.live_room(account_id),
                    _key_scope(account_id, idempotency),
                )
            except NoLiveRoom:
                raise uow.live_quota_error(account_id) from None

        return await self._write("grant", account_id, idempotency, apply)

    async def consume(
        self,
        account_id: str,
        amount: int,
        timestamp: int,
        idempotency: Idempotency | None = None,
        resource: str | None = None,
    ) -> ConsumptionReceipt | Replay:
        async def apply(
            uow: UnitOfWork, account: AccountState
        ) -> tuple[Change, ConsumptionReceipt]:
            def write(target: AccountState) -> tuple[Change, ConsumptionReceipt]:
                return journal.consume(target, amount, timestamp, resource)

            key_scope = _key_scope(account_id, idempotency)
            return await _journal_write(uow, account, timestamp, write, key_scope=key_scope)

        return await self._write("consume", account_id, idempotency, apply)

    async def consume_dry_run(
        self, account_id: str, amount: int, timestamp: int, resource: str | None = None
    ) -> ConsumptionReceipt:
        """What ``consume`` would answer now, changing nothing: the same unit of work (the
        account held, so the answer is what a write at this point would get; an unknown
        account counted against the account bounds as a new one, then forgotten), the same
        rules (``journal.consume``) on a copy of the account's timeline, and no commit. A
        refusal is the one the write would get (a late write too: its answer counts what it
        would restate). No Idempotency-Key: there is nothing to record or replay. Costs a
        copy of the account, O(live grants + provisional writes); a costly replay runs in a
        worker thread (see ``_journal_write``)."""
        self._check_serving()
        async with self._port.unit_of_work([account_id]) as uow:
            account = uow.account(account_id) or uow.create(account_id)
            trial = AccountState(account_id, account.timeline.copy(), account.window)
            if _replays_much(account, timestamp):
                _, receipt = await asyncio.to_thread(
                    journal.consume, trial, amount, timestamp, resource
                )
            else:
                _, receipt = journal.consume(trial, amount, timestamp, resource)
        return receipt

    async def _write(
        self,
        kind: OperationKind,
        account_id: str,
        idempotency: Idempotency | None,
        apply: Callable[[UnitOfWork, AccountState], Awaitable[tuple[Change, _R]]],
    ) -> _R | Replay:
        """One write: a grant or consumption on an unknown account creates it; if the
        operation is refused, the new account is forgotten, so a failed request leaves no
        trace."""
        try:
            self._check_serving()
            async with self._port.unit_of_work([account_id]) as uow:
                key: IdempotencyRecord | None = None
                replay = await _replay(uow, account_id, idempotency)
                if replay is not None:
                    self._observer.replayed(kind)
                    return replay
                account = uow.account(account_id) or uow.create(account_id)
                change, receipt = await apply(uow, account)
                if idempotency is not None:
                    key = self._key_record(account_id, idempotency, self._encode(receipt))
                await uow.commit([change], key)
        except (LedgerError, ServiceError) as exc:
            self._observer.not_done(kind, outcome_of(exc))
            raise
        self._observer.wrote(kind, receipt, change)
        return receipt

    async def void(
        self,
        account_id: str,
        grant_id: int,
        timestamp: int,
        idempotency: Idempotency | None = None,
    ) -> VoidReceipt | Replay:
        """Void a grant (SPEC section 7): its live remainder is removed at ``timestamp``; what
        it already paid or settled stays. A write like any other (clock, idempotency). An
        unknown account or grant is 404; it creates nothing."""
        try:
            self._check_serving()
            async with self._port.unit_of_work([account_id]) as uow:
                replay = await _replay(uow, account_id, idempotency)
                if replay is not None:
                    self._observer.replayed("void")
                    return replay
                account = uow.account(account_id)
                if account is None:
                    raise AccountNotFound(account_id)
                grant, voided = await _grant_record(uow, account, grant_id)
                if idempotency is not None:  # other requests ran during the read
                    uow.make_room_for_key(account_id)

                def write(target: AccountState) -> tuple[Change, VoidReceipt]:
                    return journal.void(target, grant_id, timestamp, grant, voided)

                change, receipt = await _journal_write(
                    uow, account, timestamp, write, key_scope=_key_scope(account_id, idempotency)
                )
                key = None
                if idempotency is not None:
                    key = self._key_record(account_id, idempotency, self._encode(receipt))
                await uow.commit([change], key)
        except (LedgerError, ServiceError) as exc:
            self._observer.not_done("void", outcome_of(exc))
            raise
        self._observer.wrote("void", receipt, change)
        return receipt

    async def set_lateness_window(self, account_id: str, window: int | None) -> AccountSettings:
        """Give an existing account its own lateness window, or (None) the service's again
        (SPEC section 6). Lowering it moves the watermark forward at once; raising it never
        moves the watermark back. Unknown accounts are 404 and are not created. Setting the
        window it already has changes nothing (PUT is idempotent), so it needs no key."""
        self._check_serving()
        async with self._port.unit_of_work([account_id]) as uow:
            account = uow.account(account_id)
            if account is None:
                raise AccountNotFound(account_id)
            change = journal.set_window(account, window, self._limits.lateness_window)
            await uow.commit([change], None)
            return journal.settings_of(account)

    async def settings(self, account_id: str) -> AccountSettings:
        """The account's lateness window and watermark."""
        self._check_serving()
        async with self._port.unit_of_work([account_id]) as uow:
            account = uow.account(account_id)
            if account is None:
                raise AccountNotFound(account_id)
            return journal.settings_of(account)

    async def batch(
        self, operations: Sequence[Operation], atomic: bool, idempotency: Idempotency | None
    ) -> BatchOutcome | Replay:
        """Apply ``operations`` in order; all changes are committed together.

        Not atomic: each operation succeeds or fails on its own, as it would alone. Atomic:
        on the first failure every account is put back as it was and nothing is written
        (TigerBeetle's linked events). All the accounts involved are held for the whole
        batch, so each still sees one operation at a time. ``idempotency`` is scoped to the
        API key that sent the batch (``idempotency.scope``), not to an account.
        """
        self._check_serving()
        assert 1 <= len(operations) <= MAX_BATCH_OPERATIONS
        account_ids = sorted({op.account_id for op in operations})
        async with self._port.unit_of_work(account_ids) as uow:
            scope = idempotency.scope if idempotency is not None else BATCH_SCOPE
            replay = await _replay(uow, scope, idempotency)
            if replay is not None:
                self._observer.replayed("batch")
                return replay
            held = {a: s for a in account_ids if (s := uow.account(a)) is not None}
            _check_replay_cost(operations, held, self._limits, atomic)
            baselines = await _balance_baselines(operations, held, uow.history)
            records = await _grant_records(operations, held, uow)
            if idempotency is not None:
                # Other requests ran during the reads and may have taken the room for the
                # key (found by review): checked again before anything changes.
                uow.make_room_for_key(scope)
            outcome, changes = self._apply_batch(uow, operations, atomic, held, baselines, records)
            key = None
            if idempotency is not None and changes:
                # Kept with what the batch changed. A batch that changed nothing (only reads,
                # or every operation refused) left no trace, like a failed single request:
                # a retry runs it again, and it stores nothing.
                outcome.answer = self._encode(outcome)
                key = self._key_record(scope, idempotency, outcome.answer)
            await uow.commit(changes, key)
        self._observer.batch(operations, outcome, changes)
        return outcome

    def replay_cost(self) -> ReplayCost:
        """A count of what a run of writes would replay (``app.service.replay``), from what
        this process holds of their accounts now, read without their locks: for a caller
        that decides how much to apply at once (a usage stream's chunk). An estimate."""
        return ReplayCost(_timelines(self._port.replay_timeline, self._limits))

    async def events(self, lines: Sequence[EventOp], max_replayed: int) -> list[EventResult]:
        """Apply one chunk of a usage stream, in order, with one commit: each line as a
        non-atomic batch would apply its operation, unless its account already took its id.
        A line whose id the account took for the same operation is a ``Duplicate`` (nothing
        changes); for another operation, ``EventIdReused``. An applied line's id is stored
        with its change, in the same commit, so it is taken exactly when its effect is
        durable. A refused line takes no id: sent again, it is judged again. The ids of one
        chunk are distinct per account (the caller cuts a chunk before a repeated one, so
        the repeat is judged against a committed record).

        The caller cuts its chunks by an estimate of what their late lines replay
        (``replay_cost``, read without a lock: on PostgreSQL from this process's cache,
        empty after a restart or an eviction). Counted again here from the accounts held,
        only the first lines within ``max_replayed`` are applied (at least one): the
        results are those lines', and the caller sends the others again."""
        self._check_serving()
        assert 1 <= len(lines) <= MAX_BATCH_OPERATIONS
        keys = [(line.op.account_id, line.event_id) for line in lines]
        assert len(set(keys)) == len(keys), "one chunk takes an id once per account"
        account_ids = sorted({account_id for account_id, _ in keys})
        async with self._port.unit_of_work(account_ids) as uow:
            taken = await uow.event_records(keys)
            held = {a: s for a in account_ids if (s := uow.account(a)) is not None}
            cut = _within_replay(lines, taken, held, self._limits, max_replayed)
            lines, keys = lines[:cut], keys[:cut]
            answers: list[EventResult | None] = [None] * len(lines)
            fresh: list[int] = []
            for index, line in enumerate(lines):
                record = taken.get(keys[index])
                if record is not None:
                    if record.fingerprint == line.fingerprint:
                        answers[index] = Duplicate(
                            record.account_id, record.sequence, record.grant_id
                        )
                    else:
                        answers[index] = EventIdReused(
                            record.account_id, record.event_id, record.sequence
                        )
                    continue
                fresh.append(index)
            changes: list[Change] = []
            applied: tuple[Sequence[Operation], BatchOutcome] | None = None
            if fresh:
                operations = [lines[i].op for i in fresh]
                records = await _grant_records(operations, held, uow)
                outcome, changes = self._apply_batch(
                    uow, operations, False, held, {}, records, event_ids=True
                )
                now_s = self._wall_clock_s()
                made = iter(changes)
                for index, result in zip(fresh, outcome.results, strict=True):
                    line = lines[index]
                    if isinstance(result, GrantReceipt | ConsumptionReceipt | VoidReceipt):
                        grant_id = (
                            None if isinstance(result, ConsumptionReceipt) else result.grant_id
                        )
                        next(made).event = EventRecord(
                            line.op.account_id,
                            line.event_id,
                            line.fingerprint,
                            result.sequence,
                            grant_id,
                            now_s,
                        )
                        answers[index] = result
                    else:
                        assert isinstance(result, Exception), "a stream has no reads"
                        answers[index] = result
                applied = (operations, outcome)
            await uow.commit(changes, None)
        if applied is not None:
            self._observer.events(*applied, changes)
        assert all(a is not None for a in answers)
        return [a for a in answers if a is not None]

    def _apply_batch(
        self,
        uow: UnitOfWork,
        operations: Sequence[Operation],
        atomic: bool,
        accounts: dict[str, AccountState],
        baselines: dict[BaselineKey, BalanceView],
        records: dict[tuple[str, int], GrantRecord],
        event_ids: bool = False,
    ) -> tuple[BatchOutcome, list[Change]]:
        """Apply in order, without awaiting anything. ``accounts`` holds the existing
        accounts and gains those the batch creates, in operation order, exactly as single
        requests would. ``baselines`` answers balance reads at a time before the batch's own
        entries (see ``_balance_baselines``). ``event_ids`` (a stream's chunk): each
        operation first takes room for the id it will store, and a refused one gives it back
        at once, so it holds no place the operations after it need."""
        saved: dict[str, tuple[AccountTimeline, int | None]] = {}
        results: list[Result | Exception] = []
        changes: list[Change] = []
        # Each account's entries made by this batch so far, in time order: an as-of read
        # inside the batch may fall among them, and a void may name a grant made in it. Kept
        # only when the batch holds one of those (else a list per account for nothing).
        batch_entries: dict[str, list[Entry]] = {}
        keep_entries = any(isinstance(op, BalanceOp | VoidOp) for op in operations)
        # Each account's watermark before the batch, and the accounts it wrote late to (their
        # entries above are then not in time order): for balance reads, so only with them.
        watermarks = {a: s.timeline.watermark for a, s in accounts.items()} if keep_entries else {}
        late: set[str] = set()
        for index, op in enumerate(operations):
            account_id = op.account_id
            room_taken = False
            created: AccountState | None = None
            try:
                if event_ids:
                    uow.take_event_room(account_id)
                    room_taken = True
                account = accounts.get(account_id)
                if account is None:
                    if isinstance(op, BalanceOp | VoidOp):
                        # Before making it, as the single endpoints answer: 404, even with
                        # the account bounds full (found by an adversarial test: 409).
                        raise AccountNotFound(account_id)
                    account = accounts[account_id] = created = uow.create(account_id)
                if atomic and account_id not in saved:
                    saved[account_id] = (account.timeline.copy(), account.window)
                receipt: GrantReceipt | ConsumptionReceipt | VoidReceipt
                # Only a batch with reads asks which accounts it wrote late to (below).
                clock_before = account.tracker.clock if keep_entries else 0
                if isinstance(op, GrantOp):  # grants and consumptions first: most of a batch
                    unlabelled = op.name is None and op.metadata is None
                    label = NO_LABEL if unlabelled else Label(op.name, op.metadata)
                    change, receipt = self._grant(
                        uow, account, op.amount, op.timestamp, op.expiry, label, op.resources
                    )
                elif isinstance(op, ConsumeOp):
                    change, receipt = self._consume(
                        uow, account, op.amount, op.timestamp, op.resource
                    )
                elif isinstance(op, VoidOp):
                    if not account.exists:
                        raise AccountNotFound(account_id)
                    grant, voided = _record_in_batch(op, batch_entries.get(account_id, ()), records)
                    change, receipt = self._void(
                        uow, account, op.grant_id, op.timestamp, grant, voided
                    )
                else:
                    if not account.exists:
                        raise AccountNotFound(account_id)
                    timeline = account.timeline
                    view = journal.read_balance(
                        account_id, timeline.current, timeline.watermark, op.timestamp, op.resource
                    )
                    if isinstance(view, AsOfRead):
                        view = journal.as_of_in_batch(
                            view,
                            account,
                            batch_entries.get(account_id, ()),
                            baselines.get((account_id, view.timestamp, view.resource)),
                            watermarks.get(account_id, 0),
                            account_id in late,
                        )
                    results.append(view)
                    continue
                changes.append(change)
                if keep_entries:
                    batch_entries.setdefault(account_id, []).extend(change.entries)
                    if op.timestamp < clock_before:
                        late.add(account_id)  # accepted behind the clock: entries out of order
                results.append(receipt)
            except (LedgerError, ServiceError) as exc:
                if room_taken:
                    uow.give_back_event_room(account_id)
                if created is not None and not created.exists and not atomic:
                    # Refused on the account it would have made (a live-grant quota, say):
                    # forgotten now, as a single request's account is when it ends, so the
                    # operations after it find its place in the account bounds free (found
                    # by an adversarial test: a later new account was refused).
                    del accounts[account_id]
                    uow.forget_new(account_id)
                if atomic:
                    for saved_id, (timeline, window) in saved.items():
                        current = accounts[saved_id]
                        undone = (
                            timeline.current.live_grant_count - current.tracker.live_grant_count
                        )
                        uow.count_live(saved_id, undone)
                        current.timeline = timeline
                        current.window = window
                    refusal = _without_traceback(exc)
                    return BatchOutcome(operations, [refusal], failed_index=index), []
                results.append(_without_traceback(exc))
        return BatchOutcome(operations, results, failed_index=None), changes

    # -- the operations, shared by single requests and batches -------------------------------

    @staticmethod
    def _grant(
        uow: UnitOfWork,
        account: AccountState,
        amount: int,
        timestamp: int,
        expiry: int,
        label: Label,
        resources: list[str] | None,
    ) -> tuple[Change, GrantReceipt]:
        account_id = account.account_id
        timeline = account.timeline  # its current tracker may be another after the write
        live_before = timeline.current.live_grant_count
        try:
            change, receipt = journal.grant(
                account, amount, timestamp, expiry, uow.live_room(account_id), label, resources
            )
        except NoLiveRoom:
            raise uow.live_quota_error(account_id) from None
        live_added = timeline.current.live_grant_count - live_before
        if live_added:
            uow.count_live(account_id, live_added)
        return change, receipt

    @staticmethod
    def _void(
        uow: UnitOfWork,
        account: AccountState,
        grant_id: int,
        timestamp: int,
        grant: GrantEntry | None,
        voided: VoidEntry | None,
    ) -> tuple[Change, VoidReceipt]:
        live_before = account.tracker.live_grant_count
        change, receipt = journal.void(account, grant_id, timestamp, grant, voided)
        if account.tracker.live_grant_count != live_before:
            uow.count_live(account.account_id, account.tracker.live_grant_count - live_before)
        return change, receipt

    @staticmethod
    def _consume(
        uow: UnitOfWork,
        account: AccountState,
        amount: int,
        timestamp: int,
        resource: str | None,
    ) -> tuple[Change, ConsumptionReceipt]:
        timeline = account.timeline  # its current tracker may be another after the write
        live_before = timeline.current.live_grant_count
        change, receipt = journal.consume(account, amount, timestamp, resource)
        live_added = timeline.current.live_grant_count - live_before
        if live_added:
            uow.count_live(account.account_id, live_added)
        return change, receipt

    def _key_record(
        self, scope: str, idempotency: Idempotency, answer: Answer
    ) -> IdempotencyRecord:
        return IdempotencyRecord(
            scope=scope,
            key=idempotency.key,
            fingerprint=idempotency.fingerprint,
            status_code=answer.status_code,
            body=answer.body,
            created_at_s=self._wall_clock_s(),
        )

    def _check_serving(self) -> None:
        failure = self._port.failure
        if failure is not None:
            raise ServiceUnavailable(failure)

    # -- reads: safe, they change nothing ---------------------------------------------------

    async def balance(
        self, account_id: str, timestamp: int | None, resource: str | None = None
    ) -> BalanceView:
        """At or after the account's clock, the projected state (credits expiring by then no
        longer count); before it, the as-of state from the stored history; None: the state
        at the clock. Unknown accounts are 404 and are not created."""
        try:
            self._check_serving()
            view = await self._port.balance(account_id, timestamp, resource)
        except (LedgerError, ServiceError) as exc:
            self._observer.not_done("balance", outcome_of(exc))
            raise
        self._observer.read("balance")
        return view

    async def live_grants(
        self, account_id: str, resource: str | None = None
    ) -> tuple[BalanceView, list[LiveGrantView]]:
        """Live grants at the account's clock, in the order they will be used: all of them,
        or those a consumption of class ``resource`` could draw."""
        self._check_serving()
        view, live = await self._port.live_grants(account_id, resource)
        # Labels live with the grant entries, not in memory (a grant's metadata may be 11 KB):
        # read them for the grants listed, a bounded number of ids per read.
        ids = [g.grant_id for g in live]
        for start in range(0, len(ids), MAX_GRANT_IDS_PER_READ):
            chunk = ids[start : start + MAX_GRANT_IDS_PER_READ]
            journal.labelled(live, await self._port.grant_entries(account_id, chunk))
        return view, live

    async def forecast(
        self, account_id: str, burn_rate: int, resource: str | None = None
    ) -> ForecastView:
        """A burn of ``burn_rate`` credits of class ``resource`` (None: of no class) per
        timestamp unit from the account's clock: when the credits it can draw run out and
        what expires unused, grant by grant (``app.domain.forecast``). Changes nothing;
        unknown accounts are 404."""
        self._check_serving()
        view, live = await self._port.live_grants(account_id, resource)
        return journal.forecast_of(view, live, burn_rate)

    async def grant_view(self, account_id: str, grant_id: int) -> GrantView:
        self._check_serving()
        return await self._port.grant_view(account_id, grant_id)

    async def entries(
        self, account_id: str, after_sequence: int, limit: int
    ) -> tuple[list[Entry], int]:
        """Up to ``limit`` entries in effective order after the entry ``after_sequence`` (0:
        from the first), and the account's watermark."""
        self._check_serving()
        return await self._port.entries(account_id, after_sequence, limit)

    async def overview(
        self, account_id: str, grants_limit: int, entries_limit: int
    ) -> AccountOverview:
        """What a page about one account shows, in work bounded by the two limits: the state
        at the clock, the first ``grants_limit`` live grants (the upcoming expirations, with
        their labels) and the last ``entries_limit`` ledger entries. Three reads, each whole
        on its own: a write that lands between them shows in the later ones only."""
        assert 1 <= grants_limit <= MAX_GRANT_IDS_PER_READ
        assert entries_limit >= 1
        self._check_serving()
        view, live = await self._port.live_grants(account_id, None)
        shown = live[:grants_limit]
        if shown:
            ids = [g.grant_id for g in shown]
            journal.labelled(shown, await self._port.grant_entries(account_id, ids))
        entries, _ = await self._port.latest_entries(account_id, entries_limit + 1)
        older = len(entries) > entries_limit
        return AccountOverview(view, shown, len(live), entries[1:] if older else entries, older)

    async def accounts(self, prefix: str, after: str, limit: int) -> AccountPage:
        """Existing accounts whose id starts with ``prefix`` ("": all), after the cursor
        ``after`` ("": from the first), at most ``limit``, in byte order of the id, each at
        its clock. Whose accounts a caller may see is the caller's business (the API narrows
        ``prefix`` to the key's)."""
        self._check_serving()
        assert limit >= 1
        found = await self._port.accounts(prefix, after, limit + 1)  # one more: is there more?
        page = found[:limit]
        return AccountPage(page, page[-1].account_id if len(found) > limit else None)


BaselineKey = tuple[str, int, str | None]  # (account, time, class) of a balance read


async def _balance_baselines(
    operations: Sequence[Operation],
    accounts: Mapping[str, AccountState],
    history: Callable[[AsOfRead], Awaitable[BalanceView]],
) -> dict[BaselineKey, BalanceView]:
    """Before a batch changes anything: each balance read at a time before its account's
    clock, as the account stood before the batch (nothing for an account the batch would
    create). Inside the batch, a read the batch's own writes cannot have touched answers from
    here (see ``journal.as_of_in_batch``), so every I/O a batch needs is done before its first
    change and a failed read changes nothing."""
    baselines: dict[BaselineKey, BalanceView] = {}
    for op in operations:
        if not isinstance(op, BalanceOp) or op.timestamp is None:
            continue
        where = (op.account_id, op.timestamp, op.resource)
        if where in baselines:
            continue
        account = accounts.get(op.account_id)
        read = AsOfRead(op.account_id, op.timestamp, op.resource, 0)
        if account is None:  # made by the batch: nothing before it
            baselines[where] = journal.as_of_view(read, 0, 0)
            continue
        timeline = account.timeline
        if op.timestamp < timeline.clock:
            read.watermark = timeline.watermark
            baselines[where] = await history(read)
        else:
            baselines[where] = journal.projection(
                op.account_id, timeline.current, timeline.watermark, op.timestamp, op.resource
            )
    return baselines


GrantRecord = tuple[GrantEntry | None, VoidEntry | None]  # a grant's entry, and its void's


_W = TypeVar("_W", GrantReceipt, ConsumptionReceipt, VoidReceipt)


def _key_scope(account_id: str, idempotency: Idempotency | None) -> str | None:
    """The scope of a single write's new Idempotency-Key (None: it has none)."""
    return None if idempotency is None else account_id


def _replays_much(account: AccountState, timestamp: int) -> bool:
    """Whether a write at ``timestamp`` would replay more than OFF_LOOP_REPLAYED_WRITES."""
    cost = account.timeline.replay_cost(timestamp)
    return cost is not None and cost > OFF_LOOP_REPLAYED_WRITES


async def _journal_write(
    uow: UnitOfWork,
    account: AccountState,
    timestamp: int,
    write: Callable[[AccountState], tuple[Change, _W]],
    live_room: Callable[[], int | None] | None = None,
    key_scope: str | None = None,
) -> tuple[Change, _W]:
    """``write`` (a journal write) applied to ``account``, and the live grants it added or
    removed counted. A write that replays much (``_replays_much``) is applied to a copy of
    the account in a worker thread, and the copy then takes the account's place; refused,
    it leaves the account as it was, as ``write`` does. The copy is made here, on the loop:
    the account is held (no other write changes it), and reads go on reading the original
    meanwhile, the state before this write, as they would before its commit. ``write`` and
    the journal touch only the account they are given.

    ``live_room``: the room for more live grants outside the account (service, tenants),
    which ``write`` was given as it stood before; other accounts' writes may have taken
    some while the thread ran, so it is asked again before the copy is taken, and a write
    that grew past it is refused (``NoLiveRoom``) as it would have been in place.

    ``key_scope``: the scope of the write's new Idempotency-Key, if it has one. The room for
    it was checked before (``_replay``), and other requests may have taken it while the
    thread ran: checked again before the copy is taken, as it would be in place now (found
    by review: the key was held past the bound)."""
    timeline = account.timeline  # its current tracker may be another after the write
    live_before = timeline.current.live_grant_count
    if _replays_much(account, timestamp):
        trial = AccountState(account.account_id, timeline.copy(), account.window)
        change, receipt = await asyncio.to_thread(write, trial)
        if key_scope is not None:
            uow.make_room_for_key(key_scope)
        grown = trial.timeline.current.live_grant_count - live_before
        room = None if live_room is None else live_room()
        if room is not None and grown > room:
            raise NoLiveRoom()
        account.timeline = trial.timeline
    else:
        change, receipt = write(account)
    live_added = account.timeline.current.live_grant_count - live_before
    if live_added:
        uow.count_live(account.account_id, live_added)
    return change, receipt


async def _replay(uow: UnitOfWork, scope: str, idempotency: Idempotency | None) -> Replay | None:
    """The stored answer to a retry; None the first time, once the key is sure to fit."""
    if idempotency is None:
        return None
    stored = await uow.stored_answer(scope, idempotency)
    if stored is not None:
        return Replay(stored.status_code, stored.body)
    uow.make_room_for_key(scope)
    return None


async def _grant_record(uow: UnitOfWork, account: AccountState, grant_id: int) -> GrantRecord:
    if not 1 <= grant_id < account.tracker.next_grant_id:
        return None, None  # never granted: nothing to read
    return await uow.grant_record(account.account_id, grant_id)


async def _grant_records(
    operations: Sequence[Operation], accounts: Mapping[str, AccountState], uow: UnitOfWork
) -> dict[tuple[str, int], GrantRecord]:
    """Before a batch changes anything: the stored records of the grants its voids name (as
    ``_balance_baselines``, so every I/O is done before the first change)."""
    records: dict[tuple[str, int], GrantRecord] = {}
    for op in operations:
        if not isinstance(op, VoidOp) or (op.account_id, op.grant_id) in records:
            continue
        account = accounts.get(op.account_id)
        if account is not None:
            records[(op.account_id, op.grant_id)] = await _grant_record(uow, account, op.grant_id)
    return records


def _record_in_batch(
    op: VoidOp, made: Sequence[Entry], records: Mapping[tuple[str, int], GrantRecord]
) -> GrantRecord:
    """A void's grant record as the batch so far left it: entries the batch made for the
    grant (its grant, an earlier void) come after what storage holds."""
    grant, voided = records.get((op.account_id, op.grant_id), (None, None))
    for entry in made:
        if isinstance(entry, GrantEntry) and entry.grant_id == op.grant_id:
            grant = entry
        elif isinstance(entry, VoidEntry) and entry.grant_id == op.grant_id:
            voided = entry
    return grant, voided
