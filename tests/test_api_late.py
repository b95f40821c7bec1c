"""Late events over HTTP (SPEC section 6), on every backend: the lateness window, writes
accepted behind the clock and placed in effective order, restatements, the watermark and
final entries, as-of reads, account settings, batches, idempotent replays, restarts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.keys import Scope, create_key
from app.main import create_app
from app.settings import Settings
from tests.support.api import (
    ACCOUNT,
    JSON,
    all_entries,
    assert_problem,
    consume,
    error_locs,
    expect,
    grant,
    ok,
    paginate,
    snapshot,
    url,
)
from tests.support.app_runner import make_settings, running


async def set_window(
    client: httpx.AsyncClient, window: Any, account_id: str = ACCOUNT
) -> httpx.Response:
    return await client.put(url(account_id, "settings"), json={"lateness_window": window})


async def as_of(client: httpx.AsyncClient, timestamp: int, resource: str | None = None) -> JSON:
    params = {"timestamp": str(timestamp)}
    if resource is not None:
        params["resource"] = resource
    return ok(await client.get(url(ACCOUNT, "balance"), params=params))


async def example_4(client: httpx.AsyncClient) -> list[JSON]:
    """SPEC Example 4 (W = 10): the answers of its writes, in order."""
    first = ok(await grant(client, 50, 10, 100), 201)
    ok(await set_window(client, 10))
    return [
        first,
        ok(await consume(client, 80, 20)),
        ok(await grant(client, 40, 15, 18), 201),
        ok(await grant(client, 40, 12, 60), 201),
    ]


async def test_example_4(client: httpx.AsyncClient) -> None:
    _, consumed, late_2, late_3 = await example_4(client)
    expect(consumed, {"debt": 30, "debt_added": 30, "watermark": 10, "restated": 0})
    assert [(a["grant_id"], a["amount"]) for a in consumed["allocation"]] == [(1, 50)]
    # Grant 2 is effective before the consumption but expires unused at 18.
    expect(
        late_2,
        {"grant_id": 2, "settled_debt": 0, "retained": 40, "restated": 0},
    )
    expect(late_2, {"timestamp": 15, "available": 0, "debt": 30, "watermark": 10})
    # Grant 3 is drawn first by the consumption at 20 (expiry 60), then 40 of grant 1.
    expect(late_3, {"grant_id": 3, "restated": 1, "available": 10, "debt": 0, "balance": 10})
    too_late = assert_problem(await consume(client, 5, 9), 409)
    expect(too_late, {"watermark": 10, "account_timestamp": 20})

    entries = await all_entries(client)
    assert [(e["kind"], e["timestamp"], e["sequence"]) for e in entries] == [
        ("grant", 10, 1),
        ("grant", 12, 5),
        ("grant", 15, 3),
        ("expiration", 18, 4),
        ("consumption", 20, 2),
    ]
    restated = entries[-1]
    expect(restated, {"revision": 1, "consumed": 80, "debt_added": 0, "available": 10})
    assert [(a["grant_id"], a["amount"]) for a in restated["allocation"]] == [(3, 40), (1, 40)]
    expect(entries[3], {"grant_id": 2, "amount": 40, "revision": 0})
    assert [e["final"] for e in entries] == [False] * 5  # the watermark is 10: none before it
    # Balances after each entry follow effective order.
    assert [e["available"] for e in entries] == [50, 90, 130, 90, 10]
    assert await paginate(client, 2) == entries


async def test_as_of_reads_see_the_late_writes(client: httpx.AsyncClient) -> None:
    await example_4(client)
    expect(await as_of(client, 16), {"available": 130, "debt": 0, "final": False})
    expect(await as_of(client, 19), {"available": 90, "debt": 0, "watermark": 10})
    expect(await as_of(client, 11), {"available": 50, "final": False})
    expect(await as_of(client, 9), {"available": 0, "debt": 0, "final": True})
    # Per GPU class too: every grant here is unrestricted, so any class sees them all.
    expect(await as_of(client, 16, "h100"), {"available": 130, "resource": "h100"})
    expect(await as_of(client, 20, "h100"), {"available": 10, "final": False})
    expect(await as_of(client, 30), {"available": 10, "final": False})  # a projection


async def test_class_scoped_late_consumption_and_as_of(client: httpx.AsyncClient) -> None:
    body = {"amount": 100, "timestamp": 0, "expiry": 50, "resources": ["h100"]}
    ok(await client.post(url(ACCOUNT, "grants"), json=body), 201)
    ok(await set_window(client, 100))
    ok(await grant(client, 40, 10, 30), 201)  # unrestricted
    late = ok(
        await client.post(
            url(ACCOUNT, "consumptions"), json={"amount": 30, "timestamp": 5, "resource": "a100"}
        )
    )
    # At 5 only the h100 grant exists: an a100 consumption is all debt, which the
    # unrestricted grant at 10 then settles (restated: it settled nothing before).
    expect(late, {"debt_added": 30, "restated": 1, "debt": 0, "available": 110})
    entries = await all_entries(client)
    expect(entries[2], {"kind": "grant", "timestamp": 10, "settled_debt": 30, "revision": 1})
    expect(await as_of(client, 7, "a100"), {"available": 0, "debt": 30, "balance": -30})
    expect(await as_of(client, 7, "h100"), {"available": 100, "debt": 0})
    expect(await as_of(client, 12, "a100"), {"available": 10, "debt": 0})


async def test_a_late_void(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 100, 0, 50), 201)
    ok(await set_window(client, 100))
    ok(await consume(client, 30, 20))
    voided = ok(await client.post(url(ACCOUNT, "grants/1/void"), json={"timestamp": 10}))
    # Voided at 10, before the consumption at 20: that now finds nothing and is all debt.
    expect(voided, {"amount": 100, "restated": 1, "available": 0, "debt": 30})
    entries = await all_entries(client)
    assert [(e["kind"], e.get("debt_added")) for e in entries] == [
        ("grant", None),
        ("void", None),
        ("consumption", 30),
    ]


async def test_a_too_late_write_changes_nothing(client: httpx.AsyncClient) -> None:
    await example_4(client)
    before = await snapshot(client)
    for timestamp in (9, 0):
        problem = assert_problem(await grant(client, 1, timestamp, 100), 409)
        expect(problem, {"watermark": 10, "account_timestamp": 20})
        assert_problem(await consume(client, 1, timestamp), 409)
    assert await snapshot(client) == before


async def test_settings_are_read_and_set(client: httpx.AsyncClient) -> None:
    assert_problem(await set_window(client, 5), 404)  # settings do not create accounts
    assert_problem(await client.get(url(ACCOUNT, "settings")), 404)
    ok(await grant(client, 10, 100, 1000), 201)
    settings = ok(await client.get(url(ACCOUNT, "settings")))
    assert settings == {
        "account_id": ACCOUNT,
        "lateness_window": 0,
        "inherited": True,
        "clock": 100,
        "watermark": 100,
    }
    expect(ok(await set_window(client, 50)), {"lateness_window": 50, "inherited": False})
    ok(await consume(client, 1, 130))
    expect(ok(await client.get(url(ACCOUNT, "settings"))), {"clock": 130, "watermark": 100})
    ok(await consume(client, 1, 110))  # late, within the window
    # Raising the window never moves the watermark back; lowering it moves it forward.
    expect(ok(await set_window(client, 1000)), {"watermark": 100})
    expect(ok(await set_window(client, 5)), {"lateness_window": 5, "watermark": 125})
    assert [e["final"] for e in await all_entries(client)] == [True, True, False]
    expect(ok(await set_window(client, None)), {"lateness_window": 0, "inherited": True})
    expect(ok(await client.get(url(ACCOUNT, "settings"))), {"watermark": 130})
    assert_problem(await consume(client, 1, 129), 409)


@pytest.mark.backends("memory")
@pytest.mark.parametrize(
    "body",
    [{}, {"lateness_window": -1}, {"lateness_window": "5"}, {"lateness_window": 2**53}],
    ids=["missing", "negative", "string", "too-large"],
)
async def test_bad_settings_are_422(client: httpx.AsyncClient, body: JSON) -> None:
    ok(await grant(client, 10, 0, 10), 201)
    r = await client.put(url(ACCOUNT, "settings"), json=body)
    assert error_locs(assert_problem(r, 422)) == [["body", "lateness_window"]]


async def test_a_replay_returns_the_first_answer_after_restatements(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, 50, 10, 100), 201)
    ok(await set_window(client, 10))
    first = ok(await consume(client, 80, 20, key="c-1"))
    ok(await grant(client, 40, 12, 60), 201)  # restates the consumption
    again = await consume(client, 80, 20, key="c-1")
    assert ok(again) == first
    assert again.headers["Idempotent-Replayed"] == "true"
    entries = await all_entries(client)
    expect(entries[-1], {"debt_added": 0, "revision": 1})


async def test_late_operations_in_a_batch(client: httpx.AsyncClient) -> None:
    ok(await grant(client, 50, 10, 100), 201)
    ok(await set_window(client, 10))
    ok(await consume(client, 80, 20))
    operations = [
        {"op": "grant", "account_id": ACCOUNT, "amount": 40, "timestamp": 12, "expiry": 60},
        {"op": "balance", "account_id": ACCOUNT, "timestamp": 15},
        {"op": "consume", "account_id": ACCOUNT, "amount": 5, "timestamp": 9},
    ]
    body = ok(await client.post("/v1/batch", json={"operations": operations}))
    statuses = [r["status"] for r in body["results"]]
    assert statuses == [201, 200, 409]
    expect(body["results"][0]["body"], {"restated": 1, "available": 10})
    expect(body["results"][1]["body"], {"available": 90, "final": False})
    # Atomic: the too-late consumption undoes the late grant too.
    before = await snapshot(client)
    operations[0]["timestamp"] = 13
    r = await client.post("/v1/batch", json={"operations": operations, "atomic": True})
    expect(assert_problem(r, 409), {"operation_index": 2})
    assert await snapshot(client) == before


@pytest.mark.backends("sqlite", "postgres")
async def test_provisional_writes_survive_a_restart(
    backend: str, tmp_path: Path, new_database_url: Callable[[], str | None]
) -> None:
    settings = make_settings(backend, tmp_path / "data", new_database_url())
    async with running(create_app(settings)) as client:
        await example_4(client)
        entries = await all_entries(client)
    async with running(create_app(settings)) as client:
        assert await all_entries(client) == entries
        expect(ok(await client.get(url(ACCOUNT, "settings"))), {"watermark": 10, "clock": 20})
        # The provisional writes are held again: a late write still restates them.
        late = ok(await consume(client, 20, 11))  # leaves grant 1 with 30 for the one at 20
        expect(late, {"restated": 1, "available": 0, "debt": 10})
        expect((await all_entries(client))[-1], {"kind": "consumption", "revision": 2})


async def test_an_expiration_a_late_write_undoes_leaves_the_ledger(
    client: httpx.AsyncClient,
) -> None:
    ok(await grant(client, 10, 0, 5), 201)
    ok(await set_window(client, 100))
    ok(await consume(client, 1, 10))  # the grant expired unused at 5
    page = ok(await client.get(url(ACCOUNT, "ledger"), params={"limit": "2"}))
    assert [(e["kind"], e["sequence"]) for e in page["entries"]] == [
        ("grant", 1),
        ("expiration", 2),
    ]
    # A consumption at 3 uses the grant up before it expires: that expiration never happens.
    late = ok(await consume(client, 10, 3))
    expect(late, {"consumed": 10, "restated": 1, "debt": 1})
    assert [(e["kind"], e["timestamp"]) for e in await all_entries(client)] == [
        ("grant", 0),
        ("consumption", 3),
        ("consumption", 10),
    ]
    # A reader holding the undone entry as its cursor is told, not silently cut short.
    gone = await client.get(url(ACCOUNT, "ledger"), params={"after": page["next_after"]})
    assert assert_problem(gone, 409)["type"].endswith(":cursor-gone")
    past_the_end = ok(await client.get(url(ACCOUNT, "ledger"), params={"after": "99"}))
    assert past_the_end["entries"] == []


async def test_settings_need_the_admin_scope(tmp_path: Path) -> None:
    """``credits:admin`` is new: a key with every scope that existed before cannot change a
    window (what is final is an operator's decision), and reading settings needs
    ``credits:read`` only."""
    keys_file = tmp_path / "api-keys.json"
    older, _ = create_key(keys_file, "billing", (Scope.GRANT, Scope.CONSUME, Scope.READ), "")
    admin, _ = create_key(keys_file, "ops", (Scope.ADMIN,), "")
    app = create_app(Settings(storage="memory", data_dir=tmp_path, api_keys_file=keys_file))
    async with running(app) as client:
        bearer = {"Authorization": f"Bearer {older}"}
        r = await client.post(
            url(ACCOUNT, "grants"), json={"amount": 1, "timestamp": 0, "expiry": 9}, headers=bearer
        )
        ok(r, 201)
        body = {"lateness_window": 5}
        refused = await client.put(url(ACCOUNT, "settings"), json=body, headers=bearer)
        assert "credits:admin" in assert_problem(refused, 403)["detail"]
        ok(await client.get(url(ACCOUNT, "settings"), headers=bearer))
        as_admin = {"Authorization": f"Bearer {admin}"}
        expect(
            ok(await client.put(url(ACCOUNT, "settings"), json=body, headers=as_admin)),
            {"lateness_window": 5},
        )
        assert_problem(await client.get(url(ACCOUNT, "settings"), headers=as_admin), 403)


@pytest.mark.backends("sqlite", "postgres")
async def test_a_window_lowered_across_a_restart_folds_what_it_passes(
    backend: str, tmp_path: Path, new_database_url: Callable[[], str | None]
) -> None:
    """The service's window lowered (or unset) while provisional writes trail the clock by
    more than the new window: the service starts, and the watermark is max(M, C - W) as the
    rules say. (It used to refuse to start: the stored watermark was behind C - W.)"""
    wide = make_settings(backend, tmp_path / "data", new_database_url())
    wide.lateness_window = 50
    async with running(create_app(wide)) as client:
        ok(await grant(client, 100, 0, 1_000), 201)
        ok(await consume(client, 10, 100))
        ok(await consume(client, 5, 120))
        expect(ok(await client.get(url(ACCOUNT, "settings"))), {"watermark": 70, "clock": 120})
        entries = await all_entries(client)
    assert [e["final"] for e in entries] == [True, False, False]
    narrow = wide.model_copy(update={"lateness_window": 10})
    for _ in range(2):  # the fold on load is the same every time: nothing is lost or redone
        async with running(create_app(narrow)) as client:
            settings = ok(await client.get(url(ACCOUNT, "settings")))
            expect(settings, {"watermark": 110, "clock": 120, "lateness_window": 10})
            after = await all_entries(client)
            assert [e["final"] for e in after] == [True, True, False]
            assert [{**e, "final": None} for e in after] == [{**e, "final": None} for e in entries]
            before = await snapshot(client)
            too_late = await consume(client, 1, 105)
            expect(assert_problem(too_late, 409), {"watermark": 110})
            assert await snapshot(client) == before
    async with running(create_app(narrow)) as client:
        # A grant expiring earlier than grant 1: the consumption at 120 now takes it first.
        late = ok(await grant(client, 10, 115, 500), 201)
        expect(late, {"restated": 1, "available": 95, "watermark": 110})
    unset = wide.model_copy(update={"lateness_window": 0})
    async with running(create_app(unset)) as client:
        expect(ok(await client.get(url(ACCOUNT, "settings"))), {"watermark": 120, "clock": 120})
        # Final: the entries before the watermark (SPEC section 6).
        assert all(e["final"] == (e["timestamp"] < 120) for e in await all_entries(client))
        ok(await consume(client, 1, 120))
        expect(assert_problem(await consume(client, 1, 119), 409), {"watermark": 120})


# -- what one batch's late writes may replay (app.service.replay) -------------------------


def _late_grants(timestamps: list[int]) -> list[JSON]:
    return [
        {"op": "grant", "account_id": ACCOUNT, "amount": 1, "timestamp": t, "expiry": 10**6}
        for t in timestamps
    ]


async def _provisional(client: httpx.AsyncClient, writes: int) -> None:
    """The account with a window of 10^5 and ``writes`` provisional consumptions (at 1,000
    onwards) after a grant at 0."""
    ok(await grant(client, 10**6, 0, 10**6), 201)
    ok(await set_window(client, 100_000))
    operations = [
        {"op": "consume", "account_id": ACCOUNT, "amount": 1, "timestamp": 1_000 + n}
        for n in range(writes)
    ]
    if operations:
        body = ok(await client.post("/v1/batch", json={"operations": operations}))
        assert body["failed"] == 0


@pytest.mark.parametrize("atomic", [False, True])
async def test_a_batch_whose_late_writes_would_replay_too_much_is_refused(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, atomic: bool
) -> None:
    """A batch is applied on the event loop without a pause, and each late write replays
    the provisional writes after it: before, 200 late grants behind 8,000 provisional
    writes held the loop (and every other request) 16 s in one batch. Past the bound the
    batch is refused whole with a problem, before anything of it is applied."""
    from app.service import ledger

    monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 250)
    await _provisional(client, 100)
    before = await snapshot(client)
    # Three grants behind all 100 consumptions: about 3 x 100 replayed, past 250.
    operations = _late_grants([500, 501, 502])
    headers = {"Idempotency-Key": "late-1"}
    body = {"operations": operations, "atomic": atomic}
    r = await client.post("/v1/batch", json=body, headers=headers)
    problem = assert_problem(r, 422)
    expect(problem, {"type": "tag:gpu-credits,2026:problem:batch-replay-too-large"})
    expect(problem, {"limit": 250})
    assert "POST /v1/events" in problem["detail"]
    assert await snapshot(client) == before
    # The refusal kept nothing under its key: the same request within the bound applies.
    monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 400)
    again = ok(await client.post("/v1/batch", json=body, headers=headers))
    assert [result["status"] for result in again["results"]] == [201] * 3
    assert "Idempotent-Replayed" not in (await client.post("/v1/batch", json=body)).headers


async def test_a_batch_late_behind_its_own_writes_counts_them(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write behind the batch's own earlier writes replays them too, however the account
    stood before it; two late writes behind fewer writes pass."""
    from app.service import ledger

    monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 250)
    await _provisional(client, 0)
    before = await snapshot(client)
    in_order = [
        {"op": "consume", "account_id": ACCOUNT, "amount": 1, "timestamp": 1_000 + n}
        for n in range(150)
    ]
    r = await client.post("/v1/batch", json={"operations": in_order + _late_grants([10, 11])})
    expect(assert_problem(r, 422), {"limit": 250})
    assert await snapshot(client) == before
    body = ok(
        await client.post("/v1/batch", json={"operations": in_order[:100] + _late_grants([10])})
    )
    assert body["failed"] == 0
    assert body["results"][-1]["status"] == 201
    expect(body["results"][-1]["body"], {"timestamp": 10, "sequence": 102})


@pytest.mark.backends("sqlite", "postgres")
async def test_the_replay_bound_holds_after_a_restart(
    backend: str,
    tmp_path: Path,
    new_database_url: Callable[[], str | None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Counted from the accounts the batch holds, not from a cache: on PostgreSQL a fresh
    process had none, and counted such an account's writes as none."""
    from app.service import ledger

    monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 250)
    settings = make_settings(backend, tmp_path / "data", new_database_url())
    async with running(create_app(settings)) as client:
        await _provisional(client, 100)
    async with running(create_app(settings)) as client:
        before = await snapshot(client)
        r = await client.post("/v1/batch", json={"operations": _late_grants([500, 501, 502])})
        expect(assert_problem(r, 422), {"limit": 250})
        assert await snapshot(client) == before


@pytest.mark.parametrize("new", [False, True])
async def test_a_batch_late_behind_its_own_writes_counts_their_replay_base(
    backend: str,
    tmp_path: Path,
    database_url: str | None,
    monkeypatch: pytest.MonkeyPatch,
    new: bool,
) -> None:
    """A write late behind the batch's own writes copies a replay base among them and
    replays the writes since it (up to a replay spacing, 64 at least), with the live grants
    the batch made so far: counted, on an account the batch creates (the service's window)
    as on one it holds. Before, such a write counted as the writes after it alone: 5,000
    grants and 5,000 consumptions each one behind the last grant held the loop 12.7 s."""
    from app.service import ledger

    monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 250)
    settings = make_settings(backend, tmp_path / "data", database_url)
    if new:
        settings = settings.model_copy(update={"lateness_window": 100_000})
    async with running(create_app(settings)) as client:
        if not new:
            await _provisional(client, 0)
        grants = _late_grants(list(range(1_000, 1_100)))  # in order: provisional
        late = [
            {"op": "consume", "account_id": ACCOUNT, "amount": 1, "timestamp": 1_098}
            for _ in range(4)
        ]
        before = await snapshot(client)
        # Each late one: 1 write after it, up to 64 before it from its base (a mark among
        # the 100 grants) and the copy of about 100 live grants (an eighth: 12): 4 x 77.
        r = await client.post("/v1/batch", json={"operations": grants + late})
        expect(assert_problem(r, 422), {"limit": 250})
        assert await snapshot(client) == before
        body = ok(await client.post("/v1/batch", json={"operations": grants + late[:3]}))
        assert body["failed"] == 0
        # The live grants the batch made count too: after 2,000 more a late write copies
        # a base (an eighth of them: 262) up to 262 writes before it.
        monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 400)
        grants = _late_grants(list(range(2_000, 4_000)))
        late = [{**late[0], "timestamp": 3_998}]
        r = await client.post("/v1/batch", json={"operations": grants + late})
        expect(assert_problem(r, 422), {"limit": 400})


@pytest.mark.parametrize("window", [0, 100])
async def test_writes_refused_as_too_late_are_not_counted(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, window: int
) -> None:
    """A write before the watermark is refused on its own (409) and replays nothing: the
    account's window 0 (the default: no write is ever late), or before the watermark the
    account had before the batch. Before, such writes behind the batch's own counted the
    writes after them, and a batch in falling time order on an account with the default
    window was refused whole (422) instead of applying its first write."""
    from app.service import ledger

    monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 250)
    ok(await grant(client, 10**6, 0, 10**6), 201)
    if window:
        ok(await set_window(client, window))
    ok(await consume(client, 1, 1_000))  # watermark 1,000 - window
    in_order = [
        {"op": "consume", "account_id": ACCOUNT, "amount": 1, "timestamp": 2_000 + n}
        for n in range(300)
    ]
    body = ok(await client.post("/v1/batch", json={"operations": in_order + _late_grants([5] * 3)}))
    assert [result["status"] for result in body["results"]] == [200] * 300 + [409] * 3
    if not window:
        falling = [
            {"op": "consume", "account_id": ACCOUNT, "amount": 1, "timestamp": 9_000 - n}
            for n in range(300)
        ]
        body = ok(await client.post("/v1/batch", json={"operations": falling}))
        assert [result["status"] for result in body["results"]] == [200] + [409] * 299


async def test_class_reads_inside_the_provisional_region_are_counted(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A balance read of a class at a time from the watermark to the clock copies a replay
    base and replays the writes from it up to that time: counted as a late write's are.
    Before, reads were not counted: 2,000 such reads on an account with 10,000 live grants
    held the loop 26 s in one batch. Totals (no class) and reads at or after the clock
    cost no replay and pass."""
    from app.service import ledger

    monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 250)
    body = {"amount": 10**6, "timestamp": 0, "expiry": 10**6, "resources": ["h100"]}
    ok(await client.post(url(ACCOUNT, "grants"), json=body), 201)
    ok(await set_window(client, 100_000))
    operations = [
        {"op": "consume", "account_id": ACCOUNT, "amount": 1, "timestamp": 1_000 + n}
        for n in range(60)
    ]
    ok(await client.post("/v1/batch", json={"operations": operations}))

    def reads(count: int, resource: str | None, timestamp: int = 1_050) -> list[JSON]:
        read = {"op": "balance", "account_id": ACCOUNT, "timestamp": timestamp}
        return [read if resource is None else {**read, "resource": resource}] * count

    # Each replays 51 writes from the final state (no mark in 60 writes): 5 x 51 > 250.
    r = await client.post("/v1/batch", json={"operations": reads(5, "h100")})
    expect(assert_problem(r, 422), {"limit": 250})
    for operations in (reads(4, "h100"), reads(100, None), reads(100, "h100", 2_000)):
        body = ok(await client.post("/v1/batch", json={"operations": operations}))
        assert body["failed"] == 0


@pytest.mark.backends("postgres")
async def test_a_refused_batch_keeps_the_cached_accounts(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before anything changed, a batch leaves this process's cache of trackers as
    it was: the next request need not load the account (10,000 provisional writes) again."""
    from app.adapters.postgres import PostgresPort
    from app.service import ledger

    monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 250)
    await _provisional(client, 100)
    port = app.state.ledger.port
    assert isinstance(port, PostgresPort)
    cached = port.cached_live_grants
    assert cached == 1
    r = await client.post("/v1/batch", json={"operations": _late_grants([500, 501, 502])})
    expect(assert_problem(r, 422), {"limit": 250})
    assert port.cached_live_grants == cached


async def test_reads_after_the_clock_that_walk_expiring_grants_are_counted(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A balance read at a time after the clock leaves out the live grants expiring by then:
    it walks them (O(e)). Found by review: 2,000 reads at a time after 9,990 grants expire
    held the loop 19.7 s in one batch (10 ms each). Counted as a copy is (an eighth of the
    live grants, with those the batch adds); a read before the first expiry walks nothing
    and counts nothing, whatever the account holds."""
    from app.service import ledger

    monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 250)
    grants = [
        {"op": "grant", "account_id": ACCOUNT, "amount": 1, "timestamp": 0, "expiry": 100 + n}
        for n in range(400)
    ]
    ok(await client.post("/v1/batch", json={"operations": grants}))
    before = await snapshot(client)

    def reads(count: int, timestamp: int, account_id: str = ACCOUNT) -> list[JSON]:
        return [{"op": "balance", "account_id": account_id, "timestamp": timestamp}] * count

    # Each walks up to 400 grants, counted 50: 6 x 50 > 250.
    r = await client.post("/v1/batch", json={"operations": reads(6, 10_000)})
    expect(assert_problem(r, 422), {"limit": 250})
    assert await snapshot(client) == before
    for operations in (reads(5, 10_000), reads(1_000, 50), reads(1_000, 10_000, "other")):
        body = ok(await client.post("/v1/batch", json={"operations": operations}))
        assert len(body["results"]) == len(operations)
    # The batch's own grants are walked too (a new account: nothing held before it).
    r = await client.post(
        "/v1/batch",
        json={"operations": [{**g, "account_id": "new"} for g in grants] + reads(6, 10_000, "new")},
    )
    expect(assert_problem(r, 422), {"limit": 250})


async def test_an_atomic_batch_counts_the_copies_it_keeps(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An atomic batch copies every account it holds first (O(live grants) each), to put
    it back on a failure: found by review, 30 accounts of 10,000 live grants took 0.27 s,
    1,000 of them would take about 9 s. Counted as a late write's copy is; the same
    operations not atomic copy nothing and pass."""
    from app.service import ledger

    monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 250)
    accounts = [f"big-{n}" for n in range(11)]
    for account_id in accounts:
        grants = [
            {"op": "grant", "account_id": account_id, "amount": 1, "timestamp": 0, "expiry": 10**6}
            for _ in range(400)
        ]
        ok(await client.post("/v1/batch", json={"operations": grants}))
    read = [{"op": "balance", "account_id": a} for a in accounts]
    # Eleven copies of 400 live grants, counted 25 each: 275 > 250.
    r = await client.post("/v1/batch", json={"operations": read, "atomic": True})
    expect(assert_problem(r, 422), {"limit": 250})
    assert ok(await client.post("/v1/batch", json={"operations": read}))["failed"] == 0
    body = {"operations": read[:10], "atomic": True}
    assert ok(await client.post("/v1/batch", json=body))["failed"] == 0


async def test_late_writes_count_the_grants_live_at_their_base(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A late write copies its replay base with the grants live there, and its replay
    expires again those that expired since: found by review, grants all expired by the
    clock counted as none, and 100 late writes behind 9,990 such grants (and 20 provisional
    writes) held the loop 1.8 s in one batch, 18 ms each where 20-odd writes were counted (a copy
    of 9,990 grants and their expirations made again: counted as two copies now)."""
    from app.service import ledger

    monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 250)
    grants = [
        {"op": "grant", "account_id": ACCOUNT, "amount": 1, "timestamp": n, "expiry": 10_000 + n}
        for n in range(800)
    ]
    ok(await client.post("/v1/batch", json={"operations": grants}))
    ok(await set_window(client, 100_000))
    after = [
        {"op": "consume", "account_id": ACCOUNT, "amount": 1, "timestamp": 20_000 + n}
        for n in range(10)
    ]
    ok(await client.post("/v1/batch", json={"operations": after}))
    before = await snapshot(client)
    # Each copies 800 live grants and expires them again (counted 100 each) and replays
    # the ten: 2 x 210 > 250 (before: 2 x 10).
    late = [
        {"op": "consume", "account_id": ACCOUNT, "amount": 1, "timestamp": 5_000 + n}
        for n in range(2)
    ]
    r = await client.post("/v1/batch", json={"operations": late})
    expect(assert_problem(r, 422), {"limit": 250})
    assert await snapshot(client) == before
    assert ok(await client.post("/v1/batch", json={"operations": late[:1]}))["failed"] == 0


async def test_an_atomic_batch_counts_the_folded_grants_and_provisional_writes_it_copies(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An atomic batch's copy of an account is of both its states (folded and at the clock)
    and its provisional writes: found by review, an account whose grants all expired by the
    clock counted none of them (30 accounts of 9,990 such grants and 3,000 provisional
    writes took 0.2 s, counted 0; a thousand would take about 7 s)."""
    from app.service import ledger

    monkeypatch.setattr(ledger, "MAX_BATCH_REPLAYED_WRITES", 250)
    accounts = [f"gone-{n}" for n in range(6)]
    for account_id in accounts:
        grants = [
            {"op": "grant", "account_id": account_id, "amount": 1, "timestamp": n, "expiry": 1_000}
            for n in range(400)
        ]
        ok(await client.post("/v1/batch", json={"operations": grants}))
        ok(await set_window(client, 10**6, account_id))
        after = [
            {"op": "consume", "account_id": account_id, "amount": 1, "timestamp": 2_000 + n}
            for n in range(300)
        ]
        ok(await client.post("/v1/batch", json={"operations": after}))
    read = [{"op": "balance", "account_id": a} for a in accounts]
    # Six copies of 400 folded live grants and 300 provisional writes, 43 each: 258 > 250.
    r = await client.post("/v1/batch", json={"operations": read, "atomic": True})
    expect(assert_problem(r, 422), {"limit": 250})
    assert ok(await client.post("/v1/batch", json={"operations": read}))["failed"] == 0
    body = {"operations": read[:5], "atomic": True}
    assert ok(await client.post("/v1/batch", json=body))["failed"] == 0
