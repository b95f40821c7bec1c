"""The three backends against each other: the same random sequence of requests, sent in
process (``httpx.AsyncClient(transport=ASGITransport(app))``) to the app on memory, on SQLite
(a real file) and on PostgreSQL (the session's throwaway server), must get the same answers,
byte for byte (less a problem document's ``request_id``), status and headers that describe
the ledger (``Location``, ``Idempotent-Replayed``).

The sequences mix what is rarely exercised together: late writes (inside the lateness
window) before voids, class-scoped grants and consumptions and expirations; voids of grants a
late write then touches; single endpoints, ``POST /v1/batch`` (atomic or not) and
``POST /v1/events`` (with ids, some repeated); account windows lowered and raised; and reads
between them (as-of and projected balances in total and per class, the live grants, each
grant, the settings, ledger pages from random cursors, the forecast, the accounts list).
The SQLite and PostgreSQL apps are closed and reopened on the same database at random points
(through ``create_app`` and its lifespan); the memory app never is. PostgreSQL runs two apps
on one database, each request sent to either (what one wrote, the other must answer from).
The service's window is 8, 30 (longer than most grants live: expirations inside it) or 0
(late writes only where a PUT gives the account a window), by seed. Reads include the
account page (``/ui/accounts/{id}``), compared across backends byte for byte.

Besides agreeing, the memory app's answers must be SPEC's: every write, refusal, batch
result, stream line (duplicates and reused ids too) and read (balances, live grants,
settings, getGrant, ledger pages from any cursor) is checked against the late model
(``tests/support/late_model.py``), extended with grant labels and with the bound on
provisional writes (``BoundedAccount``). Odd seeds lower that bound to 4, so the watermark
moves early; seeds 2, 5, ... store checkpoints and replay marks every few writes, so as-of
reads before the watermark go through them (also after restarts). Every read is sent twice
with a snapshot of the account around it, on every backend: a read that changes anything,
or answers differently the second time, is a defect, and so is any 5xx.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.domain.timeline import TimelineLimits
from app.main import create_app
from app.service import journal
from app.service.limits import Limits
from app.settings import Settings
from tests.support.app_runner import running
from tests.support.late_model import LateAccount, Refused

JSON = dict[str, Any]
WINDOW = 8
CLASSES = ("h100", "a100")
CLASS_SETS: list[list[str] | None] = [None, None, ["h100"], ["a100"], ["a100", "h100"]]
RESOURCES: list[str | None] = [None, None, "h100", "a100"]
NDJSON = "application/x-ndjson"
# Fixed seeds by default; BACKENDS_DIFF_SEEDS=A:B and BACKENDS_DIFF_STEPS=N run
# others, longer, when hunting.
_FIRST, _, _END = os.environ.get("BACKENDS_DIFF_SEEDS", "0:6").partition(":")
SEEDS = range(int(_FIRST), int(_END))
STEPS = int(os.environ.get("BACKENDS_DIFF_STEPS", "100"))


class BoundedSettings(Settings):
    """The settings with SPEC section 6's bound on provisional writes, which no variable
    sets, lowered so that a short sequence reaches it."""

    max_provisional: int = Limits().max_provisional_writes

    def limits(self) -> Limits:
        return dataclasses.replace(super().limits(), max_provisional_writes=self.max_provisional)


def scrub(value: Any) -> Any:
    """``value`` without any ``request_id`` member (it names the request, not the state)."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if k != "request_id"}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def seen(response: httpx.Response) -> tuple[Any, ...]:
    """What an answer says, to compare across backends: status, the headers that describe
    the ledger, and the body (bytes when it carries no request id)."""
    content_type = response.headers.get("content-type", "")
    if content_type.startswith(NDJSON):
        body: Any = [scrub(json.loads(line)) for line in response.text.splitlines()]
    elif "request_id" in response.text:
        body = scrub(response.json())
    else:
        body = response.content
    return (
        response.status_code,
        content_type,
        response.headers.get("location"),
        response.headers.get("idempotent-replayed"),
        body,
    )


class BoundedAccount(LateAccount):
    """The late model with SPEC section 6's bound: past ``bound`` provisional writes (those
    after the watermark), the oldest become final early: the watermark moves to the newest
    of them."""

    bound: int = Limits().max_provisional_writes

    def copy(self) -> BoundedAccount:
        base = super().copy()
        other = BoundedAccount(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
        other.bound = self.bound
        return other

    def _accept(self, draft: Any) -> JSON:
        body = super()._accept(draft)
        provisional = [w.timestamp for w in self.writes if w.timestamp > self.watermark]
        excess = len(provisional) - self.bound
        if excess > 0:
            self.watermark = provisional[excess - 1]
        body["watermark"] = self.watermark
        return body


def refused_as(status: int, body: Any, expected: Refused) -> bool:
    slug = str(body.get("type", "")).rsplit(":", 1)[-1] if isinstance(body, dict) else ""
    got = {k: body.get(k) for k in expected.members} if isinstance(body, dict) else {}
    return (status, slug, got) == (expected.status, expected.slug, expected.members)


class Oracle:
    """SPEC's answers, from the late model (``tests/support/late_model.py``), one per
    account, plus what the model leaves out: grant labels, getGrant, ledger pages from a
    cursor, and stream ids."""

    def __init__(self, window: int, bound: int) -> None:
        self.service_window = window
        self.bound = bound
        self.models: dict[str, LateAccount] = {}
        self.labels: dict[tuple[str, int], tuple[Any, Any]] = {}
        self.events: dict[tuple[str, str], tuple[JSON, int, int | None]] = {}

    def model(self, models: dict[str, LateAccount], account_id: str) -> LateAccount:
        if account_id not in models:
            model = BoundedAccount(account_id, self.service_window)
            model.bound = self.bound
            models[account_id] = model
        return models[account_id]

    def apply(self, models: dict[str, LateAccount], op: JSON) -> JSON | Refused:
        """``op`` (a batch operation) on ``models``: the answer, or the refusal."""
        if op["op"] in ("balance", "void") and op["account_id"] not in models:
            return Refused(404, "account-not-found")
        m = self.model(models, op["account_id"])
        if op["op"] == "balance":
            return m.read_balance(op.get("timestamp"), op.get("resource"))
        try:
            if op["op"] == "grant":
                answer = m.grant(op["amount"], op["timestamp"], op["expiry"], op.get("resources"))
                label = (op.get("name"), op.get("metadata"))
                self.labels[(op["account_id"], answer["grant_id"])] = label
                answer["name"], answer["metadata"] = label
            elif op["op"] == "consume":
                answer = m.consume(op["amount"], op["timestamp"], op.get("resource"))
            else:
                answer = m.void(op["grant_id"], op["timestamp"])
        except Refused as refused:
            if not m.exists:
                del models[op["account_id"]]
            return refused
        return answer

    def check(self, op: JSON, status: int, body: Any, expected: JSON | Refused) -> None:
        if isinstance(expected, Refused):
            assert refused_as(status, body, expected), (op, status, body, expected)
        else:
            success = 201 if op["op"] == "grant" else 200
            assert (status, body) == (success, expected), (op, status, body, expected)

    def write(self, op: JSON, status: int, body: Any) -> None:
        self.check(op, status, body, self.apply(self.models, op))

    def batch(self, ops: list[JSON], atomic: bool, status: int, body: Any) -> None:
        trial = {a: m.copy() for a, m in self.models.items()}
        labels = dict(self.labels)
        expected = [self.apply(trial, op) for op in ops]
        failed = next((i for i, x in enumerate(expected) if isinstance(x, Refused)), None)
        if atomic and failed is not None:
            refused = expected[failed]
            assert isinstance(refused, Refused)
            assert (status, body.get("operation_index")) == (refused.status, failed), body
            assert refused_as(refused.status, body["operation_problem"], refused), body
            self.labels = labels
            return
        assert status == 200, body
        for op, result, want in zip(ops, body["results"], expected, strict=True):
            if op["op"] == "balance" and "cannot be answered here" in str(result["body"]):
                continue  # README: a time the batch's own late writes made final is 422
            self.check(op, result["status"], result["body"], want)
        self.models = trial

    def event(self, line: JSON, status: int, body: Any) -> None:
        op = {k: v for k, v in line.items() if k != "id"}
        key = (line["account_id"], line["id"])
        if key in self.events:
            first, sequence, grant_id = self.events[key]
            if first == op:
                duplicate: JSON = {"account_id": line["account_id"], "sequence": sequence}
                if grant_id is not None:
                    duplicate["grant_id"] = grant_id
                assert (status, body) == (200, duplicate), (line, status, body)
            else:
                assert (status, body["type"].rsplit(":", 1)[-1]) == (422, "event-id-reused")
            return
        expected = self.apply(self.models, op)
        self.check(op, status, body, expected)
        if not isinstance(expected, Refused):
            grant_id = expected.get("grant_id")
            self.events[key] = (op, expected["sequence"], grant_id)

    def window(self, account_id: str, window: int | None, status: int, body: Any) -> None:
        m = self.models.get(account_id)
        if m is None:
            assert status == 404, body
            return
        assert (status, body) == (200, m.set_window(window, self.service_window))

    # -- reads ----------------------------------------------------------------------------

    def entries(self, m: LateAccount) -> list[JSON]:
        out = []
        for e in m.entries:
            if e["kind"] == "grant":
                e["name"], e["metadata"] = self.labels[(m.account_id, e["grant_id"])]
            out.append(e)
        return out

    def read(self, path: str, params: dict[str, str]) -> tuple[int, Any] | None:
        """What ``GET path?params`` must answer: (status, body or problem slug); None: not
        modelled."""
        parts = path.split("/")
        if len(parts) < 5 or parts[1:3] != ["v1", "accounts"]:
            return None
        m = self.models.get(parts[3])
        if m is None:
            return 404, "account-not-found"
        tail = parts[4:]
        resource = params.get("resource")
        if tail == ["balance"]:
            at = params.get("timestamp")
            return 200, m.read_balance(None if at is None else int(at), resource)
        if tail == ["settings"]:
            return 200, m.settings()
        if tail == ["grants"]:
            live = m.live_grants(resource)
            for g in live["grants"]:
                g["name"], g["metadata"] = self.labels[(m.account_id, g["grant_id"])]
            return 200, live
        if len(tail) == 2 and tail[0] == "grants":
            return self.grant(m, int(tail[1]))
        if tail == ["ledger"]:
            return self.page(m, int(params.get("after", "0")), int(params.get("limit", "100")))
        return None

    def grant(self, m: LateAccount, grant_id: int) -> tuple[int, Any]:
        entry = next(
            (e for e in self.entries(m) if e["kind"] == "grant" and e["grant_id"] == grant_id),
            None,
        )
        if entry is None:
            return 404, "grant-not-found"
        held = [h.remaining for h in m.states[-1].held if h.grant_id == grant_id]
        return 200, {
            "account_id": m.account_id,
            "grant_id": grant_id,
            "sequence": entry["sequence"],
            "timestamp": entry["timestamp"],
            "amount": entry["amount"],
            "expiry": entry["expiry"],
            "settled_debt": entry["settled_debt"],
            "retained": entry["retained"],
            "remaining": held[0] if held else 0,
            "resources": entry["resources"],
            "name": entry["name"],
            "metadata": entry["metadata"],
        }

    def page(self, m: LateAccount, after: int, limit: int) -> tuple[int, Any]:
        entries = self.entries(m)
        if after:
            at = next((i for i, e in enumerate(entries) if e["sequence"] == after), None)
            if at is None:
                if after < m.next_sequence:
                    return 409, "cursor-gone"
                entries = []
            else:
                entries = entries[at + 1 :]
        page = entries[:limit]
        more = len(entries) > limit
        return 200, {
            "account_id": m.account_id,
            "entries": page,
            "next_after": page[-1]["sequence"] if more else None,
        }


@dataclass
class Backend:
    """One backend: ``processes`` apps on the same storage (PostgreSQL serves several), each
    request sent to one of them, drawn by ``rng``."""

    name: str
    settings: Settings
    processes: int = 1
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    stacks: list[contextlib.AsyncExitStack] = field(default_factory=list)
    clients: list[httpx.AsyncClient] = field(default_factory=list)

    async def start(self) -> None:
        for _ in range(self.processes):
            await self._start_one()

    async def _start_one(self) -> None:
        stack = contextlib.AsyncExitStack()
        self.clients.append(await stack.enter_async_context(running(create_app(self.settings))))
        self.stacks.append(stack)

    @property
    def client(self) -> httpx.AsyncClient:
        return self.clients[self.rng.randrange(len(self.clients))]

    async def stop(self) -> None:
        while self.stacks:
            await self.stacks.pop().aclose()
        self.clients.clear()

    async def restart(self) -> None:
        """Close one of its apps and start it again on the same storage."""
        index = self.rng.randrange(len(self.stacks))
        await self.stacks.pop(index).aclose()
        self.clients.pop(index)
        await self._start_one()


@dataclass
class Account:
    account_id: str
    clock: int = -1
    watermark: int = 0
    grants: int = 0  # grant ids issued so far (as the memory app answered)
    events: list[str] = field(default_factory=list)


class Differ:
    def __init__(
        self,
        backends: list[Backend],
        rng: random.Random,
        log: list[str],
        oracle: Oracle | None,
    ) -> None:
        self.backends = backends
        self.oracle = oracle
        self.rng = rng
        self.log = log
        self.accounts = [Account(f"acct-{i}") for i in range(3)]
        # Keyed writes: (path, key, body, the operations, atomic)
        self.keys: list[tuple[str, str, JSON, list[JSON], bool]] = []
        self.key_count = 0
        self.event_count = 0
        self.sent_lines: list[JSON] = []

    async def send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        self.log.append(f"{method} {path} {kwargs!r}")
        answers: list[httpx.Response] = []
        for backend in self.backends:
            answers.append(await backend.client.request(method, path, **kwargs))
        first = seen(answers[0])
        assert first[0] < 500, ("5xx", answers[0].text, "\n".join(self.log))
        for backend, answer in zip(self.backends[1:], answers[1:], strict=True):
            assert seen(answer) == first, (
                backend.name,
                seen(answer),
                first,
                "\n".join(self.log[-40:]),
            )
        if method == "GET" and self.oracle is not None:
            self.judge_read(path, kwargs.get("params", {}), answers[0])
        return answers[0]

    def judge_read(self, path: str, params: dict[str, str], answer: httpx.Response) -> None:
        assert self.oracle is not None
        expected = self.oracle.read(path, params)
        if expected is None:
            return
        body = answer.json()
        if answer.status_code >= 400:
            body = body["type"].rsplit(":", 1)[-1]
        assert (answer.status_code, body) == expected, (
            path,
            params,
            answer.status_code,
            body,
            expected,
            "\n".join(self.log[-40:]),
        )

    def judged(self, r: httpx.Response) -> bool:
        """Whether the oracle judges this write's answer: not a replay, not a key reused."""
        if self.oracle is None or r.headers.get("idempotent-replayed") == "true":
            return False
        return not r.text.count("idempotency-key-reused")

    # -- drawing ------------------------------------------------------------------------

    def timestamp(self, account: Account) -> int:
        r = self.rng.random()
        if account.clock < 0:
            return self.rng.randint(0, 5)
        if r < 0.45 or account.clock <= account.watermark:
            return account.clock + self.rng.randint(0, 3)
        if r < 0.93:
            return self.rng.randint(account.watermark, account.clock - 1)
        return max(0, account.watermark - self.rng.randint(1, 3))

    def operation(self, account: Account) -> JSON:
        """A write as a batch operation (``op``, ``account_id`` and its body)."""
        t = self.timestamp(account)
        kinds = ["grant", "grant", "consume", "consume", "consume"]
        kinds += ["void", "void"] if account.grants else []
        kind = self.rng.choice(kinds)
        if kind == "grant":
            body: JSON = {
                "op": "grant",
                "account_id": account.account_id,
                "amount": self.rng.randint(1, 40),
                "timestamp": t,
                "expiry": t + self.rng.randint(1, WINDOW + 6),
            }
            resources = self.rng.choice(CLASS_SETS)
            if resources is not None:
                body["resources"] = resources
            if self.rng.random() < 0.2:
                body["name"] = f"grant at {t}"
                body["metadata"] = {"k": str(self.rng.randint(0, 9))}
            return body
        if kind == "consume":
            body = {
                "op": "consume",
                "account_id": account.account_id,
                "amount": self.rng.randint(1, 40),
                "timestamp": t,
            }
            resource = self.rng.choice(RESOURCES)
            if resource is not None:
                body["resource"] = resource
            return body
        return {
            "op": "void",
            "account_id": account.account_id,
            "grant_id": self.rng.randint(1, account.grants + 1),
            "timestamp": t,
        }

    def note(self, account: Account, op: JSON, status: int, body: Any) -> None:
        """Follow the account's clock, watermark and grant ids from the memory app's answer."""
        if status >= 300 or not isinstance(body, dict) or "duplicate" in body:
            return
        if "watermark" in body:
            account.watermark = body["watermark"]
        account.clock = max(account.clock, op["timestamp"])
        if op["op"] == "grant":
            account.grants = max(account.grants, body["grant_id"])

    # -- writes -------------------------------------------------------------------------

    async def single(self) -> None:
        account = self.rng.choice(self.accounts)
        op = self.operation(account)
        base = f"/v1/accounts/{account.account_id}"
        body = {k: v for k, v in op.items() if k not in ("op", "account_id", "grant_id")}
        path = {
            "grant": f"{base}/grants",
            "consume": f"{base}/consumptions",
            "void": f"{base}/grants/{op.get('grant_id')}/void",
        }[op["op"]]
        headers: dict[str, str] = {}
        params = {}
        if op["op"] == "consume" and self.rng.random() < 0.1:
            params["dry_run"] = "true"
        elif self.rng.random() < 0.3:
            self.key_count += 1
            headers["Idempotency-Key"] = f"k{self.key_count}"
            self.keys.append((path, headers["Idempotency-Key"], body, [op], False))
        r = await self.send("POST", path, json=body, headers=headers, params=params)
        if params:
            if self.oracle is not None:
                trial = {a: m.copy() for a, m in self.oracle.models.items()}
                labels = dict(self.oracle.labels)
                expected = self.oracle.apply(trial, op)
                self.oracle.labels = labels
                if not isinstance(expected, Refused):
                    expected["dry_run"] = True
                self.oracle.check(op, r.status_code, r.json(), expected)
            return
        self.note(account, op, r.status_code, r.json())
        if self.judged(r):
            assert self.oracle is not None
            self.oracle.write(op, r.status_code, r.json())

    async def retry(self) -> None:
        if not self.keys:
            return
        path, key, body, ops, atomic = self.rng.choice(self.keys)
        if self.rng.random() < 0.2 and path != "/v1/batch":  # the key for another request
            body = {**body, "timestamp": body["timestamp"] + 1}
            ops = [{**ops[0], "timestamp": body["timestamp"]}]
        r = await self.send("POST", path, json=body, headers={"Idempotency-Key": key})
        if self.judged(r):
            assert self.oracle is not None
            if path == "/v1/batch":
                self.oracle.batch(ops, atomic, r.status_code, r.json())
            else:
                self.oracle.write(ops[0], r.status_code, r.json())

    async def batch(self) -> None:
        ops = [
            self.operation(self.rng.choice(self.accounts)) for _ in range(self.rng.randint(1, 5))
        ]
        if self.rng.random() < 0.15:
            account = self.rng.choice(self.accounts)
            read: JSON = {"op": "balance", "account_id": account.account_id}
            if account.clock >= 0 and self.rng.random() < 0.7:
                read["timestamp"] = self.rng.randint(
                    max(0, account.watermark - 2), account.clock + 3
                )
            ops.insert(self.rng.randint(0, len(ops)), read)
        atomic = self.rng.random() < 0.4
        headers: dict[str, str] = {}
        body = {"atomic": atomic, "operations": ops}
        if self.rng.random() < 0.3:
            self.key_count += 1
            headers["Idempotency-Key"] = f"k{self.key_count}"
            self.keys.append(("/v1/batch", headers["Idempotency-Key"], body, ops, atomic))
        r = await self.send("POST", "/v1/batch", json=body, headers=headers)
        if self.judged(r):
            assert self.oracle is not None
            self.oracle.batch(ops, atomic, r.status_code, r.json())
        if r.status_code != 200:
            return
        for op, result in zip(ops, r.json()["results"], strict=True):
            if op["op"] != "balance":
                account = next(a for a in self.accounts if a.account_id == op["account_id"])
                self.note(account, op, result["status"], result["body"])

    async def events(self) -> None:
        lines: list[JSON] = []
        for _ in range(self.rng.randint(1, 6)):
            account = self.rng.choice(self.accounts)
            if self.sent_lines and self.rng.random() < 0.15:
                # A line sent before, as it was: a duplicate (or, in the same request, a
                # line the chunking must keep apart).
                lines.append(self.rng.choice(self.sent_lines))
                continue
            if account.events and self.rng.random() < 0.05:
                event_id = self.rng.choice(account.events)  # an id reused for another line
            else:
                self.event_count += 1
                event_id = f"e{self.event_count}"
                account.events.append(event_id)
            lines.append({"id": event_id, **self.operation(account)})
        self.sent_lines += lines
        body = b"".join(json.dumps(line).encode() + b"\n" for line in lines)
        r = await self.send("POST", "/v1/events", content=body, headers={"content-type": NDJSON})
        if r.status_code != 200:
            return
        for result in [json.loads(x) for x in r.text.splitlines()]:
            line = lines[result["line"] - 1]
            account = next(a for a in self.accounts if a.account_id == line["account_id"])
            self.note(account, line, result["status"], result["body"])
            if self.oracle is not None:
                self.oracle.event(line, result["status"], result["body"])

    async def window(self) -> None:
        account = self.rng.choice(self.accounts)
        window = self.rng.choice([None, 0, 2, 5, 12])
        r = await self.send(
            "PUT",
            f"/v1/accounts/{account.account_id}/settings",
            json={"lateness_window": window},
        )
        if r.status_code == 200:
            account.watermark = r.json()["watermark"]
        if self.oracle is not None:
            self.oracle.window(account.account_id, window, r.status_code, r.json())

    # -- reads --------------------------------------------------------------------------

    async def state(self, account: Account) -> list[Any]:
        """Everything observable about an account, on every backend (compared)."""
        base = f"/v1/accounts/{account.account_id}"
        out: list[Any] = []
        for path, params in [
            (f"{base}/balance", {}),
            (f"{base}/ledger", {"limit": "1000"}),
            (f"{base}/grants", {}),
            (f"{base}/settings", {}),
            ("/v1/accounts", {}),
            (f"/ui/accounts/{account.account_id}", {}),
            *[(f"{base}/grants/{g}", {}) for g in range(1, account.grants + 1)],
        ]:
            out.append(seen(await self.send("GET", path, params=params)))
        return out

    async def read(self) -> None:
        account = self.rng.choice(self.accounts)
        base = f"/v1/accounts/{account.account_id}"
        what = self.rng.choice(["balance", "balance", "grants", "grant", "ledger", "forecast"])
        params: dict[str, str] = {}
        resource = self.rng.choice([None, None, *CLASSES])
        if what == "balance":
            path = f"{base}/balance"
            if self.rng.random() < 0.8 and account.clock >= 0:
                low = 0 if self.rng.random() < 0.4 else max(0, account.watermark - 4)
                params["timestamp"] = str(self.rng.randint(low, account.clock + 6))
            if resource is not None:
                params["resource"] = resource
        elif what == "grants":
            path = f"{base}/grants"
            if resource is not None:
                params["resource"] = resource
        elif what == "grant":
            path = f"{base}/grants/{self.rng.randint(1, account.grants + 1)}"
        elif what == "ledger":
            path = f"{base}/ledger"
            params["after"] = str(self.rng.randint(0, 3 * account.grants + 3))
            params["limit"] = str(self.rng.randint(1, 4))
        else:
            path = f"{base}/forecast"
            params["burn_rate"] = str(self.rng.randint(1, 9))
            if resource is not None:
                params["resource"] = resource
        before = await self.state(account)
        first = seen(await self.send("GET", path, params=params))
        again = seen(await self.send("GET", path, params=params))
        assert first == again, (path, params, first, again)
        assert await self.state(account) == before, (path, params)

    async def page_through(self) -> None:
        """The whole ledger in small pages equals it in one page."""
        account = self.rng.choice(self.accounts)
        base = f"/v1/accounts/{account.account_id}/ledger"
        whole = await self.send("GET", base, params={"limit": "1000"})
        if whole.status_code != 200:
            return
        entries: list[JSON] = []
        after = 0
        limit = str(self.rng.randint(1, 3))
        while True:
            page = await self.send("GET", base, params={"after": str(after), "limit": limit})
            assert page.status_code == 200, page.text
            entries += page.json()["entries"]
            if page.json()["next_after"] is None:
                break
            after = page.json()["next_after"]
        assert entries == whole.json()["entries"]

    async def dry_run(self) -> None:
        """A dry run on an account never written: it answers and creates nothing."""
        body: JSON = {"amount": self.rng.randint(1, 9), "timestamp": self.rng.randint(0, 50)}
        if self.rng.random() < 0.5:
            body["resource"] = self.rng.choice(CLASSES)
        await self.send(
            "POST", "/v1/accounts/never/consumptions", json=body, params={"dry_run": "true"}
        )
        r = await self.send("GET", "/v1/accounts/never/balance")
        assert r.status_code == 404, r.text

    async def accounts_list(self) -> None:
        await self.send("GET", "/v1/accounts", params={"limit": str(self.rng.randint(1, 4))})

    async def restart(self) -> None:
        durable = [b for b in self.backends if b.name != "memory"]
        backend = self.rng.choice(durable)
        self.log.append(f"-- restart {backend.name}")
        await backend.restart()
        for account in self.accounts:
            await self.state(account)

    async def run(self, steps: int) -> None:
        actions: list[tuple[Callable[[], Any], int]] = [
            (self.single, 30),
            (self.batch, 10),
            (self.events, 10),
            (self.retry, 4),
            (self.window, 3),
            (self.read, 25),
            (self.page_through, 4),
            (self.accounts_list, 1),
            (self.dry_run, 1),
            (self.restart, 4),
        ]
        choices = [a for a, _ in actions]
        weights = [w for _, w in actions]
        for _ in range(steps):
            await self.rng.choices(choices, weights)[0]()
        for account in self.accounts:
            await self.state(account)
        await self.restart()
        for account in self.accounts:
            await self.state(account)


def small_spacings(max_live_grants: int, max_provisional: int) -> TimelineLimits:
    """Stored checkpoints and replay marks every few writes (not every 256 and 64), so that
    short sequences read the past through them."""
    return TimelineLimits(
        max_provisional=max_provisional,
        max_live_grants=max_live_grants,
        checkpoint_spacing_min=3,
        replay_spacing_min=2,
    )


@pytest.mark.parametrize("seed", SEEDS)
async def test_backends_answer_alike(
    seed: int, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if seed % 3 == 2:
        monkeypatch.setattr(journal, "_shared_timeline_limits", small_spacings)
    pool = request.getfixturevalue("postgres_databases")
    database_url = pool.take()
    bound = 4 if seed % 2 else Limits().max_provisional_writes
    # 0: late writes only where a PUT allows them; 30: longer than most grants live
    window = [WINDOW, 30, WINDOW, 0][seed % 4]
    common: dict[str, Any] = {"lateness_window": window, "max_provisional": bound}
    backends = [
        Backend("memory", BoundedSettings(storage="memory", data_dir=tmp_path / "m", **common)),
        Backend("sqlite", BoundedSettings(storage="sqlite", data_dir=tmp_path / "s", **common)),
        Backend(
            "postgres",
            BoundedSettings(
                storage="postgres", data_dir=tmp_path / "p", database_url=database_url, **common
            ),
            processes=2,  # two apps on one database, each request to either
            rng=random.Random(seed),
        ),
    ]
    log: list[str] = []
    try:
        for backend in backends:
            await backend.start()
        oracle = Oracle(window, bound)
        await Differ(backends, random.Random(seed), log, oracle).run(STEPS)
    finally:
        for backend in backends:
            await backend.stop()
        pool.give_back(database_url)
