"""Pure: verify one stored account against the rules, offline (``gpu-credits check``).

Storage keeps each account three times over: its ledger entries (the history), its state
(the account row and live grants: what the service loads) and, now and then, checkpoints of
its final state (what as-of reads replay from). The service trusts that the three agree;
this module checks it from scratch, without trusting any of them:

1. **The ledger's own arithmetic.** Entries come in effective order, (timestamp, rank),
   each at the rank its kind gives it, with a sequence below the account's next one and
   used once; an expiration is stamped with its grant's expiry; a grant's settled debt and
   retained credits add up to its amount, a consumption's consumed credits and added debt
   to its amount and its allocation to what it consumed; and every entry's totals after it
   are the previous entry's totals plus its own effect (the entries sum to the balance).
2. **A replay.** The writes the ledger records (grants, consumptions, voids) are applied in
   effective order to an empty tracker, each grant with the id it got: every write must
   have the effect recorded in its entry (allocation, debt settled and added, what a void
   removed), exactly the expirations recorded must happen, with the amounts and totals
   recorded, and every checkpoint must be the state the replay passes through at its
   position. The replay stops at the first write that disagrees: every later figure would
   disagree too, which says nothing more.
3. **Reconciliation.** What the replay ends with must be the stored state: the clock, the
   debt queue, the next grant id and every live grant (id, expiry, remainder, classes, grant
   time); the watermark must not be past the clock; and the service's own
   loader (``journal.loaded_account``, with its pair assertions over provisional writes)
   must accept the account, after which the tracker's full invariant check must pass.

Every problem is one line naming the account and, where there is one, the entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from app.domain import (
    MAX_VALUE,
    Allocation,
    Debt,
    Expiration,
    GPUCreditTracker,
    LedgerError,
    LiveGrant,
    TrackerState,
)
from app.service.journal import loaded_account
from app.service.limits import Limits
from app.storage.base import (
    Checkpoint,
    ConsumptionEntry,
    Entry,
    ExpirationEntry,
    GrantEntry,
    LoadedAccount,
    WriteEntry,
    rank_of,
)

# Past this many problems in one account the rest are counted, not listed: one broken
# figure early in a history makes every later one disagree.
MAX_PROBLEMS_PER_ACCOUNT: Final = 20


@dataclass(slots=True)
class AccountAudit:
    account_id: str
    entries: int = 0
    checkpoints: int = 0
    problems: list[str] = field(default_factory=list)
    unlisted: int = 0  # problems past MAX_PROBLEMS_PER_ACCOUNT

    def report(self, problem: str) -> None:
        if len(self.problems) < MAX_PROBLEMS_PER_ACCOUNT:
            self.problems.append(f"account {self.account_id!r}: {problem}")
        else:
            self.unlisted += 1

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def found(self) -> int:
        return len(self.problems) + self.unlisted


def audit_account(
    account_id: str,
    loaded: LoadedAccount,
    entries: Sequence[Entry],
    checkpoints: Sequence[Checkpoint],
    limits: Limits,
) -> AccountAudit:
    """Check one account as storage holds it: ``loaded`` (its row and live grants, with what
    replaying its provisional writes needs), every entry of its ledger in the order storage
    lists them (effective order) and its checkpoints (any order)."""
    audit = AccountAudit(account_id, len(entries), len(checkpoints))
    _check_listing(audit, loaded, entries)
    _check_sums(audit, loaded, entries)
    final_state = _replay(audit, entries, checkpoints)
    if final_state is not None:
        _reconcile(audit, loaded.tracker_state, final_state)
    _check_event_time(audit, loaded, limits)
    return audit


def _describe(entry: Entry) -> str:
    return f"entry {entry.sequence} ({entry.kind} at {entry.timestamp})"


def _check_listing(audit: AccountAudit, loaded: LoadedAccount, entries: Sequence[Entry]) -> None:
    """Order, identity and each entry's own arithmetic."""
    seen: set[int] = set()
    previous: tuple[int, int] | None = None
    expired_grants: set[int] = set()
    for entry in entries:
        where = _describe(entry)
        position = (entry.timestamp, rank_of(entry))
        if previous is not None and position <= previous:
            audit.report(f"{where} is out of effective order (timestamp, then rank)")
        previous = position
        if entry.sequence in seen:
            audit.report(f"{where}: sequence {entry.sequence} is used twice")
        seen.add(entry.sequence)
        if not 1 <= entry.sequence < loaded.next_sequence:
            audit.report(f"{where}: sequence outside 1..{loaded.next_sequence - 1}")
        if entry.available < 0 or entry.debt < 0 or max(entry.available, entry.debt) > MAX_VALUE:
            audit.report(f"{where}: totals after it out of range")
        if isinstance(entry, GrantEntry):
            if entry.settled_debt + entry.retained != entry.amount:
                audit.report(
                    f"{where}: settled_debt {entry.settled_debt} + retained {entry.retained} "
                    f"is not its amount {entry.amount}"
                )
        elif isinstance(entry, ConsumptionEntry):
            if entry.consumed + entry.debt_added != entry.amount:
                audit.report(
                    f"{where}: consumed {entry.consumed} + debt_added {entry.debt_added} "
                    f"is not its amount {entry.amount}"
                )
            drawn = sum(part.amount for part in entry.allocation)
            if drawn != entry.consumed:
                audit.report(
                    f"{where}: its allocation draws {drawn}, but it consumed {entry.consumed}"
                )
        elif isinstance(entry, ExpirationEntry):
            if entry.timestamp != entry.expiry:
                audit.report(f"{where}: an expiration is stamped with its expiry {entry.expiry}")
            if entry.grant_id in expired_grants:
                audit.report(f"{where}: grant {entry.grant_id} expires twice")
            expired_grants.add(entry.grant_id)


def _effect(entry: Entry) -> tuple[int, int]:
    """What an entry changes: (available credits, debt)."""
    if isinstance(entry, GrantEntry):
        return entry.retained, -entry.settled_debt
    if isinstance(entry, ConsumptionEntry):
        return -entry.consumed, entry.debt_added
    return -entry.amount, 0  # an expiration or a void removes credits


def _check_sums(audit: AccountAudit, loaded: LoadedAccount, entries: Sequence[Entry]) -> None:
    """Each entry's totals are the previous entry's plus its effect, and the last ones are the
    state's: the ledger sums to the balance."""
    available = debt = 0
    for entry in entries:
        credit, owed = _effect(entry)
        available += credit
        debt += owed
        if (entry.available, entry.debt) != (available, debt):
            audit.report(
                f"{_describe(entry)}: totals after it are available {entry.available}, debt "
                f"{entry.debt}, but the entries up to it sum to available {available}, debt "
                f"{debt}"
            )
            available, debt = entry.available, entry.debt  # report each break once
    state = loaded.tracker_state
    held = sum(g.remaining for g in state.live_grants)
    if (held, state.debt) != (available, debt):
        audit.report(
            f"the stored state holds available {held}, debt {state.debt}, but the ledger sums "
            f"to available {available}, debt {debt}"
        )


def _replay(
    audit: AccountAudit, entries: Sequence[Entry], checkpoints: Sequence[Checkpoint]
) -> TrackerState | None:
    """Apply the recorded writes in effective order to an empty tracker and compare what
    each does with its entries; the final state, or None when the replay had to stop."""
    tracker = GPUCreditTracker(max_live_grants=MAX_VALUE)
    expirations = {e.grant_id: e for e in entries if isinstance(e, ExpirationEntry)}
    by_position = {c.position: c for c in checkpoints}
    for entry in entries:
        if isinstance(entry, ExpirationEntry):
            continue  # matched when the replay makes it happen
        before = (tracker.available, tracker.debt)
        found = audit.found
        try:
            expired = _apply(audit, tracker, entry)
        except LedgerError as exc:
            audit.report(f"{_describe(entry)} cannot be replayed: {exc}; replay stopped")
            return None
        _match_expirations(audit, entry, expired, expirations, before)
        if (tracker.available, tracker.debt) != (entry.available, entry.debt):
            audit.report(
                f"{_describe(entry)}: the replay leaves available {tracker.available}, debt "
                f"{tracker.debt}; the entry says available {entry.available}, debt {entry.debt}"
            )
        if audit.found > found:
            # Past the first disagreement every later figure would differ too: say where
            # the history and the rules part, not everything that follows from it.
            audit.report(f"replay stopped at {_describe(entry)}: what follows depends on it")
            return None
        checkpoint = by_position.pop((entry.timestamp, entry.sequence), None)
        if checkpoint is not None:
            difference = _state_difference(checkpoint.state, tracker.state())
            if difference:
                audit.report(f"the checkpoint after {_describe(entry)}: {difference}")
    for expiration in expirations.values():
        audit.report(
            f"{_describe(expiration)} is recorded, but in the replay nothing of grant "
            f"{expiration.grant_id} is left to expire"
        )
    for position in sorted(by_position):
        audit.report(f"a checkpoint at {position} is at no write's position")
    return tracker.state()


def _apply(audit: AccountAudit, tracker: GPUCreditTracker, entry: WriteEntry) -> list[Expiration]:
    """One recorded write on the replay's tracker, compared with its entry's effect."""
    where = _describe(entry)
    if isinstance(entry, GrantEntry):
        granted = tracker.apply_grant(
            entry.amount,
            entry.timestamp,
            entry.expiry,
            resources=entry.resources,
            grant_id=entry.grant_id,
        )
        recorded = (entry.settled_debt, entry.retained, entry.resources)
        replayed = (granted.settled_debt, granted.retained, granted.resources)
        if recorded != replayed:
            audit.report(
                f"{where}: recorded settled_debt, retained, resources {recorded}; the replay "
                f"gives {replayed}"
            )
        return list(granted.expired)
    if isinstance(entry, ConsumptionEntry):
        consumed = tracker.apply_consume(entry.amount, entry.timestamp, entry.resource)
        if (entry.consumed, entry.debt_added) != (consumed.consumed, consumed.debt_added):
            audit.report(
                f"{where}: recorded consumed {entry.consumed}, debt_added {entry.debt_added}; "
                f"the replay gives consumed {consumed.consumed}, debt_added {consumed.debt_added}"
            )
        if entry.allocation != consumed.allocation:
            audit.report(
                f"{where}: recorded allocation {_parts(entry.allocation)}; the replay draws "
                f"{_parts(consumed.allocation)}"
            )
        return list(consumed.expired)
    voided = tracker.apply_void(entry.grant_id, entry.timestamp)
    if voided.removed != entry.amount:
        audit.report(
            f"{where}: recorded removing {entry.amount}; the replay removes {voided.removed}"
        )
    return list(voided.expired)


def _parts(allocation: Sequence[Allocation]) -> str:
    return "[" + ", ".join(f"grant {p.grant_id}: {p.amount}" for p in allocation) + "]"


def _match_expirations(
    audit: AccountAudit,
    write: WriteEntry,
    expired: list[Expiration],
    recorded: dict[int, ExpirationEntry],
    before: tuple[int, int],
) -> None:
    """The expirations a replayed write made happen must be recorded, with their amounts and
    the totals after each (a chain from the totals before the write, in (expiry, grant)
    order, as the ledger lists them)."""
    available, debt = before
    for e in expired:
        available -= e.amount
        entry = recorded.pop(e.grant_id, None)
        if entry is None:
            audit.report(
                f"grant {e.grant_id} expires at {e.expiry} with {e.amount} unused (reached by "
                f"{_describe(write)}), but the ledger records no expiration of it"
            )
            continue
        found = (entry.timestamp, entry.amount, entry.resources, entry.available, entry.debt)
        wanted = (e.expiry, e.amount, e.resources, available, debt)
        if found != wanted:
            audit.report(
                f"{_describe(entry)}: recorded (timestamp, amount, resources, available, debt) "
                f"{found}; the replay gives {wanted}"
            )


def _live(grants: Sequence[LiveGrant]) -> dict[int, tuple[object, ...]]:
    return {g.grant_id: (g.expiry, g.remaining, g.resources, g.granted_at) for g in grants}


def _debts(state: TrackerState) -> tuple[Debt, ...]:
    """The debt queue, with ``()`` read as what it stands for (all of it of no class)."""
    if state.debts or not state.debt:
        return tuple(state.debts)
    return (Debt(None, state.debt),)


def _queue_text(state: TrackerState) -> str:
    items = [f"{d.amount} {d.resource or '(no class)'}" for d in _debts(state)]
    return "[" + ", ".join(items) + "]"


def _state_difference(stored: TrackerState, replayed: TrackerState) -> str:
    """How a stored state differs from the replay's, in words; "" when it does not."""
    differences = []
    for name, value, replay_value in (
        ("clock", stored.clock, replayed.clock),
        ("debt", stored.debt, replayed.debt),
        ("next grant id", stored.next_grant_id, replayed.next_grant_id),
    ):
        if value != replay_value:
            differences.append(f"{name} is {value}, the replay gives {replay_value}")
    if _debts(stored) != _debts(replayed):
        differences.append(
            f"debt queue is {_queue_text(stored)}, the replay gives {_queue_text(replayed)}"
        )
    live_stored, live_replayed = _live(stored.live_grants), _live(replayed.live_grants)
    for grant_id in sorted(live_stored.keys() | live_replayed.keys()):
        mine, theirs = live_stored.get(grant_id), live_replayed.get(grant_id)
        if mine != theirs:
            differences.append(
                f"live grant {grant_id} is {_grant_text(mine)}, the replay gives "
                f"{_grant_text(theirs)}"
            )
    return "; ".join(differences)


def _grant_text(live: tuple[object, ...] | None) -> str:
    if live is None:
        return "absent"
    expiry, remaining, resources, granted_at = live
    return (
        f"(expiry {expiry}, remaining {remaining}, resources {resources}, granted at {granted_at})"
    )


def _reconcile(audit: AccountAudit, stored: TrackerState, replayed: TrackerState) -> None:
    difference = _state_difference(stored, replayed)
    if difference:
        audit.report(f"the stored state does not reconcile with the ledger: {difference}")


def _check_event_time(audit: AccountAudit, loaded: LoadedAccount, limits: Limits) -> None:
    """The watermark at or before the clock, and the service's own loader and invariants. (A
    watermark further behind than the window is not wrong: a window lowered since the
    account's last write leaves it so, and the loader folds what the lower window passes.)"""
    clock = loaded.tracker_state.clock
    if loaded.watermark > clock:
        audit.report(f"watermark {loaded.watermark} is past the clock {clock}")
        return
    try:
        account = loaded_account(audit.account_id, loaded, limits)
        account.timeline.check_invariants()
    except Exception as exc:  # LedgerError from the pair assertions, AssertionError, ...
        audit.report(f"the service would not load it: {type(exc).__name__}: {exc}")
