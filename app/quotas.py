"""Tenant quotas: one tenant's usage cannot starve the others (SPEC is silent; see README,
"Quotas").

A tenant is an account-id prefix that some API key is restricted to (``team-a:``).
Everything held for the accounts whose id starts with it counts against the tenant: accounts,
live grants and Idempotency-Keys (a batch's key counts against the tenant of the API key
that sent it). Nested prefixes each count, so a sub-team's usage also counts against its
parent's quota. Keys without a prefix (operators) are bound by the global limits only.

Counts are of what the service holds, because that is what the quotas protect: a grant that
expired is released when its account's clock next moves past it (expiry is lazy), a key when
the retention sweep drops it.

Pure bookkeeping: no I/O, no HTTP, no clock. The service asks which tenants an account or a
key scope belongs to, checks their room before it commits to holding more, and reports what
it added or released.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

Resource = Literal["accounts", "live grants", "idempotency keys"]


@dataclass(frozen=True, slots=True)
class Quota:
    max_accounts: int
    max_live_grants: int
    max_idempotency_keys: int

    def __post_init__(self) -> None:
        assert self.max_accounts >= 1
        assert self.max_live_grants >= 1
        assert self.max_idempotency_keys >= 1


@dataclass(slots=True)
class Usage:
    accounts: int = 0
    live_grants: int = 0
    idempotency_keys: int = 0


@dataclass(slots=True)
class Tenant:
    prefix: str
    quota: Quota
    usage: Usage

    def room(self, resource: Resource) -> int:
        """How many more of ``resource`` the tenant may hold (negative once a lowered quota
        leaves it over)."""
        if resource == "accounts":
            return self.quota.max_accounts - self.usage.accounts
        if resource == "live grants":
            return self.quota.max_live_grants - self.usage.live_grants
        return self.quota.max_idempotency_keys - self.usage.idempotency_keys


_NONE: Final[tuple[Tenant, ...]] = ()


class Tenants:
    """The tenants in force and what each holds. ``configure`` replaces the set when the API
    keys change; usage of a prefix already known carries over, a new prefix is counted once
    from what the service holds (``count``)."""

    def __init__(self) -> None:
        self._by_prefix: dict[str, Tenant] = {}
        # The distinct prefix lengths: finding an account's tenants is one dict lookup per
        # length, not a scan of every prefix.
        self._lengths: tuple[int, ...] = ()
        self._prefix_of_key: dict[str, str] = {}  # API key id -> its tenant prefix

    def __len__(self) -> int:
        return len(self._by_prefix)

    def configure(
        self,
        quotas: Mapping[str, Quota],
        prefix_of_key: Mapping[str, str],
        count: Callable[[str], Usage],
    ) -> None:
        assert "" not in quotas, "an unrestricted key is no tenant"
        # First, since ``count`` reads it. A key id's prefix never changes, and one revoked
        # stays known: the batch Idempotency-Keys it sent are held until their retention
        # ends and are then given back to its tenants (found by an adversarial test: they
        # were given back to none, a place taken for good). One entry per key id this
        # process has seen in the key file.
        self._prefix_of_key = {**self._prefix_of_key, **prefix_of_key}
        tenants: dict[str, Tenant] = {}
        for prefix, quota in quotas.items():
            known = self._by_prefix.get(prefix)
            usage = known.usage if known is not None else count(prefix)
            tenants[prefix] = Tenant(prefix, quota, usage)
        self._by_prefix = tenants
        self._lengths = tuple(sorted({len(p) for p in tenants}))

    def of_account(self, account_id: str) -> tuple[Tenant, ...]:
        if not self._lengths:
            return _NONE
        by_prefix = self._by_prefix
        found = [
            by_prefix[account_id[:n]]
            for n in self._lengths
            if n <= len(account_id) and account_id[:n] in by_prefix
        ]
        return tuple(found) if found else _NONE

    def prefix_of_api_key(self, key_id: str) -> str | None:
        return self._prefix_of_key.get(key_id)

    def of_api_key(self, key_id: str) -> tuple[Tenant, ...]:
        """The tenants a key restricted to a prefix counts against: its prefix's and every
        enclosing one's, as for an account under that prefix (nested prefixes each count)."""
        prefix = self._prefix_of_key.get(key_id)
        return _NONE if prefix is None else self.of_account(prefix)

    @staticmethod
    def tightest(tenants: tuple[Tenant, ...], resource: Resource) -> Tenant | None:
        """The tenant with the least room for ``resource``, if any."""
        return min(tenants, key=lambda t: t.room(resource), default=None)

    @staticmethod
    def add(tenants: tuple[Tenant, ...], resource: Resource, delta: int) -> None:
        for tenant in tenants:
            usage = tenant.usage
            if resource == "accounts":
                usage.accounts += delta
                assert usage.accounts >= 0
            elif resource == "live grants":
                usage.live_grants += delta
                assert usage.live_grants >= 0
            else:
                usage.idempotency_keys += delta
                assert usage.idempotency_keys >= 0
