"""A batch's Idempotency-Key is counted against the tenant of the API key that sent it
(README, Quotas). Two ways that count went wrong (found by an adversarial test), both
fixed in ``app.quotas.Tenants``, which now keeps every key id's prefix and counts a key's
batch keys against its prefix's tenant and every enclosing one:

- after the sending API key was revoked (the service re-reads the key file within 2 s and
  reconfigures its tenants), the key's batch records were still counted against the tenant,
  and when the retention sweep forgot them nothing was given back: the tenant kept a
  phantom key place until a restart, which a fresh service on the same data did not have;
- a sub-team key's batch key was not counted against the parent tenant, although README says
  "nested prefixes each count, so a sub-team also uses its parent's quota" (a single
  write's key on a sub-team account is counted against both).
"""

from __future__ import annotations

import pytest

from app.quotas import Tenants
from app.service.commands import GrantOp
from app.service.errors import QuotaExceeded
from app.service.idempotency import batch_scope
from app.service.ledger import Ledger
from app.service.limits import Limits
from tests.support.clock import ManualClock
from tests.test_quotas import embedded_ledger, key, quota

T = "team-a:"


async def test_a_revoked_keys_batch_key_leaves_no_phantom_place() -> None:
    clock = ManualClock()
    service: Ledger = embedded_ledger(Limits(idempotency_ttl_s=60.0), clock)
    await service.start()
    try:
        # Two API keys on one tenant, which may hold one Idempotency-Key.
        service.configure_tenants({T: quota(keys=1)}, {"k1": T, "k2": T})
        first = key("b1")
        first.scope = batch_scope("k1")
        await service.batch([GrantOp("team-a:x", 1, 0, 10)], False, first)
        # k1 is revoked: the tenant stays (k2 is still in force).
        service.configure_tenants({T: quota(keys=1)}, {"k2": T})
        # The retention sweep forgets k1's batch key.
        clock.now_s += 120
        assert await service.prune_idempotency() == 1
        # The tenant holds no key now: k2's first keyed batch must be accepted (it was
        # refused quota-exceeded, while a restarted service on the same data accepts it).
        second = key("b2")
        second.scope = batch_scope("k2")
        await service.batch([GrantOp("team-a:x", 1, 1, 10)], False, second)
        # The counter agrees with a count from scratch (as a restart makes it).
        port = service.port
        held = port._tenants._by_prefix[T].usage.idempotency_keys  # type: ignore[attr-defined]
        kept = port._tenants  # type: ignore[attr-defined]
        port._tenants = Tenants()  # type: ignore[attr-defined]
        service.configure_tenants({T: quota(keys=1)}, {"k2": T})
        fresh = port._tenants._by_prefix[T].usage.idempotency_keys  # type: ignore[attr-defined]
        port._tenants = kept  # type: ignore[attr-defined]
        assert held == fresh == 1
    finally:
        await service.close()


async def test_a_sub_team_keys_batch_key_counts_against_the_parent() -> None:
    service = embedded_ledger(Limits())
    await service.start()
    try:
        parent, child = "team-a:", "team-a:ml:"
        service.configure_tenants(
            {parent: quota(keys=1), child: quota(keys=5)}, {"kp": parent, "kc": child}
        )
        # A single write's key on a sub-team account counts against both tenants ...
        await service.grant("team-a:ml:1", 1, 0, 10, key("s1"))
        with pytest.raises(QuotaExceeded) as refused:
            await service.grant("team-a:ml:1", 1, 0, 10, key("s2"))
        assert refused.value.tenant == parent
        # ... a batch key sent by the sub-team's API key should too: the parent is full.
        keyed = key("b1")
        keyed.scope = batch_scope("kc")
        with pytest.raises(QuotaExceeded):
            await service.batch([GrantOp("team-a:ml:1", 1, 1, 10)], False, keyed)
    finally:
        await service.close()
