"""Late writes over HTTP against the model, on every backend: a hypothesis state machine.

The app runs in process (``httpx.AsyncClient(transport=ASGITransport(app))``) on memory,
SQLite on a real file and PostgreSQL on the session's throwaway server, with a lateness
window of ``WINDOW``. Each example drives an account of its own (the app and its storage
serve the whole test) through a random mix of:

- writes (grants unrestricted or scoped to GPU classes, consumptions with or without a
  class, voids of known, unknown, voided grants) at or after the clock, late (from the
  watermark to the clock, so in any arrival order within the window) or too late, some with
  an ``Idempotency-Key``;
- batches of such writes, atomic or not (they see the batch so far);
- the account's own window set, lowered (the watermark moves forward) or given back;
- retries of keyed writes, which must replay the first answer even after restatements;
- reads: a balance at the clock, as of a time before it or projected, in total or per
  class; the live grants; the settings; the ledger in small pages.

Every answer, refusal and read must be what ``tests/support/late_model.py`` (sort-and-replay
of the accepted writes in effective order, SPEC sections 1, 5, 6, 7) gives, and after every
step the whole ledger (effects, balance after, sequence, revision, finality) must be the
model's. Examples and steps are bounded so each backend takes a few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import httpx
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from app.main import create_app
from app.settings import Settings
from tests.support.app_runner import running
from tests.support.late_model import JSON, LateAccount, Refused

T = TypeVar("T")
WINDOW = 10
CLASSES = ("h100", "a100")
CLASS_SETS: list[list[str] | None] = [None, None, ["h100"], ["a100"], ["a100", "h100"]]
RESOURCES: list[str | None] = [None, None, "h100", "a100"]
# PostgreSQL answers each request several times slower: fewer examples keep it to seconds.
EXAMPLES = {"memory": 20, "sqlite": 20, "postgres": 10}


def machine_settings(backend: str) -> settings:
    return settings(
        max_examples=EXAMPLES[backend],
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


@dataclass
class Harness:
    """The app of one test, running on its own event loop, shared by every example."""

    loop: asyncio.AbstractEventLoop
    client: httpx.AsyncClient
    accounts: itertools.count[int]

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coroutine)


@dataclass
class Sent:
    """A write as sent: where, what, and what the model says of it."""

    path: str
    body: JSON
    key: str | None
    op: str  # the batch op
    expected: Callable[[LateAccount], JSON]  # raises Refused


def expect(response_status: int, body: JSON, success: int, expected: JSON | Refused) -> None:
    """An answer (or a batch result) is the model's: the body, or the refusal."""
    if isinstance(expected, Refused):
        slug = str(body.get("type", "")).rsplit(":", 1)[-1]
        got = {k: body.get(k) for k in expected.members}
        assert (response_status, slug, got) == (expected.status, expected.slug, expected.members), (
            response_status,
            body,
            expected,
        )
    else:
        assert response_status == success, (response_status, body, expected)
        assert body == expected, (body, expected)


def outcome(model: LateAccount, sent: Sent) -> JSON | Refused:
    late = sent.body["timestamp"] < model.clock
    try:
        answer = sent.expected(model)
    except Refused as refused:
        event(f"{sent.op} refused: {refused.status} {refused.slug}")
        return refused
    event(f"{sent.op} accepted, {'late' if late else 'in order'}")
    if answer["restated"]:
        event("restated later entries")
    return answer


class LateApiMachine(RuleBasedStateMachine):
    harness: ClassVar[Harness]

    def __init__(self) -> None:
        super().__init__()
        self.account_id = f"hyp-{next(self.harness.accounts)}"
        self.model = LateAccount(self.account_id, WINDOW)
        self.keys = 0
        self.replayable: list[tuple[Sent, int, JSON]] = []  # keyed writes accepted

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self.harness.run(self.harness.client.request(method, url, **kwargs))

    # -- drawing writes ------------------------------------------------------------------

    def draw_write(self, data: st.DataObject, timestamp: int) -> Sent:
        base = f"/v1/accounts/{self.account_id}"
        kinds = ["grant", "grant", "consume", "consume"] + ["void"] * self.model.exists
        kind = data.draw(st.sampled_from(kinds), label="kind")
        amount = data.draw(st.integers(1, 40), label="amount")
        key = None
        if data.draw(st.integers(0, 2), label="keyed") == 0:
            self.keys += 1
            key = f"{self.account_id}-k{self.keys}"
        if kind == "grant":
            expiry = timestamp + data.draw(st.integers(1, WINDOW + 4), label="lifetime")
            resources = data.draw(st.sampled_from(CLASS_SETS), label="resources")
            body: JSON = {"amount": amount, "timestamp": timestamp, "expiry": expiry}
            if resources is not None:
                body["resources"] = resources
            return Sent(
                f"{base}/grants", body, key, "grant",
                lambda m: m.grant(amount, timestamp, expiry, resources),
            )  # fmt: skip
        if kind == "consume":
            resource = data.draw(st.sampled_from(RESOURCES), label="resource")
            body = {"amount": amount, "timestamp": timestamp}
            if resource is not None:
                body["resource"] = resource
            return Sent(
                f"{base}/consumptions", body, key, "consume",
                lambda m: m.consume(amount, timestamp, resource),
            )  # fmt: skip
        # Mostly a grant made at or before the void's time; sometimes any grant: one not yet
        # made (404), one voided (409), or one made after the void's time (422).
        made = [g for g, w in self.model.grants.items() if w.timestamp <= timestamp]
        if made and data.draw(st.integers(0, 3), label="any grant") > 0:
            grant_id = data.draw(st.sampled_from(made), label="grant")
        else:
            grant_id = data.draw(st.integers(1, self.model.next_grant_id), label="grant")
        return Sent(
            f"{base}/grants/{grant_id}/void", {"timestamp": timestamp}, key, "void",
            lambda m: m.void(grant_id, timestamp),
        )  # fmt: skip

    def draw_timestamp(self, data: st.DataObject) -> int:
        """In order, late (from the watermark to the clock) or too late."""
        m = self.model
        choices = (
            ["in order"] + ["late"] * (m.clock > m.watermark) + ["too late"] * (m.watermark > 0)
        )
        when = data.draw(st.sampled_from(choices), label="when")
        if when == "in order":
            return m.clock + data.draw(st.integers(0, 2), label="step")
        if when == "late":
            return data.draw(st.integers(m.watermark, m.clock - 1), label="late timestamp")
        return data.draw(st.integers(max(0, m.watermark - 4), m.watermark - 1), label="too late")

    def send(self, sent: Sent) -> None:
        headers = {} if sent.key is None else {"Idempotency-Key": sent.key}
        r = self.request("POST", sent.path, json=sent.body, headers=headers)
        expected = outcome(self.model, sent)
        success = 201 if sent.op == "grant" else 200
        expect(r.status_code, r.json(), success, expected)
        if sent.key is not None and not isinstance(expected, Refused):
            self.replayable.append((sent, r.status_code, r.json()))

    # -- rules ---------------------------------------------------------------------------

    @rule(data=st.data())
    def write(self, data: st.DataObject) -> None:
        self.send(self.draw_write(data, self.draw_timestamp(data)))

    @precondition(lambda self: self.model.exists)
    @rule(data=st.data(), atomic=st.booleans(), size=st.integers(2, 4))
    def batch(self, data: st.DataObject, atomic: bool, size: int) -> None:
        # Timestamps drawn against the model before the batch; the batch sees itself.
        sent = [self.draw_write(data, self.draw_timestamp(data)) for _ in range(size)]
        operations = [{"op": s.op, "account_id": self.account_id, **s.body} for s in sent]
        for s, operation in zip(sent, operations, strict=True):
            if s.op == "void":
                operation["grant_id"] = int(s.path.rsplit("/", 2)[-2])
        r = self.request("POST", "/v1/batch", json={"atomic": atomic, "operations": operations})
        trial = self.model.copy()
        results = [outcome(trial, s) for s in sent]
        failed = next((i for i, x in enumerate(results) if isinstance(x, Refused)), None)
        if atomic and failed is not None:
            refused = results[failed]
            assert isinstance(refused, Refused)
            problem = r.json()
            assert r.status_code == refused.status, r.text
            assert problem["operation_index"] == failed, r.text
            expect(refused.status, problem["operation_problem"], 0, refused)
            return  # nothing applied: the model stays as it was
        assert r.status_code == 200, r.text
        body = r.json()
        assert len(body["results"]) == size, r.text
        for s, got, want in zip(sent, body["results"], results, strict=True):
            assert got["op"] == s.op
            expect(got["status"], got["body"], 201 if s.op == "grant" else 200, want)
        self.model = trial

    @precondition(lambda self: self.model.exists)
    @rule(window=st.sampled_from([None, 0, 1, 3, 6, 15]))
    def set_window(self, window: int | None) -> None:
        r = self.request(
            "PUT", f"/v1/accounts/{self.account_id}/settings", json={"lateness_window": window}
        )
        assert r.status_code == 200, r.text
        assert r.json() == self.model.set_window(window, WINDOW)

    @precondition(lambda self: self.replayable)
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        sent, status, first = data.draw(st.sampled_from(self.replayable), label="retry")
        assert sent.key is not None
        r = self.request("POST", sent.path, json=sent.body, headers={"Idempotency-Key": sent.key})
        assert (r.status_code, r.json()) == (status, first), (r.text, first)
        assert r.headers["Idempotent-Replayed"] == "true"

    @precondition(lambda self: self.model.exists)
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        m = self.model
        base = f"/v1/accounts/{self.account_id}"
        resource = data.draw(st.sampled_from([None, *CLASSES]), label="resource")
        params: dict[str, str] = {} if resource is None else {"resource": resource}
        what = data.draw(st.sampled_from(["balance", "balance", "grants", "settings", "pages"]))
        if what == "balance":
            at = data.draw(
                st.none() | st.integers(max(0, m.watermark - 4), m.clock + 4), label="at"
            )
            if at is not None:
                params["timestamp"] = str(at)
            self.expect_get(f"{base}/balance", params, m.read_balance(at, resource))
        elif what == "grants":
            self.expect_get(f"{base}/grants", params, m.live_grants(resource))
        elif what == "settings":
            self.expect_get(f"{base}/settings", {}, m.settings())
        else:
            limit = data.draw(st.integers(1, 4), label="page")
            assert self.ledger(limit) == m.entries

    def expect_get(self, url: str, params: dict[str, str], expected: JSON) -> None:
        r = self.request("GET", url, params=params)
        assert r.status_code == 200, (url, params, r.text)
        assert r.json() == expected, (url, params, r.text, expected)

    def ledger(self, limit: int) -> list[JSON]:
        entries: list[JSON] = []
        after = 0
        while True:
            r = self.request(
                "GET",
                f"/v1/accounts/{self.account_id}/ledger",
                params={"after": after, "limit": limit},
            )
            assert r.status_code == 200, r.text
            page = r.json()
            entries.extend(page["entries"])
            if page["next_after"] is None:
                return entries
            after = page["next_after"]

    @invariant()
    def the_ledger_is_the_replay(self) -> None:
        if not self.model.exists:
            r = self.request("GET", f"/v1/accounts/{self.account_id}/ledger")
            assert r.status_code == 404, r.text
            return
        assert self.ledger(1000) == self.model.entries


def test_late_writes_over_http_are_the_model(
    backend: str, tmp_path: Path, new_database_url: Callable[[], str | None]
) -> None:
    app = create_app(
        Settings(
            storage=backend,
            data_dir=tmp_path / "data",
            database_url=new_database_url(),
            lateness_window=WINDOW,
        )
    )
    loop = asyncio.new_event_loop()
    stack = contextlib.AsyncExitStack()
    try:
        client = loop.run_until_complete(stack.enter_async_context(running(app)))
        LateApiMachine.harness = Harness(loop, client, itertools.count(1))
        run_state_machine_as_test(LateApiMachine, settings=machine_settings(backend))
    finally:
        loop.run_until_complete(stack.aclose())
        loop.close()
