"""``GET /v1/accounts/{id}/forecast?burn_rate=R[&resource=X]`` on every backend: a burn of R
credits (of class X) at every integer time from the clock. The answer is checked against
the burn itself, posted as real consumptions, one per time step, until one runs into debt;
a forecast changes nothing; bad parameters are problem documents."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from app.keys import Scope, create_key
from app.main import create_app
from app.settings import Settings
from tests.support.api import (
    ACCOUNT,
    JSON,
    MAX,
    all_entries,
    assert_problem,
    before_storage,
    consume,
    error_locs,
    expect,
    ok,
    snapshot,
    url,
)
from tests.support.app_runner import running

FORECAST = url(ACCOUNT, "forecast")


async def forecast(
    client: httpx.AsyncClient,
    burn_rate: int,
    resource: str | None = None,
    account_id: str = ACCOUNT,
) -> JSON:
    params = {"burn_rate": str(burn_rate)}
    if resource is not None:
        params["resource"] = resource
    body = ok(await client.get(url(account_id, "forecast"), params=params))
    check_shape(body)
    return body


def check_shape(body: JSON) -> None:
    grants = body["grants"]
    assert body["available"] == sum(g["remaining"] for g in grants)
    assert body["consumed"] == sum(g["consumed"] for g in grants)
    assert body["expiring_unused"] == sum(g["expiring_unused"] for g in grants)
    assert body["available"] == body["consumed"] + body["expiring_unused"]
    for g in grants:
        assert g["consumed"] + g["expiring_unused"] == g["remaining"], g
        assert (g["used_up_at"] is None) == (g["expiring_unused"] > 0), g
    # Every step before the run-out is covered in full; the one at it is not.
    partial = body["consumed"] - body["burn_rate"] * (body["run_out_at"] - body["timestamp"])
    assert 0 <= partial < body["burn_rate"], body
    expiries = [g["expiry"] for g in grants]
    assert expiries == sorted(expiries)


async def post_grant(
    client: httpx.AsyncClient,
    amount: int,
    timestamp: int,
    expiry: int,
    resources: list[str] | None = None,
) -> None:
    body: JSON = {"amount": amount, "timestamp": timestamp, "expiry": expiry}
    if resources is not None:
        body["resources"] = resources
    ok(await client.post(url(ACCOUNT, "grants"), json=body), 201)


async def test_the_readme_example(client: httpx.AsyncClient) -> None:
    await post_grant(client, 100, 0, 5)
    await post_grant(client, 30, 0, 20)
    assert await forecast(client, 10) == {
        "account_id": ACCOUNT,
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


async def burn(client: httpx.AsyncClient, burn_rate: int, resource: str | None) -> JSON:
    """The burn for real: a consumption at every time step from the clock until one runs
    into debt. What it drew per grant, when each was used up, and when it ran out."""
    clock = ok(await client.get(url(ACCOUNT, "settings")))["clock"]
    drawn: dict[int, int] = {}
    used_up_at: dict[int, int] = {}
    remaining = {g["grant_id"]: g["remaining"] for g in await live(client, resource)}
    t = clock
    while True:
        body: JSON = {"amount": burn_rate, "timestamp": t}
        if resource is not None:
            body["resource"] = resource
        step = ok(await client.post(url(ACCOUNT, "consumptions"), json=body))
        for a in step["allocation"]:
            drawn[a["grant_id"]] = drawn.get(a["grant_id"], 0) + a["amount"]
            if drawn[a["grant_id"]] == remaining[a["grant_id"]]:
                used_up_at[a["grant_id"]] = t
        if step["debt_added"]:
            return {"run_out_at": t, "drawn": drawn, "used_up_at": used_up_at}
        t += 1
        assert t < clock + 1000, "the burn should have run out"


async def live(client: httpx.AsyncClient, resource: str | None) -> list[JSON]:
    params = {} if resource is None else {"resource": resource}
    grants = ok(await client.get(url(ACCOUNT, "grants"), params=params))["grants"]
    assert isinstance(grants, list)
    return [g for g in grants if resource is not None or g["resources"] is None]


@pytest.mark.parametrize(("burn_rate", "resource"), [(7, None), (9, "h100"), (4, "a100")])
async def test_the_forecast_is_what_the_burn_does(
    client: httpx.AsyncClient, burn_rate: int, resource: str | None
) -> None:
    await post_grant(client, 40, 0, 12)
    await post_grant(client, 25, 1, 30, ["h100"])
    await post_grant(client, 60, 2, 9, ["a100", "h100"])
    await post_grant(client, 18, 2, 30)
    await post_grant(client, 33, 3, 25, ["a100"])
    await post_grant(client, 5, 3, 40)
    ok(await consume(client, 11, 3))
    ok(
        await client.post(
            url(ACCOUNT, "consumptions"), json={"amount": 13, "timestamp": 4, "resource": "h100"}
        )
    )
    predicted = await forecast(client, burn_rate, resource)
    assert predicted["timestamp"] == 4
    assert [g["grant_id"] for g in predicted["grants"]] == [
        g["grant_id"] for g in await live(client, resource)
    ]
    happened = await burn(client, burn_rate, resource)
    assert predicted["run_out_at"] == happened["run_out_at"]
    for g in predicted["grants"]:
        assert g["consumed"] == happened["drawn"].get(g["grant_id"], 0), g
        assert g["used_up_at"] == happened["used_up_at"].get(g["grant_id"]), g
    # What the forecast said would expire unused is what the ledger recorded as expired.
    expired = {
        e["grant_id"]: e["amount"] for e in await all_entries(client) if e["kind"] == "expiration"
    }
    for g in predicted["grants"]:
        assert g["expiring_unused"] == expired.get(g["grant_id"], 0), g
    # The classes' cases have credits expiring unused; the unrestricted one uses all up.
    assert (predicted["expiring_unused"] > 0) == (resource is not None)


async def test_a_forecast_changes_nothing(client: httpx.AsyncClient) -> None:
    await post_grant(client, 40, 0, 12)
    ok(await consume(client, 5, 3))
    before = await snapshot(client)
    settings = ok(await client.get(url(ACCOUNT, "settings")))
    first = await forecast(client, 3)
    await forecast(client, 1000)
    assert await snapshot(client) == before
    assert ok(await client.get(url(ACCOUNT, "settings"))) == settings
    assert await forecast(client, 3) == first
    expect(ok(await consume(client, 1, 3)), {"sequence": 3})


async def test_debt_is_shown_and_untouched(client: httpx.AsyncClient) -> None:
    await post_grant(client, 10, 0, 50, ["a100"])
    ok(
        await client.post(
            url(ACCOUNT, "consumptions"), json={"amount": 30, "timestamp": 2, "resource": "h100"}
        )
    )
    h100 = await forecast(client, 4, "h100")
    expect(h100, {"debt": 30, "available": 0, "run_out_at": 2, "consumed": 0, "grants": []})
    a100 = await forecast(client, 4, "a100")
    expect(a100, {"debt": 0, "available": 10, "run_out_at": 4, "consumed": 10})
    totals = await forecast(client, 4)  # no class: no unrestricted grant; debt in total
    expect(totals, {"debt": 30, "available": 0, "run_out_at": 2, "grants": []})


async def test_the_state_at_the_clock_includes_late_writes(client: httpx.AsyncClient) -> None:
    await post_grant(client, 50, 10, 100)
    ok(await client.put(url(ACCOUNT, "settings"), json={"lateness_window": 10}))
    ok(await consume(client, 20, 20))
    expect(await forecast(client, 10), {"timestamp": 20, "available": 30, "run_out_at": 23})
    await post_grant(client, 40, 12, 22)  # late: drawn first at 20, 20 of it left until 22
    got = await forecast(client, 10)
    expect(got, {"timestamp": 20, "available": 70, "run_out_at": 27, "expiring_unused": 0})
    assert [(g["grant_id"], g["consumed"], g["used_up_at"]) for g in got["grants"]] == [
        (2, 20, 21),
        (1, 50, 26),
    ]


async def test_figures_up_to_2_53_are_exact(client: httpx.AsyncClient) -> None:
    await post_grant(client, MAX, 0, MAX)
    got = await forecast(client, 1)
    expect(got, {"run_out_at": MAX, "consumed": MAX, "expiring_unused": 0})
    assert got["grants"][0]["used_up_at"] == MAX - 1
    expect(await forecast(client, MAX), {"run_out_at": 1, "consumed": MAX})
    got = await forecast(client, 2)  # MAX is odd: the last step draws 1
    expect(got, {"run_out_at": (MAX - 1) // 2, "consumed": MAX})


async def test_an_unknown_account_is_404(client: httpx.AsyncClient) -> None:
    r = await client.get(url("nobody", "forecast"), params={"burn_rate": "1"})
    assert assert_problem(r, 404)["type"].endswith(":account-not-found")


@before_storage
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"burn_rate": "0"},
        {"burn_rate": "-1"},
        {"burn_rate": "1.5"},
        {"burn_rate": "05"},
        {"burn_rate": "+5"},
        {"burn_rate": str(MAX + 1)},
        {"burn_rate": "1" * 30},
        {"burn_rate": "ten"},
        {"burn_rate": ""},
    ],
)
async def test_burn_rate_is_a_positive_integer(client: httpx.AsyncClient, params: JSON) -> None:
    await post_grant(client, 1, 0, 5)
    r = await client.get(FORECAST, params=params)
    assert error_locs(assert_problem(r, 422)) == [["query", "burn_rate"]]


@before_storage
@pytest.mark.parametrize(
    ("query", "where"),
    [
        ("burn_rate=1&resource=", ["query", "resource"]),
        ("burn_rate=1&resource=h%20100", ["query", "resource"]),
        ("burn_rate=1&resource=" + "x" * 33, ["query", "resource"]),
        ("burn_rate=1&burnrate=2", ["query", "burnrate"]),
        ("burn_rate=1&burn_rate=2", ["query", "burn_rate"]),
    ],
)
async def test_other_bad_queries(client: httpx.AsyncClient, query: str, where: list[str]) -> None:
    await post_grant(client, 1, 0, 5)
    r = await client.get(f"{FORECAST}?{query}")
    assert where in error_locs(assert_problem(r, 422))


async def test_a_forecast_needs_the_read_scope(tmp_path: Path) -> None:
    keys_file = tmp_path / "api-keys.json"
    reader, _ = create_key(keys_file, "dashboard", (Scope.READ,), "team-a:")
    writer, _ = create_key(keys_file, "billing", (Scope.GRANT, Scope.CONSUME), "")
    app = create_app(Settings(storage="memory", data_dir=tmp_path, api_keys_file=keys_file))
    async with running(app) as client:
        as_writer = {"Authorization": f"Bearer {writer}"}
        body = {"amount": 10, "timestamp": 0, "expiry": 9}
        ok(await client.post(url("team-a:x", "grants"), json=body, headers=as_writer), 201)
        params = {"burn_rate": "2"}
        refused = await client.get(url("team-a:x", "forecast"), params=params, headers=as_writer)
        assert "credits:read" in assert_problem(refused, 403)["detail"]
        as_reader = {"Authorization": f"Bearer {reader}"}
        got = ok(await client.get(url("team-a:x", "forecast"), params=params, headers=as_reader))
        expect(got, {"run_out_at": 5, "consumed": 10})
        other = await client.get(url("team-b:x", "forecast"), params=params, headers=as_reader)
        assert_problem(other, 403)
        assert_problem(await client.get(url("team-a:x", "forecast"), params=params), 401)
