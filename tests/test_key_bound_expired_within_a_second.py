"""README, Idempotency: "a new key at the bound on keys first forgets up to 2,000 expired
ones". The adapter once looked for expired keys at most once a second
(``EmbeddedPort._make_room_for_id``): a new key refused at the bound because nothing had
expired yet made every new key in the next second be refused too, although the keys held
had expired meanwhile and a restarted service (which loads only keys within the retention
period) accepted it (found by an adversarial test). It now looks every time, at the
oldest key only (``app.storage.by_age``)."""

from __future__ import annotations

import pytest

from app.service.errors import IdempotencyKeysFull
from app.service.limits import Limits
from tests.support.clock import ManualClock
from tests.test_quotas import embedded_ledger, key


async def test_a_key_expired_since_the_last_look_is_forgotten() -> None:
    clock = ManualClock()
    service = embedded_ledger(Limits(max_idempotency_keys=1, idempotency_ttl_s=60.0), clock)
    await service.start()
    try:
        await service.grant("a", 5, 0, 100, key("k1"))  # held until 1060
        clock.now_s = 1_059.5
        with pytest.raises(IdempotencyKeysFull):  # right: k1 is within its retention
            await service.grant("a", 5, 1, 100, key("k2"))
        clock.now_s = 1_060.2  # k1 has expired
        # The only key held is past its retention: forgotten first, k2 takes its place.
        await service.grant("a", 5, 2, 100, key("k2"))
    finally:
        await service.close()
