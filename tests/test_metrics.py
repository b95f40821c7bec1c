"""``GET /metrics`` (issue 13, item 1): every counter moves as known operations say it must,
on every backend, in process and in a real server; labels stay bounded (route templates,
never an account id); who may read the metrics; metrics switched off."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from app.keys import Scope, create_key
from app.main import create_app
from app.metrics import Histogram
from app.service.ledger import Ledger
from app.settings import Settings
from tests.support.api import assert_problem, ok
from tests.support.app_runner import BASE_URL, running
from tests.support.server_process import ServerProcess

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
GRANTS = "/v1/accounts/{account_id}/grants"
# Account ids long and odd enough that no other label value could contain one by chance.
A1, A2, A3, A4 = (f"metrics-acct-{n}" for n in (1, 2, 3, 4))
GHOST = "metrics-acct-ghost"


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def scrape(client: httpx.AsyncClient, headers: dict[str, str] | None = None) -> Samples:
    r = await client.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    return parse(r.text)


class Delta:
    """What moved between two scrapes."""

    def __init__(self, before: Samples, after: Samples) -> None:
        self.before, self.after = before, after

    def __call__(self, name: str, **labels: str) -> float:
        return value(self.after, name, **labels) - value(self.before, name, **labels)


def path(account_id: str, tail: str) -> str:
    return f"/v1/accounts/{account_id}/{tail}"


async def known_operations(client: httpx.AsyncClient) -> int:
    """Operations whose effect on every counter is worked out by hand (comments); returns
    what the late write said it restated."""

    async def post(url: str, body: object, status: int, **headers: str) -> dict[str, object]:
        r = await client.post(url, json=body, headers=headers)
        assert r.status_code == status, r.text
        body = r.json()
        assert isinstance(body, dict)
        return body

    def g(amount: int, timestamp: int, expiry: int) -> dict[str, int]:
        return {"amount": amount, "timestamp": timestamp, "expiry": expiry}

    def c(amount: int, timestamp: int) -> dict[str, int]:
        return {"amount": amount, "timestamp": timestamp}

    await post(path(A1, "grants"), g(100, 1, 10), 201)  # granted 100
    await post(path(A1, "consumptions"), c(30, 2), 200)  # consumed 30
    # At 11 the 70 left of grant 1 have expired: the 100 are all debt.
    await post(path(A1, "consumptions"), c(100, 11), 200)
    await post(path(A1, "grants"), g(140, 12, 50), 201)  # granted 140: 100 settle the debt
    voided = await post(path(A1, "grants/2/void"), {"timestamp": 13}, 200)
    assert voided["amount"] == 40
    for _ in range(2):  # the second is a replay
        await post(path(A2, "grants"), g(5, 1, 9), 201, **{"Idempotency-Key": "m-1"})
    await post(path(A2, "consumptions"), c(8, 20), 200)  # 5 expired; 8 of debt, outstanding
    assert_problem(await client.post(path(A1, "consumptions"), json=c(1, 5)), 409)  # refused
    ok(await client.get(path(A1, "balance")))
    assert_problem(await client.get(path(GHOST, "balance")), 404)  # a refused read
    batch = {
        "operations": [
            {"op": "grant", "account_id": A3, **g(10, 1, 100)},
            {"op": "consume", "account_id": A3, **c(4, 2)},
            {"op": "balance", "account_id": A3},
            {"op": "consume", "account_id": A1, **c(1, 0)},  # refused: before the clock
        ]
    }
    results = (await post("/v1/batch", batch, 200))["results"]
    assert isinstance(results, list)
    assert [r["status"] for r in results] == [201, 200, 200, 409]
    # Late events (SPEC Example 4's shape): a grant accepted behind the clock.
    await post(path(A4, "grants"), g(50, 10, 100), 201)
    r = await client.put(path(A4, "settings"), json={"lateness_window": 10})
    assert r.status_code == 200, r.text
    await post(path(A4, "consumptions"), c(80, 20), 200)  # 50 consumed, 30 of debt
    late = await post(path(A4, "grants"), g(40, 12, 60), 201)  # the consumption now draws it
    restated = late["restated"]
    assert isinstance(restated, int)
    assert restated >= 1
    return restated


async def test_each_counter_moves_as_the_operations_say(
    client: httpx.AsyncClient, backend: str
) -> None:
    before = await scrape(client)
    restated = await known_operations(client)
    after = await scrape(client)
    delta = Delta(before, after)
    ops = "gpu_credits_operations_total"
    assert delta(ops, kind="grant", result="ok") == 6
    assert delta(ops, kind="consume", result="ok") == 5
    assert delta(ops, kind="consume", result="refused") == 2
    assert delta(ops, kind="void", result="ok") == 1
    assert delta(ops, kind="balance", result="ok") == 2
    assert delta(ops, kind="balance", result="refused") == 1
    assert delta(ops, kind="grant", result="refused") == 0
    credits = "gpu_credits_credits_total"
    assert delta(credits, kind="granted") == 100 + 140 + 5 + 10 + 50 + 40
    assert delta(credits, kind="consumed") == 30 + 4 + 50
    assert delta(credits, kind="expired") == 70 + 5
    assert delta(credits, kind="voided") == 40
    assert delta(credits, kind="debt_incurred") == 100 + 8 + 30
    assert delta(credits, kind="debt_settled") == 100
    # Outstanding at the end: A2's 8 (A4's 30 were paid once the late grant came in).
    assert value(after, "gpu_credits_debt_outstanding_credits") == 8
    assert delta("gpu_credits_idempotent_replays_total", kind="grant") == 1
    assert delta("gpu_credits_batch_operations_count") == 1
    assert delta("gpu_credits_batch_operations_sum") == 4
    assert delta("gpu_credits_late_writes_total") == 1
    assert delta("gpu_credits_restated_entries_total") == restated
    http = "gpu_credits_http_request_duration_seconds_count"
    assert delta(http, route=GRANTS, method="POST", status="201") == 6  # a replay included
    assert delta(http, route="/v1/accounts/{account_id}/consumptions", method="POST", status="409")
    assert delta(http, route="/v1/batch", method="POST", status="200") == 1
    assert delta(http, route="/v1/accounts/{account_id}/balance", method="GET", status="404") == 1
    assert delta(http, route="/metrics", method="GET", status="200") == 1  # the first scrape
    # Units of work committed: 7 single writes, the batch, the late-event account's 4.
    commits = delta("gpu_credits_storage_commit_group_size_sum")
    if backend == "sqlite":
        assert commits == 12  # sequential requests: however grouped, 12 units in all
        assert delta("gpu_credits_storage_commit_seconds_count") == 12
    elif backend == "postgres":
        assert commits >= 12  # every transaction's COMMIT, reads' too
        assert delta("gpu_credits_storage_commit_seconds_count") == commits
    else:
        assert commits == 0  # memory commits nothing
    _assert_bounded_labels(after)


def _assert_bounded_labels(samples: Samples) -> None:
    for name, labels in samples:
        for label, text in labels:
            assert "metrics-acct" not in text, (name, label, text)
            if label == "route":
                assert text.startswith("/") or text == "unmatched", text


@pytest.mark.backends("memory")
async def test_routes_are_templates_and_methods_and_statuses_bounded(
    client: httpx.AsyncClient,
) -> None:
    before = await scrape(client)
    for n in range(5):
        await client.get(f"/no/such/path/{n}")
        await client.request("BREW", path(f"x{n}", "grants"))
        await client.post(
            path(f"metrics-acct-big{n}", "grants"),
            content=b"{" + b" " * 70_000 + b"}",
            headers={"Content-Type": "application/json"},
        )
    after = await scrape(client)
    delta = Delta(before, after)
    http = "gpu_credits_http_request_duration_seconds_count"
    assert delta(http, route="unmatched", method="GET", status="404") == 5
    assert delta(http, route=GRANTS, method="other", status="405") == 5
    # Refused by the body limit before routing, still labelled with its route.
    assert delta(http, route=GRANTS, method="POST", status="413") == 5
    assert not any(dict(labels).get("method") == "BREW" for _, labels in after)
    _assert_bounded_labels(after)


@pytest.mark.backends("memory")
async def test_an_unexpected_error_is_counted_500_with_its_request_id(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(Ledger, "balance", broken)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
            r = await client.get(path(A1, "balance"), headers={"X-Request-ID": "boom-1"})
            problem = assert_problem(r, 500)
            assert r.headers["x-request-id"] == "boom-1"
            assert problem["request_id"] == "boom-1"
            samples = await scrape(client)
    route = "/v1/accounts/{account_id}/balance"
    http = "gpu_credits_http_request_duration_seconds_count"
    assert value(samples, http, route=route, method="GET", status="500") == 1


async def test_who_may_read_the_metrics(tmp_path: Path) -> None:
    keys_file = tmp_path / "api-keys.json"
    metrics_key, _ = create_key(keys_file, "prometheus", (Scope.METRICS,), "")
    tenant_key, _ = create_key(keys_file, "tenant", (Scope.METRICS,), "team-a:")
    reader, _ = create_key(keys_file, "dashboard", (Scope.READ,), "")
    settings = Settings(storage="memory", data_dir=tmp_path, api_keys_file=keys_file)

    def bearer(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    async with running(create_app(settings)) as client:
        assert_problem(await client.get("/metrics"), 401)
        assert_problem(await client.get("/metrics", headers=bearer(reader)), 403)
        tenant = assert_problem(await client.get("/metrics", headers=bearer(tenant_key)), 403)
        assert "account prefix" in tenant["detail"]
        before = await scrape(client, bearer(metrics_key))
        # Each reason of failure, counted.
        assert_problem(await client.get(path(A1, "balance")), 401)  # missing
        r = await client.get(path(A1, "balance"), headers={"Authorization": "Basic eDp5"})
        assert_problem(r, 401)  # malformed
        assert_problem(await client.get(path(A1, "balance"), headers=bearer("gck_x_y")), 401)
        grant = {"amount": 1, "timestamp": 1, "expiry": 2}
        r = await client.post(path(A1, "grants"), json=grant, headers=bearer(reader))
        assert_problem(r, 403)  # forbidden
        after = await scrape(client, bearer(metrics_key))
    delta = Delta(before, after)
    for reason in ("missing", "malformed", "invalid", "forbidden"):
        assert delta("gpu_credits_auth_failures_total", reason=reason) == 1, reason
    assert value(after, "gpu_credits_auth_failures_total", reason="forbidden") == 3

    public = settings.model_copy(update={"metrics_public": True})
    async with running(create_app(public)) as client:
        await scrape(client)  # no key needed


async def test_metrics_can_be_switched_off(tmp_path: Path) -> None:
    settings = Settings(storage="memory", data_dir=tmp_path, metrics=False)
    async with running(create_app(settings)) as client:
        grant = {"amount": 1, "timestamp": 1, "expiry": 2}
        ok(await client.post(path(A1, "grants"), json=grant), 201)
        r = await client.get("/metrics")
        problem = assert_problem(r, 404)
        assert "GPU_CREDITS_METRICS" in problem["detail"]
        assert problem["request_id"] == r.headers["x-request-id"]


def test_a_real_server_exposes_what_it_did(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data")
    server.start()
    try:
        with httpx.Client(base_url=server.base_url, timeout=10.0) as http:
            before = parse(http.get("/metrics").text)
            for n in range(3):
                r = http.post(path(A1, "grants"), json={"amount": 7, "timestamp": n, "expiry": 99})
                assert r.status_code == 201, r.text
            assert http.get(path(A1, "balance")).status_code == 200
            r = http.get("/metrics", headers={"Accept": "application/openmetrics-text"})
            assert r.headers["content-type"].startswith("application/openmetrics-text")
            assert r.text.rstrip().endswith("# EOF")
            after = parse(http.get("/metrics").text)
    finally:
        server.stop()
    delta = Delta(before, after)
    http_count = "gpu_credits_http_request_duration_seconds_count"
    assert delta(http_count, route=GRANTS, method="POST", status="201") == 3
    assert delta("gpu_credits_credits_total", kind="granted") == 21
    assert delta("gpu_credits_operations_total", kind="balance", result="ok") == 1
    assert delta("gpu_credits_storage_commit_group_size_sum") == 3
    assert value(after, "gpu_credits_info", version=_version(after), storage="sqlite") == 1
    assert value(after, "process_resident_memory_bytes") > 0  # the process's own metrics
    _assert_bounded_labels(after)


def _version(samples: Samples) -> str:
    (version,) = {dict(labels)["version"] for name, labels in samples if name == "gpu_credits_info"}
    return version


def test_a_histogram_counts_a_value_on_a_bound_in_that_bucket() -> None:
    histogram = Histogram((1, 2.5))
    for value in (0.5, 1, 1.0000001, 2.5, 3, 1e9):
        histogram.observe(value)
    assert histogram.buckets() == [("1.0", 2.0), ("2.5", 4.0), ("+Inf", 6.0)]
    assert histogram.sum == pytest.approx(0.5 + 1 + 1.0000001 + 2.5 + 3 + 1e9)


async def test_debt_outstanding_is_loaded_again_at_a_restart(tmp_path: Path) -> None:
    settings = Settings(storage="sqlite", data_dir=tmp_path / "data")
    async with running(create_app(settings)) as client:
        for account, amount in ((A1, 7), (A2, 5)):
            usage = {"amount": amount, "timestamp": 1}
            r = await client.post(path(account, "consumptions"), json=usage)
            assert r.status_code == 200, r.text
        assert value(await scrape(client), "gpu_credits_debt_outstanding_credits") == 12
    async with running(create_app(settings)) as client:
        samples = await scrape(client)
        assert value(samples, "gpu_credits_debt_outstanding_credits") == 12
        assert value(samples, "gpu_credits_credits_total", kind="debt_incurred") == 0  # new process
        grant = {"amount": 10, "timestamp": 2, "expiry": 9}
        assert (await client.post(path(A1, "grants"), json=grant)).status_code == 201
        assert value(await scrape(client), "gpu_credits_debt_outstanding_credits") == 5


async def test_usage_stream_lines_are_counted(tmp_path: Path) -> None:
    """Lines a usage stream applies count as the same operations and credits would in a
    batch (the review found them missing); duplicates are not operations."""
    settings = Settings(storage="memory", data_dir=tmp_path, metrics_public=True)
    lines = [
        {"id": "e1", "op": "grant", "account_id": A1, "amount": 100, "timestamp": 1, "expiry": 50},
        {"id": "e2", "op": "consume", "account_id": A1, "amount": 130, "timestamp": 2},
        {"id": "e3", "op": "consume", "account_id": A1, "amount": 0, "timestamp": 3},  # 422
    ]
    body = "".join(json.dumps(line) + "\n" for line in lines).encode()
    headers = {"content-type": "application/x-ndjson"}
    async with running(create_app(settings)) as client:
        before = await scrape(client)
        for _ in range(2):  # the second time: every line is a duplicate or refused again
            r = await client.post("/v1/events", content=body, headers=headers)
            assert r.status_code == 200, r.text
        after = await scrape(client)
    delta = Delta(before, after)
    assert delta("gpu_credits_operations_total", kind="grant", result="ok") == 1
    assert delta("gpu_credits_operations_total", kind="consume", result="ok") == 1
    assert delta("gpu_credits_credits_total", kind="granted") == 100
    assert delta("gpu_credits_credits_total", kind="consumed") == 100
    assert delta("gpu_credits_credits_total", kind="debt_incurred") == 30
