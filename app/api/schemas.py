"""Request and response models: the HTTP contract of SPEC section 3, as pydantic sees it.

Integers are strict (``true``, ``1.0`` and ``"5"`` are not integers) and bounded to
[0, 2^53-1], so every figure is exact in a JavaScript client. Unknown members are rejected.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import Path, Query
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    ValidationInfo,
    field_validator,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic_core import PydanticCustomError

from app.domain import MAX_CLASS_NAME_LENGTH, MAX_RESOURCES, MAX_VALUE
from app.service.commands import MAX_BATCH_OPERATIONS

ACCOUNT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
ACCOUNT_ID_MAX_CHARS = 128
# What an account id may start with: empty, or the start of a valid id (same characters).
ACCOUNT_PREFIX_PATTERN = r"^([A-Za-z0-9][A-Za-z0-9._:-]{0,127})?$"
LEDGER_PAGE_MAX = 1000
ACCOUNT_PAGE_MAX = 1000

AccountId = Annotated[
    str,
    Path(
        min_length=1,
        max_length=ACCOUNT_ID_MAX_CHARS,
        pattern=ACCOUNT_ID_PATTERN,
        description="1 to 128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or digit.",
        examples=["team-a:job-scheduler"],
    ),
]

Amount = Annotated[
    StrictInt, Field(ge=1, le=MAX_VALUE, description="Credits, 1 to 2^53-1.", examples=[100])
]
Timestamp = Annotated[
    StrictInt,
    Field(
        ge=0, le=MAX_VALUE, description="Caller's time, 0 to 2^53-1; never decreases per account."
    ),
]
Figure = Annotated[int, Field(ge=0, le=MAX_VALUE)]
SignedFigure = Annotated[int, Field(ge=-MAX_VALUE, le=MAX_VALUE)]

_DIGITS = re.compile(r"(0|[1-9][0-9]{0,15})")


def _strict_query_int(value: object) -> object:
    """Query strings are text: accept plain decimal digits only (no sign, spaces, '1.0',
    '1_000' or leading zeros, all of which pydantic's lax int parsing would let through)."""
    if isinstance(value, str) and not _DIGITS.fullmatch(value):
        raise PydanticCustomError("int_parsing", "Input should be a plain decimal integer")
    return value


QueryInt = BeforeValidator(_strict_query_int)


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Expiry = Annotated[
    StrictInt,
    Field(
        ge=1,
        le=MAX_VALUE,
        description="First time at which the credits are no longer usable (exclusive end).",
    ),
]


def _expiry_after_timestamp(expiry: int, info: ValidationInfo) -> int:
    timestamp = info.data.get("timestamp")
    if isinstance(timestamp, int) and expiry <= timestamp:
        raise PydanticCustomError(
            "expiry_not_after_timestamp",
            "expiry must be greater than timestamp ({timestamp})",
            {"timestamp": timestamp},
        )
    return expiry


# -- GPU classes (SPEC section 5) ------------------------------------------------------------

CLASS_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$"
ClassName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_CLASS_NAME_LENGTH, pattern=CLASS_NAME_PATTERN),
    Field(
        description=(
            "A GPU class: 1 to 32 characters of A-Z a-z 0-9 . _ -, starting with a letter or "
            "digit; case-sensitive."
        ),
        examples=["h100"],
    ),
]


def _distinct(resources: list[str]) -> list[str]:
    if len(set(resources)) != len(resources):
        raise PydanticCustomError("duplicate_class", "classes must be distinct")
    return resources


Resources = Annotated[
    list[ClassName],
    Field(
        min_length=1,
        max_length=MAX_RESOURCES,
        description=(
            "The GPU classes the credits pay for: 1 to 16 distinct names. Omitted or null: "
            "unrestricted (any class, and consumptions that name none). Answers list them "
            "sorted."
        ),
        examples=[["h100", "a100-80gb"]],
    ),
    AfterValidator(_distinct),
]
ResourceQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_CLASS_NAME_LENGTH,
        pattern=CLASS_NAME_PATTERN,
        description=(
            "Answer for one GPU class: `available` is what a consumption of it could draw, "
            "`debt` its own outstanding debt. Before the account's latest timestamp it is "
            "replayed from the nearest checkpoint; 422 when the stored history cannot answer "
            "it in bounded work (before the account's first checkpoint, or more writes back "
            "than a replay may take)."
        ),
    ),
]


# -- grant labels (SPEC section 7) -----------------------------------------------------------

GRANT_NAME_MAX_CHARS = 200
METADATA_MAX_KEYS = 20
METADATA_KEY_MAX_CHARS = 40
METADATA_VALUE_MAX_CHARS = 500
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _storable(value: str) -> str:
    """Text every backend stores as given: no NUL (PostgreSQL text and jsonb refuse it) and
    no lone surrogate (not UTF-8, so not storable anywhere)."""
    if "\x00" in value:
        raise PydanticCustomError("nul_character", "must not contain the NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError(
            "invalid_unicode", "must be valid Unicode (no lone surrogates)"
        ) from None
    return value


def _one_line(value: str) -> str:
    """A name or key: storable, and no control characters at all."""
    if _CONTROL.search(value):
        raise PydanticCustomError("control_character", "must not contain control characters")
    return _storable(value)


GrantName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=GRANT_NAME_MAX_CHARS),
    AfterValidator(_one_line),
    Field(
        description="A label for the grant, 1 to 200 characters, no control characters.",
        examples=["Q3 research allocation"],
    ),
]
MetadataKey = Annotated[
    str,
    StringConstraints(min_length=1, max_length=METADATA_KEY_MAX_CHARS),
    AfterValidator(_one_line),
]
MetadataValue = Annotated[
    str, StringConstraints(max_length=METADATA_VALUE_MAX_CHARS), AfterValidator(_storable)
]
GrantMetadata = Annotated[
    dict[MetadataKey, MetadataValue],
    Field(
        max_length=METADATA_MAX_KEYS,
        description=(
            "Up to 20 string keys of 1 to 40 characters (no control characters), each with a "
            "string value of up to 500 characters (no NUL). Kept as given."
        ),
        examples=[{"invoice": "INV-2026-0042", "team": "research"}],
    ),
]


class GrantRequest(_Request):
    amount: Amount
    timestamp: Timestamp
    expiry: Expiry
    resources: Resources | None = None
    name: GrantName | None = None
    metadata: GrantMetadata | None = None

    _check_expiry = field_validator("expiry")(_expiry_after_timestamp)


ConsumedOn = Annotated[
    ClassName | None,
    Field(
        description=(
            "The GPU class the usage ran on: grants that list it or are unrestricted pay. "
            "Omitted or null: no class; only unrestricted grants pay."
        )
    ),
]


class ConsumeRequest(_Request):
    amount: Amount
    timestamp: Timestamp
    resource: ConsumedOn = None


class VoidRequest(_Request):
    timestamp: Timestamp = Field(
        description=(
            "When the void takes effect: not before the grant's own timestamp (422), and a "
            "write like any other for the account's clock."
        )
    )


# -- batches ------------------------------------------------------------------------------

BATCH_MAX_OPERATIONS = MAX_BATCH_OPERATIONS  # defined by the service
BatchAccountId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=ACCOUNT_ID_MAX_CHARS, pattern=ACCOUNT_ID_PATTERN),
]


# The batch's operations (and the stream's lines) are pydantic dataclasses, not models:
# validated the same way and described the same way in the OpenAPI document, but made
# without a model's per-instance dict and set of fields set, which a 10,000-operation batch
# pays for 10,000 times (1.38 -> 0.84 us an operation to validate a 1,000-op batch).
_operation = pydantic_dataclass(
    config=ConfigDict(extra="forbid"), frozen=True, slots=True, kw_only=True
)


@_operation
class GrantOperation:
    op: Literal["grant"]
    account_id: BatchAccountId
    amount: Amount
    timestamp: Timestamp
    expiry: Expiry
    resources: Resources | None = None
    name: GrantName | None = None
    metadata: GrantMetadata | None = None

    _check_expiry = field_validator("expiry")(_expiry_after_timestamp)


@_operation
class ConsumeOperation:
    op: Literal["consume"]
    account_id: BatchAccountId
    amount: Amount
    timestamp: Timestamp
    resource: ConsumedOn = None


@_operation
class VoidOperation:
    op: Literal["void"]
    account_id: BatchAccountId
    # Constraints in Annotated, not as a default: a dataclass field given Field() as its
    # default is listed first in the JSON schema, which would reorder the published document.
    grant_id: Annotated[int, Field(ge=1, le=MAX_VALUE, strict=True)]
    timestamp: Timestamp


@_operation
class BalanceOperation:
    op: Literal["balance"]
    account_id: BatchAccountId
    timestamp: Annotated[
        Timestamp | None, Field(description="As the `timestamp` query parameter of getBalance.")
    ] = None
    resource: Annotated[
        ClassName | None, Field(description="As the `resource` query parameter of getBalance.")
    ] = None


BatchOperation = Annotated[
    GrantOperation | ConsumeOperation | VoidOperation | BalanceOperation,
    Field(discriminator="op"),
]


class BatchRequest(_Request):
    atomic: StrictBool = Field(
        False,
        description=(
            "true: all or nothing; on the first failure nothing is applied and the answer is "
            "a problem naming the operation. false: each operation succeeds or fails alone."
        ),
    )
    operations: list[BatchOperation] = Field(
        min_length=1,
        max_length=BATCH_MAX_OPERATIONS,
        description="Applied in the order given, 1 to 10,000.",
    )


# -- usage streams (POST /v1/events) --------------------------------------------------------

EVENT_ID_PATTERN = r"^[\x21-\x7e][\x20-\x7e]{0,127}$"
EventId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128, pattern=EVENT_ID_PATTERN),
    Field(
        description=(
            "The client's id for this line: 1 to 128 printable ASCII characters, not starting "
            "with a space; unique per account. A line whose id the account already applied "
            "answers `duplicate` and changes nothing."
        ),
        examples=["job-7781/interval-42"],
    ),
]


@_operation
class GrantEvent(GrantOperation):
    id: EventId


@_operation
class ConsumeEvent(ConsumeOperation):
    id: EventId


@_operation
class VoidEvent(VoidOperation):
    id: EventId


EventLine = Annotated[GrantEvent | ConsumeEvent | VoidEvent, Field(discriminator="op")]


class EventDuplicate(BaseModel):
    """A duplicate line: nothing changed. The first line's effect is ledger entry
    `sequence` of `account_id` (its current state: a late write may have restated it)."""

    account_id: str
    sequence: int = Field(ge=1)
    grant_id: int | None = Field(
        None, description="The grant the first line made (grant) or voided (void)."
    )


class EventResultLine(BaseModel):
    """One line of the answer to POST /v1/events, per request line that is not blank, in
    order, written once the line's chunk is committed."""

    line: int = Field(ge=1, description="The request line it answers, 1-based (blank lines too).")
    id: str | None = Field(description="The line's `id`; null when the line has none to read.")
    status: int = Field(
        description=(
            "The status the single endpoint would have answered (201 grant, 200 consume or "
            "void, 200 duplicate), or the line's error status."
        )
    )
    duplicate: bool | None = Field(
        None, description="Present and true when the account had already applied this id."
    )
    body: GrantResponse | ConsumeResponse | VoidResponse | EventDuplicate | Problem = Field(
        description=(
            "What the single endpoint would have answered; for a duplicate, where the first "
            "line's effect is; for an error, a problem document."
        )
    )


class _Response(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class _Totals(_Response):
    account_id: str
    timestamp: Figure = Field(
        description=(
            "The time the figures are for: the time a balance read asked for, otherwise the "
            "account's clock (the latest timestamp of its accepted writes)."
        )
    )
    balance: SignedFigure = Field(description="available - debt; negative means debt.")
    available: Figure = Field(description="Active (unexpired, unconsumed) credits.")
    debt: Figure = Field(description="Outstanding debt.")
    resource: str | None = Field(
        None, description="The GPU class read (`?resource=`); null: totals over every class."
    )
    watermark: Figure = Field(
        description=(
            "The account's watermark (SPEC section 6): writes must have a timestamp at or after "
            "it; entries before it are final. With a lateness window of 0, the clock."
        )
    )


class BalanceResponse(_Totals):
    final: bool = Field(
        description=(
            "True when the figures can no longer change: a time before the watermark. Later "
            "times may still be restated by late writes."
        )
    )


_RESTATED = (
    "How many later ledger entries this write changed the effect of (a late write, SPEC "
    "section 6; 0 for a write in timestamp order)."
)


class GrantResponse(_Totals):
    grant_id: int = Field(ge=1, description="Stable id of this grant within the account.")
    sequence: int = Field(ge=1, description="Position of this grant in the account's ledger.")
    amount: Figure
    expiry: Figure
    settled_debt: Figure = Field(description="How much of the grant paid off debt.")
    retained: Figure = Field(description="How much was kept as a live grant with the expiry.")
    resources: list[str] | None = Field(
        description="The grant's GPU classes, sorted; null: unrestricted."
    )
    name: str | None = Field(description="The grant's name, if it was given one.")
    metadata: dict[str, str] | None = Field(description="The grant's metadata, if any.")
    restated: int = Field(ge=0, description=_RESTATED)


class AllocationItem(_Response):
    grant_id: int = Field(ge=1)
    expiry: Figure
    amount: Figure = Field(description="Credits taken from this grant.")
    resources: list[str] | None = Field(
        description="The grant's GPU classes, sorted; null: unrestricted."
    )


class ConsumeResponse(_Totals):
    sequence: int = Field(ge=1, description="Position of this consumption in the ledger.")
    amount: Figure
    consumed: Figure = Field(description="How much active credits covered.")
    debt_added: Figure = Field(description="How much became new debt.")
    allocation: list[AllocationItem] = Field(
        description="Grants drawn from, in the order they were drawn (earliest expiry first)."
    )
    resource: str | None = Field(description="The GPU class it ran on; null: none.")
    restated: int = Field(ge=0, description=_RESTATED)
    dry_run: bool = Field(
        False,
        description=(
            "Present, and true, only in the answer to `?dry_run=true`: what this consumption "
            "would do if it were sent now (its `sequence` the one it would get), and nothing "
            "was recorded. Absent from a real consumption's answer."
        ),
    )


class VoidResponse(_Totals):
    grant_id: int = Field(ge=1)
    sequence: int = Field(ge=1, description="Position of this void in the ledger.")
    amount: Figure = Field(
        description="The grant's live remainder removed (0 if it was used up or expired)."
    )
    restated: int = Field(ge=0, description=_RESTATED)


class LiveGrantItem(_Response):
    grant_id: int = Field(ge=1)
    expiry: Figure
    remaining: Figure
    resources: list[str] | None = Field(
        description="The grant's GPU classes, sorted; null: unrestricted."
    )
    name: str | None = Field(description="The grant's name, if it was given one.")
    metadata: dict[str, str] | None = Field(description="The grant's metadata, if any.")


class LiveGrantsResponse(BalanceResponse):
    grants: list[LiveGrantItem] = Field(description="Live grants in the order they will be used.")


class GrantDetailResponse(_Response):
    account_id: str
    grant_id: int = Field(ge=1)
    sequence: int = Field(ge=1)
    timestamp: Figure
    amount: Figure
    expiry: Figure
    settled_debt: Figure
    retained: Figure
    remaining: Figure = Field(description="Still usable now; 0 once used up or expired.")
    resources: list[str] | None = Field(
        description="The grant's GPU classes, sorted; null: unrestricted."
    )
    name: str | None = Field(description="The grant's name, if it was given one.")
    metadata: dict[str, str] | None = Field(description="The grant's metadata, if any.")


class ForecastGrant(_Response):
    grant_id: int = Field(ge=1)
    expiry: Figure = Field(description="When what is left of it expires (unusable from then).")
    remaining: Figure = Field(description="Its credits left at the account's clock.")
    consumed: Figure = Field(description="What the burn draws from it.")
    expiring_unused: Figure = Field(
        description="What is left of it at `expiry`, expiring unused (`remaining - consumed`)."
    )
    used_up_at: Figure | None = Field(
        description="The burn step that draws its last credit; null when some of it expires."
    )
    resources: list[str] | None = Field(
        description="The grant's GPU classes, sorted; null: unrestricted."
    )


class ForecastResponse(_Response):
    model_config = ConfigDict(
        from_attributes=True,
        json_schema_extra={
            "examples": [
                {
                    "account_id": "team-a:job-1",
                    "timestamp": 0,
                    "burn_rate": 10,
                    "resource": None,
                    "available": 130,
                    "debt": 0,
                    "run_out_at": 8,
                    "consumed": 80,
                    "expiring_unused": 50,
                    "grants": [
                        {
                            "grant_id": 1,
                            "expiry": 5,
                            "remaining": 100,
                            "consumed": 50,
                            "expiring_unused": 50,
                            "used_up_at": None,
                            "resources": None,
                        },
                        {
                            "grant_id": 2,
                            "expiry": 20,
                            "remaining": 30,
                            "consumed": 30,
                            "expiring_unused": 0,
                            "used_up_at": 7,
                            "resources": None,
                        },
                    ],
                }
            ]
        },
    )

    account_id: str
    timestamp: Figure = Field(description="The account's clock: the burn's first step.")
    burn_rate: int = Field(ge=1, le=MAX_VALUE, description="Credits consumed per timestamp unit.")
    resource: str | None = Field(
        description="The GPU class burnt (`?resource=`); null: no class (unrestricted grants pay)."
    )
    available: Figure = Field(
        description=(
            "The live credits the burn can draw at the clock: unrestricted ones, and with "
            "`resource` those listing it (the sum of `grants[].remaining`)."
        )
    )
    debt: Figure = Field(
        description=(
            "Outstanding debt now, of `resource` or in total, as getBalance answers it. The burn "
            "does not settle it (only grants do), and adds to it from `run_out_at` on."
        )
    )
    run_out_at: Figure = Field(
        description=(
            "The first step the live credits cannot cover in full: from then on the burn "
            "becomes debt. Every earlier step is covered, so `consumed = burn_rate * "
            "(run_out_at - timestamp)` plus what the step at `run_out_at` drew (less than "
            "`burn_rate`). The clock itself when there is nothing to draw."
        )
    )
    consumed: Figure = Field(description="What the burn draws before it runs out.")
    expiring_unused: Figure = Field(
        description="What expires unused (`available - consumed`): the sum over `grants`."
    )
    grants: list[ForecastGrant] = Field(
        description="The grants the burn can draw, in the order it draws them."
    )


class _EntryBase(BaseModel):
    sequence: int = Field(
        ge=1,
        description=(
            "The entry's identity, given in the order entries were made (a late write's "
            "entry gets the next one although it is listed earlier)."
        ),
    )
    timestamp: Figure = Field(description="When it took effect (an expiration: the expiry).")
    balance: SignedFigure = Field(description="Balance right after this entry, in effective order.")
    available: Figure
    debt: Figure
    revision: int = Field(
        ge=0, description="How many times a late write restated this entry's effect."
    )
    final: bool = Field(
        description="Before the account's watermark: this entry will never change again."
    )


class GrantEntry(_EntryBase):
    kind: Literal["grant"]
    grant_id: int = Field(ge=1)
    amount: Figure
    expiry: Figure
    settled_debt: Figure
    retained: Figure
    resources: list[str] | None = Field(
        description="The grant's GPU classes, sorted; null: unrestricted."
    )
    name: str | None = Field(description="The grant's name, if it was given one.")
    metadata: dict[str, str] | None = Field(description="The grant's metadata, if any.")


class ConsumptionEntry(_EntryBase):
    kind: Literal["consumption"]
    amount: Figure
    consumed: Figure
    debt_added: Figure
    allocation: list[AllocationItem]
    resource: str | None = Field(description="The GPU class it ran on; null: none.")


class ExpirationEntry(_EntryBase):
    kind: Literal["expiration"]
    grant_id: int = Field(ge=1)
    expiry: Figure
    amount: Figure = Field(description="Credits that expired unused.")
    resources: list[str] | None = Field(
        description="The grant's GPU classes, sorted; null: unrestricted."
    )


class VoidEntry(_EntryBase):
    kind: Literal["void"]
    grant_id: int = Field(ge=1)
    amount: Figure = Field(
        description="The grant's live remainder removed (0 if it was used up or expired)."
    )


LedgerEntry = Annotated[
    GrantEntry | ConsumptionEntry | ExpirationEntry | VoidEntry, Field(discriminator="kind")
]


class LedgerPage(BaseModel):
    account_id: str
    entries: list[LedgerEntry]
    next_after: int | None = Field(
        description="Pass as `after` to get the next page; null when this is the last page."
    )


class AccountSettingsRequest(_Request):
    lateness_window: Annotated[StrictInt, Field(ge=0, le=MAX_VALUE)] | None = Field(
        description=(
            "How far behind its clock the account accepts writes, in timestamp units; null: "
            "the service's setting (GPU_CREDITS_LATENESS_WINDOW). Lowering it makes writes "
            "final at once (the watermark moves forward); raising it never moves the watermark "
            "back."
        )
    )


class AccountSettingsResponse(_Response):
    account_id: str
    lateness_window: Figure = Field(description="The window in force.")
    inherited: bool = Field(description="True: the service's setting; false: the account's own.")
    clock: Figure
    watermark: Figure


class AccountPage(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "accounts": [
                        {
                            "account_id": "team-a:job-1",
                            "timestamp": 120,
                            "balance": 40,
                            "available": 40,
                            "debt": 0,
                        },
                        {
                            "account_id": "team-a:job-2",
                            "timestamp": 95,
                            "balance": -5,
                            "available": 0,
                            "debt": 5,
                        },
                    ],
                    "next_after": "team-a:job-2",
                }
            ]
        }
    )

    accounts: list[BalanceResponse] = Field(
        description=(
            "In byte order of `account_id`, each at its clock: what getBalance answers "
            "without `timestamp` (`timestamp` is the account's latest accepted write)."
        )
    )
    next_after: str | None = Field(
        description="Pass as `after` to get the next page; null when this is the last page."
    )


class BatchResult(BaseModel):
    op: Literal["grant", "consume", "void", "balance"]
    status: int = Field(description="The status the single endpoint would have answered.")
    body: GrantResponse | ConsumeResponse | VoidResponse | BalanceResponse | Problem = Field(
        description="The body the single endpoint would have answered."
    )


class BatchResponse(BaseModel):
    succeeded: int = Field(ge=0)
    failed: int = Field(ge=0)
    results: list[BatchResult] = Field(description="One per operation, in order.")


class Health(BaseModel):
    status: Literal["ok"]


class VersionInfo(BaseModel):
    version: str = Field(description="The gpu-credits release (the installed package).")
    storage: Literal["sqlite", "memory", "postgres"] = Field(description="The backend in use.")
    schema_version: int | None = Field(
        description=(
            "The storage's schema version when this process started, after applying its "
            "migrations; null for memory, which has no schema."
        )
    )


class ValidationIssue(BaseModel):
    loc: list[str | int] = Field(description="Where the problem is, e.g. ['body', 'amount'].")
    message: str
    type: str


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="URI reference identifying the problem type.")
    title: str
    status: int
    detail: str
    instance: str | None = None
    request_id: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description=(
            "The request's id: the `X-Request-ID` it was sent with (1 to 128 visible ASCII "
            "characters) or one the service made, as in the answer's `X-Request-ID` header "
            "and the request's log line. On every problem document answered to a request; "
            "absent only on the few the HTTP layer writes before a request is complete "
            "(400 malformed HTTP, 408 headers too slow, 414, 431, 429, 503 at the "
            "connection limit), and inside batch results."
        ),
    )
    errors: list[ValidationIssue] | None = Field(
        None,
        description=(
            "For validation problems: each offending field, in the order found; at most the "
            "first 100 (then `errors_total` says how many there were)."
        ),
    )
    errors_total: int | None = Field(
        None,
        description=(
            "For validation problems with more than 100 offending fields: how many; "
            "`errors` lists the first 100."
        ),
    )
    account_timestamp: int | None = Field(
        None, description="For a timestamp regression: the account's latest timestamp."
    )
    watermark: int | None = Field(
        None,
        description=(
            "For a timestamp regression: the account's watermark; a write must have a "
            "timestamp at or after it (SPEC section 6)."
        ),
    )
    limit: int | None = Field(None, description="For a limit reached: the limit.")
    voided_at: int | None = Field(
        None, description="For a grant already voided: when it was voided."
    )
    quota: str | None = Field(
        None,
        description=(
            "For a quota reached: which one (`accounts`, `live grants`, `idempotency keys`)."
        ),
    )
    tenant: str | None = Field(
        None,
        description=(
            "For a quota reached: the account-id prefix whose quota it is (absent: the "
            "service's own bound)."
        ),
    )
    sequence: int | None = Field(
        None,
        description="For an event id already applied to another line: the entry it made.",
    )
    operation_index: int | None = Field(
        None, description="For an aborted atomic batch: the 0-based index of the failed operation."
    )
    operation_problem: dict[str, Any] | None = Field(
        None, description="For an aborted atomic batch: the failed operation's problem document."
    )
