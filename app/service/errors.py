"""The errors the service raises (the core raises ``app.domain.LedgerError``). Each is mapped
to an HTTP problem document in one place, ``app.api.problems``; nothing here knows HTTP."""

from __future__ import annotations

from app.quotas import Resource


class ServiceError(Exception):
    """Base of the errors the service raises (the domain raises ``LedgerError``)."""


class AccountNotFound(ServiceError):
    def __init__(self, account_id: str) -> None:
        super().__init__(f"account {account_id!r} has no grants or consumptions yet")
        self.account_id = account_id


class GrantNotFound(ServiceError):
    def __init__(self, account_id: str, grant_id: int) -> None:
        super().__init__(f"account {account_id!r} has no grant {grant_id}")


class CursorGone(ServiceError):
    """A ledger cursor naming an entry a late write undid (an expiration that no longer
    happens, SPEC section 6): there is no place to continue from."""

    def __init__(self, account_id: str, sequence: int) -> None:
        super().__init__(
            f"entry {sequence} of account {account_id!r} was undone by a late write (an "
            "expiration that no longer happens): page again from an earlier cursor or from "
            "the start"
        )


class GrantAlreadyVoided(ServiceError):
    def __init__(self, account_id: str, grant_id: int, voided_at: int) -> None:
        super().__init__(
            f"grant {grant_id} of account {account_id!r} was already voided at {voided_at}"
        )
        self.voided_at = voided_at


class ClassAsOfUnsupported(ServiceError):
    """A balance read of one class at a time before the account's clock that its stored
    history cannot answer in bounded work: the time lies before the account's first
    checkpoint (history written by a release before late events, more writes back than a
    replay may take), or inside a batch whose own late writes made it final. Totals (no
    ``resource``) are always answered."""

    def __init__(self, resource: str | None, timestamp: int, why: str) -> None:
        what = "a balance" if resource is None else f"a balance of class {resource!r}"
        super().__init__(f"{what} at {timestamp} cannot be answered here: {why}")


class BatchReplayTooLarge(ServiceError):
    """A batch whose late writes (and class reads behind the clock) would replay more
    provisional writes than one request may (``app.service.replay``): nothing of it was
    applied."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the batch's late writes would replay more than {limit} provisional writes "
            "(writes within the lateness window, restated behind each late one; class "
            "balance reads behind the clock replay some too), more than one request may "
            "hold the service for; nothing was applied. Send them in smaller batches, in "
            "time order, or as a usage stream (POST /v1/events), which cuts them into "
            "chunks by this cost"
        )
        self.limit = limit


class IdempotencyKeyReused(ServiceError):
    def __init__(self, key: str) -> None:
        super().__init__(
            f"Idempotency-Key {key!r} was already used with a different operation or body "
            "(a key is scoped to its account; on a batch, to the API key that sent it)"
        )


class EventIdReused(ServiceError):
    """A usage-stream line whose id the account already took for a different line."""

    def __init__(self, account_id: str, event_id: str, sequence: int) -> None:
        super().__init__(
            f"event id {event_id!r} was already applied on account {account_id!r} to a "
            f"different operation (ledger entry {sequence}); nothing was changed"
        )
        self.sequence = sequence


class AccountLimit(ServiceError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the ledger already holds {limit} accounts, the most it may hold "
            "(GPU_CREDITS_MAX_ACCOUNTS)"
        )


class IdempotencyKeysFull(ServiceError):
    def __init__(self, limit: int) -> None:
        super().__init__(
            f"{limit} Idempotency-Keys are held within the retention period, the most the "
            "service keeps (GPU_CREDITS_MAX_IDEMPOTENCY_KEYS); retry later or without a key"
        )


class QuotaExceeded(ServiceError):
    """A tenant's quota (``tenant`` is its account-id prefix), or with ``tenant`` None the
    service's own bound on live grants, would be passed."""

    def __init__(self, tenant: str | None, quota: Resource, limit: int) -> None:
        if tenant is None:
            message = (
                f"the service already holds {limit} {quota}, the most it may hold "
                "(GPU_CREDITS_MAX_LIVE_GRANTS); consume or let some expire first"
            )
        else:
            message = (
                f"the accounts starting with {tenant!r} already hold {limit} {quota}, their quota"
            )
        super().__init__(message)
        self.tenant = tenant
        self.quota = quota
        self.limit = limit


class ServiceUnavailable(ServiceError):
    """The service cannot serve the request now; retry later. The shared ledger raises it
    only when nothing was committed."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)


class OutcomeUnknown(ServiceError):
    """The database connection was lost while the change was being committed: it may or may
    not have been applied. Not a ``ServiceUnavailable``, which on the shared ledger means
    nothing was committed: a client retrying this one without its Idempotency-Key could apply
    the change twice."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"the outcome of this request is unknown ({reason}): it may or may not have been "
            "applied. Retry with the same Idempotency-Key to get its answer; without a key, "
            "read the ledger before retrying"
        )
