"""Every bound on what the service holds, with its default: defined here once (settings
read their defaults from here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from app.quotas import Quota

DEFAULT_TENANT_QUOTA: Final = Quota(
    max_accounts=100_000, max_live_grants=1_000_000, max_idempotency_keys=100_000
)


@dataclass(slots=True)
class Limits:
    """Bounds on what the ledger holds; each refusal is a clear problem document."""

    max_accounts: int = 1_000_000
    max_live_grants_per_account: int = 10_000
    # All accounts together: about 190 bytes each in memory (README, Quotas), so the default
    # bounds live grants at about 2 GiB however the accounts share them.
    max_live_grants: int = 10_000_000
    max_idempotency_keys: int = 1_000_000
    idempotency_ttl_s: float = 24 * 3600.0
    # What a tenant (an API key's account prefix) may hold unless its keys say otherwise.
    tenant_quota: Quota = field(default_factory=lambda: DEFAULT_TENANT_QUOTA)
    # SPEC section 6: how far behind its clock an account accepts writes, in timestamp units,
    # unless it has a window of its own; and at most this many provisional writes each.
    lateness_window: int = 0
    max_provisional_writes: int = 10_000

    def __post_init__(self) -> None:
        assert self.max_accounts >= 1
        assert self.max_live_grants_per_account >= 1
        assert self.max_live_grants >= 1
        assert self.max_idempotency_keys >= 1
        assert self.idempotency_ttl_s > 0
        assert 0 <= self.lateness_window <= 2**53 - 1
        assert self.max_provisional_writes >= 1
