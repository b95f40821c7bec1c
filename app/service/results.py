"""What the service answers: receipts of writes, views of an account, a batch's outcome.

Plain slotted dataclasses, not frozen ones: several are made per operation on the hot path
and a frozen dataclass's ``__init__`` costs about twice as much. Nothing mutates them after
construction. The API layer serialises them straight to JSON (``app.api.render``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.domain import Allocation
from app.service.commands import Operation
from app.storage.base import Entry


@dataclass(slots=True)
class GrantReceipt:
    account_id: str
    grant_id: int
    sequence: int
    timestamp: int
    amount: int
    expiry: int
    balance: int
    available: int
    debt: int
    settled_debt: int
    retained: int
    name: str | None = None
    metadata: dict[str, str] | None = None
    resources: list[str] | None = None  # sorted; None: unrestricted
    # SPEC section 6: the account's watermark after the write, and how many later entries
    # the write restated (a late write; 0 otherwise).
    watermark: int = 0
    restated: int = 0


@dataclass(slots=True)
class ConsumptionReceipt:
    account_id: str
    sequence: int
    timestamp: int
    amount: int
    balance: int
    available: int
    debt: int
    consumed: int
    debt_added: int
    # In the order drawn: the tracker's own records (grant id, expiry, amount, the grant's
    # classes), shown as they are; no copy per operation.
    allocation: tuple[Allocation, ...]
    resource: str | None = None  # the class it ran on
    watermark: int = 0
    restated: int = 0


@dataclass(slots=True)
class VoidReceipt:
    account_id: str
    grant_id: int
    sequence: int
    timestamp: int
    amount: int  # the live remainder removed; 0 if it was used up or expired
    balance: int
    available: int
    debt: int
    watermark: int = 0
    restated: int = 0


@dataclass(slots=True)
class BalanceView:
    account_id: str
    timestamp: int
    balance: int
    available: int
    debt: int
    resource: str | None = None  # the class read; None: totals over everything
    # SPEC section 6: the account's watermark, and whether this state can still change (a
    # read at a time before the watermark is final; later ones may be restated).
    watermark: int = 0
    final: bool = False


@dataclass(slots=True)
class AccountSettings:
    """An account's lateness window (SPEC section 6) and where its clock and watermark are."""

    account_id: str
    lateness_window: int  # in force
    inherited: bool  # True: the service's setting; False: the account's own
    clock: int
    watermark: int


@dataclass(slots=True)
class AccountPage:
    """A page of the account list: each account at its clock, in byte order of the id."""

    accounts: list[BalanceView]
    next_after: str | None  # the cursor of the next page; None when this is the last


@dataclass(slots=True)
class LiveGrantView:
    """What is left of one grant that can still be consumed."""

    grant_id: int
    expiry: int
    remaining: int
    name: str | None = None
    metadata: dict[str, str] | None = None
    resources: list[str] | None = None


@dataclass(slots=True)
class GrantView:
    account_id: str
    grant_id: int
    sequence: int
    timestamp: int
    amount: int
    expiry: int
    settled_debt: int
    retained: int
    remaining: int  # 0 once consumed, expired, or swallowed by debt
    name: str | None = None
    metadata: dict[str, str] | None = None
    resources: list[str] | None = None


@dataclass(slots=True)
class GrantForecastView:
    """One grant under a forecast burn (``app.domain.forecast``)."""

    grant_id: int
    expiry: int  # when what is left of it expires
    remaining: int  # at the clock
    consumed: int  # what the burn draws from it
    expiring_unused: int  # what is left of it at its expiry
    used_up_at: int | None  # the burn step drawing its last credit; None if some expires
    resources: list[str] | None = None


@dataclass(slots=True)
class ForecastView:
    """A constant burn from the account's clock: when the credits it can draw run out, and
    what expires unused, grant by grant. Nothing is changed or recorded."""

    account_id: str
    timestamp: int  # the clock: the first step of the burn
    burn_rate: int
    resource: str | None
    available: int  # what the burn can draw at the clock
    debt: int  # outstanding debt (of ``resource``, or in total), which the burn does not touch
    run_out_at: int  # the first step not covered in full
    consumed: int
    expiring_unused: int
    grants: list[GrantForecastView]


@dataclass(slots=True)
class AccountOverview:
    """An account at a glance, in bounded work: the state at its clock, the live grants that
    expire first (in the order they will be used), and the end of its ledger."""

    balance: BalanceView  # at the clock, with the watermark
    live_grants: list[LiveGrantView]  # the first ones, labelled
    live_grant_count: int  # all of them
    entries: list[Entry]  # the last ones, in effective order (the newest last)
    older_entries: bool  # whether the ledger holds entries before ``entries``


Result = GrantReceipt | ConsumptionReceipt | VoidReceipt | BalanceView


@dataclass(slots=True)
class Duplicate:
    """A usage-stream line whose id the account had already applied: nothing changed; where
    the first one's effect is (its ledger entry, and the grant it made or voided)."""

    account_id: str
    sequence: int
    grant_id: int | None


EventResult = GrantReceipt | ConsumptionReceipt | VoidReceipt | Duplicate | Exception


@dataclass(slots=True)
class BatchOutcome:
    """One result per operation, in order: a receipt or view, or the error it raised. For an
    atomic batch that failed: just the error, at ``failed_index``, and nothing applied."""

    operations: Sequence[Operation]
    results: list[Result | Exception]
    failed_index: int | None
    # The answer as the API layer encoded it for an Idempotency-Key, when it was: sent as
    # is rather than encoded again.
    answer: Answer | None = None


@dataclass(slots=True)
class Answer:
    """A write's answer as the API layer encoded it (see ``app.service.idempotency``): kept
    with an Idempotency-Key and sent again, byte for byte, to a retry. The service stores it
    and never looks inside."""

    status_code: int
    body: bytes
