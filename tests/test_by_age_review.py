"""Review of the sweeps that forget Idempotency-Keys oldest first (``app.storage.by_age``).

Memory forgets keys in the order they were made, up to the first that has not expired; the
SQLite sweep deletes every expired row. After a wall clock stepped back, a key made later
but dated earlier is expired while the key before it is not: the file loses its body while
memory still holds the key, and a retry with it must not be refused until that other key
expires."""

from __future__ import annotations

import hashlib
from pathlib import Path

from app.adapters.embedded import EmbeddedPort
from app.api.render import encode_answer
from app.service.idempotency import Idempotency
from app.service.ledger import Ledger
from app.service.limits import Limits
from app.storage.by_age import ByAge
from app.storage.sqlite import SqliteStore

TTL_S = 60.0


def key(name: str) -> Idempotency:
    return Idempotency(name, hashlib.sha256(name.encode()).hexdigest())


async def test_a_key_dated_before_an_older_one_is_not_refused_after_the_sweep(
    tmp_path: Path,
) -> None:
    now_s = [1_000.0]
    limits = Limits(idempotency_ttl_s=TTL_S)
    port = EmbeddedPort(SqliteStore(tmp_path / "ledger.sqlite"), limits, lambda: now_s[0])
    ledger = Ledger(port, encode_answer, limits, lambda: now_s[0])
    await ledger.start()
    try:
        await ledger.grant("a", 1, 0, 10**6, key("first"))
        now_s[0] = 999.0  # the wall clock steps back a second
        await ledger.grant("a", 1, 1, 10**6, key("second"))
        now_s[0] = 999.0 + TTL_S + 0.5  # "second" expired, "first" not
        await ledger.prune_idempotency()
        # Expired: a retry may get the stored answer or run again, but not a refusal that
        # lasts until "first" expires too (ServiceUnavailable: "expired meanwhile; retry").
        await ledger.grant("a", 1, 1, 10**6, key("second"))
        assert port._ids_held() == 2  # "first" and the new "second"
    finally:
        await ledger.close()


def test_a_record_discarded_out_of_turn_is_passed_over() -> None:
    records: ByAge[str, tuple[str, int]] = ByAge(lambda v: v[0])
    a1, b, a2 = ("a", 1), ("b", 2), ("a", 3)
    records.put(a1)
    records.put(b)
    assert records.discard("b", b)
    assert not records.discard("b", b)  # gone already
    records.put(a2)
    assert not records.discard("a", a1)  # put again since: the newer record stays
    assert records.pop_oldest(lambda v: v[1] < 10, 10) == ["a"]
    assert len(records) == 0
