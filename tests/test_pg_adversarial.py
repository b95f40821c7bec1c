"""Several processes on one PostgreSQL database, every write path at once (adversarial).

Two ``gpu-credits serve`` processes share one fresh database. Asyncio clients send seeded
random traffic at both over a few accounts (and now and then one that does not exist
yet), so that everything collides: single grants, consumptions and voids (each with an
``Idempotency-Key``; voids of unknown grants and before their grant too), ``POST
/v1/batch`` (atomic or not, operations over several accounts), ``POST /v1/events`` (NDJSON
lines with ids), and now and then the very same request sent to both processes at once
(one key, or one event id). Scenarios (``SCENARIOS``): timestamps in order per account
(window 0); late writes within a window of 20, some too late, with GPU classes, while one
process is SIGKILLed and restarted; the same while PostgreSQL crashes (``pg_ctl stop -m
immediate``) and comes back; a window so wide that everything stays provisional and lines
land far behind, in streams of up to 60 lines (chunks cut by replay cost); a cache of
trackers so small that every unit of work evicts and reloads; long streams (up to 200
lines), sent through both processes at once now and then, while the processes are killed.
Batches carry balance reads too (at the clock, as of a time, projected; per class).

An unanswered request (transport error, 503) may or may not have applied: it is resent
with the same key or ids until it is answered, which settles it (the stored answer, a
``duplicate`` line, or a fresh application). Then, per account:

- every operation acknowledged (2xx) has exactly one ``sequence``, and no two operations
  share one; the acknowledged writes in ``sequence`` order (arrival) through the late model
  (``tests/support/late_model.py``) give every full answer exactly, and a duplicate's
  sequence and grant id; a refusal is 404, 409 or 422, never anything else;
- a read in a batch answers what the model gives after some number of acknowledged writes
  between its batch's own writes to the account before and after it (the batch holds the
  account throughout), or 422 ``class_as_of`` where the README says so;
- the ledger read through both processes is the model's, entry for entry; so are the
  balance, the live grants, and balance reads at times from 0 past the clock (as of a
  time, final or not, projected), in total and per class; an account no acknowledged
  write made is 404 on both; the account list is the same through both, with exactly the
  accounts acknowledged writes made, at the model's totals;
- two answers to one request sent twice are the same, and a replay later through either
  process is byte for byte the first answer, marked ``Idempotent-Replayed``.

A second test sends the same writes to two accounts, one always through process 0, the
other through either process at random (its trackers reloaded from the database again and
again), past the bound of 10,000 provisional writes, and compares every answer, both
ledgers and the reads byte for byte.

``PG_ADVERSARIAL_SEED`` and ``PG_ADVERSARIAL_SCALE`` (a factor on the number of requests)
hunt longer.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api import whole_ledger
from tests.support.late_model import JSON, LateAccount, Refused
from tests.support.pg_server import PostgresServer, start_postgres_or_skip
from tests.support.server_process import ServerProcess, postgres_processes, started

SEED = int(os.environ.get("PG_ADVERSARIAL_SEED", "20261202"))
TEST_TIMEOUT_S = 90
REQUEST_TIMEOUT_S = 20.0
ACCOUNTS = ("adv-a", "adv-b", "adv-c")
CLASSES = ("h100", "a100")
NDJSON = "application/x-ndjson"


@dataclass(frozen=True)
class Scenario:
    name: str
    window: int
    lag: int  # a timestamp is the account's counter minus 0..lag
    classes: bool
    kills: int
    requests: int
    clients: int = 8
    max_ops: int = 6  # operations per batch or stream
    pg_restarts: int = 0  # PostgreSQL itself stopped (immediate: a crash) and started
    singles: float = 0.45  # the share of single requests; then batches up to ``batches``
    batches: float = 0.75  # the rest are streams
    env: tuple[tuple[str, str], ...] = ()  # more settings of both processes


SCALE = float(os.environ.get("PG_ADVERSARIAL_SCALE", "1"))  # more requests to hunt longer
SCENARIOS = [
    Scenario("in-order", window=0, lag=0, classes=False, kills=0, requests=80),
    # Late writes within a window of 20, some too late; GPU classes; one process SIGKILLed.
    Scenario("late-kills", window=20, lag=30, classes=True, kills=2, requests=120),
    Scenario("pg-crash", window=20, lag=30, classes=True, kills=0, requests=100, pg_restarts=1),
    # Everything stays provisional, lines land far behind: streams cut chunks by replay cost.
    Scenario("wide-window", window=10**6, lag=300, classes=True, kills=1, requests=30, max_ops=60),
    # A cache of trackers so small that every unit of work evicts and reloads.
    Scenario(
        "tiny-cache",
        window=20,
        lag=30,
        classes=True,
        kills=0,
        requests=80,
        env=(("GPU_CREDITS_MAX_LIVE_GRANTS", "3"),),
    ),
    # Long streams, often the same one through both processes at once, while they are killed.
    Scenario(
        "long-streams",
        window=20,
        lag=30,
        classes=True,
        kills=2,
        requests=10,
        max_ops=200,
        singles=0.1,
        batches=0.3,
    ),
]


@dataclass
class Op:
    """One write: its identity ``tag`` (an event id, or part of a key)."""

    tag: str
    account_id: str
    kind: str  # grant, consume, void; balance (a read, in batches only)
    timestamp: int | None
    amount: int = 0
    expiry: int = 0
    resources: list[str] | None = None
    resource: str | None = None
    grant_id: int = 0
    # What came back: (status, body) answers for this op, from every attempt that answered.
    answers: list[tuple[int, JSON]] = field(default_factory=list)
    batch: list[Op] | None = None  # the operations of its batch (a read's bounds)

    def batch_op(self) -> JSON:
        body: JSON = {"op": self.kind, "account_id": self.account_id}
        if self.timestamp is not None:
            body["timestamp"] = self.timestamp
        if self.kind == "balance":
            if self.resource is not None:
                body["resource"] = self.resource
        elif self.kind == "grant":
            body.update(amount=self.amount, expiry=self.expiry)
            if self.resources is not None:
                body["resources"] = self.resources
        elif self.kind == "consume":
            body["amount"] = self.amount
            if self.resource is not None:
                body["resource"] = self.resource
        else:
            body["grant_id"] = self.grant_id
        return body

    def single(self) -> tuple[str, JSON]:
        url = f"/v1/accounts/{self.account_id}"
        body = {k: v for k, v in self.batch_op().items() if k not in ("op", "account_id")}
        if self.kind == "grant":
            return f"{url}/grants", body
        if self.kind == "consume":
            return f"{url}/consumptions", body
        del body["grant_id"]
        return f"{url}/grants/{self.grant_id}/void", body

    @property
    def success(self) -> int:
        return 201 if self.kind == "grant" else 200

    def applied(self, status: int, body: JSON) -> bool:
        """Whether an answer says the write is applied: its success, or a stream's
        ``duplicate`` line (200 for every kind)."""
        return status == self.success or (status == 200 and body.get("duplicate") is True)

    def describe(self) -> str:
        return f"{self.tag} {self.batch_op()} -> {self.answers}"


@dataclass
class Request:
    """One HTTP request carrying ``ops``: single, batch (atomic or not) or events."""

    kind: str
    ops: list[Op]
    key: str
    atomic: bool = False
    twice: bool = False  # sent to both processes at once
    answered: bool = False
    # Each answer's raw bytes, per attempt (for replays).
    raw: list[tuple[int, bytes]] = field(default_factory=list)

    def http(self) -> tuple[str, dict[str, str], bytes]:
        if self.kind == "single":
            path, body = self.ops[0].single()
            return path, {"Idempotency-Key": self.key}, json.dumps(body).encode()
        if self.kind == "batch":
            payload = {"atomic": self.atomic, "operations": [op.batch_op() for op in self.ops]}
            return "/v1/batch", {"Idempotency-Key": self.key}, json.dumps(payload).encode()
        lines = [json.dumps({**op.batch_op(), "id": op.tag}) for op in self.ops]
        return "/v1/events", {"content-type": NDJSON}, ("\n".join(lines) + "\n").encode()


class Load:
    def __init__(self, scenario: Scenario, urls: list[str]) -> None:
        self.scenario = scenario
        self.urls = urls
        self.rng = random.Random(f"{SEED}-{scenario.name}")
        self.counter = dict.fromkeys(ACCOUNTS, 0)
        self.grants: dict[str, list[tuple[int, int]]] = {a: [] for a in ACCOUNTS}
        self.requests: list[Request] = []
        self.issued = 0
        self.down: set[int] = set()
        self.statuses: dict[int, int] = {}
        self.transport_errors = 0
        self.progress = asyncio.Condition()

    def draw_op(self, account_id: str | None = None) -> Op:
        rng, sc = self.rng, self.scenario
        if account_id is None:
            # Now and then an account that may not exist yet: creation races.
            if rng.random() < 0.08:
                account_id = f"adv-new-{self.issued // 8:03d}"
                self.counter.setdefault(account_id, 0)
                self.grants.setdefault(account_id, [])
            else:
                account_id = rng.choice(ACCOUNTS)
        self.counter[account_id] += rng.randint(0, 2)
        ts = max(0, self.counter[account_id] - rng.randint(0, sc.lag))
        tag = f"{account_id}/{uuid.uuid4().hex[:12]}"
        x = rng.random()
        if x < 0.42:
            resources = (
                rng.choice([None, None, [CLASSES[0]], list(CLASSES)]) if sc.classes else None
            )
            return Op(tag, account_id, "grant", ts, amount=rng.randint(1, 100),
                      expiry=ts + rng.randint(1, 60), resources=resources)  # fmt: skip
        if x < 0.85 or not self.grants[account_id]:
            resource = rng.choice([None, None, *CLASSES]) if sc.classes else None
            return Op(tag, account_id, "consume", ts, amount=rng.randint(1, 80), resource=resource)
        grant_id, granted_at = rng.choice(self.grants[account_id])
        y = rng.random()
        if y < 0.1:  # a grant that may not exist: 404
            grant_id = rng.randint(1, 2 * len(self.grants[account_id]) + 2)
        elif y < 0.2:  # before the grant's own timestamp, if it can be: 422
            return Op(tag, account_id, "void", max(0, granted_at - 1), grant_id=grant_id)
        return Op(tag, account_id, "void", max(ts, granted_at), grant_id=grant_id)

    def draw_read(self, ops: list[Op]) -> Op:
        """A balance read in a batch: at the clock, as of a time behind it (final or not,
        among the batch's own late writes too), or a projection; in total or for a class."""
        rng = self.rng
        account_id = rng.choice([op.account_id for op in ops])
        counter = self.counter[account_id]
        timestamp = None
        if rng.random() < 0.8:
            timestamp = max(0, counter - rng.randint(-5, 3 * self.scenario.lag + 5))
        resource = rng.choice([None, *CLASSES]) if self.scenario.classes else None
        tag = f"{account_id}/read-{uuid.uuid4().hex[:12]}"
        return Op(tag, account_id, "balance", timestamp, resource=resource)

    def draw(self) -> Request:
        rng = self.rng
        x = rng.random()
        key = uuid.uuid4().hex
        twice = rng.random() < 0.15
        if x < self.scenario.singles:
            return Request("single", [self.draw_op()], key, twice=twice)
        ops = [self.draw_op() for _ in range(rng.randint(1, self.scenario.max_ops))]
        if x < self.scenario.batches:
            for _ in range(rng.choice([0, 0, 1, 2])):  # reads among the writes
                ops.insert(rng.randint(0, len(ops)), self.draw_read(ops))
            for op in ops:
                op.batch = ops
            return Request("batch", ops, key, atomic=rng.random() < 0.4, twice=twice)
        # A stream's ids are unique per account: tags are.
        return Request("events", ops, key, twice=twice)

    def live_urls(self) -> list[int]:
        return [i for i in range(len(self.urls)) if i not in self.down] or [0]

    async def send(self, http: httpx.AsyncClient, request: Request, server: int) -> None:
        path, headers, content = request.http()
        try:
            r = await http.post(f"{self.urls[server]}{path}", content=content, headers={
                "content-type": "application/json", **headers})  # fmt: skip
        except httpx.TransportError:
            self.transport_errors += 1
            return
        self.statuses[r.status_code] = self.statuses.get(r.status_code, 0) + 1
        if r.status_code == 503:
            return
        assert r.status_code != 500, r.text
        request.raw.append((r.status_code, r.content))
        self.record(request, r.status_code, r.content)

    def record(self, request: Request, status: int, content: bytes) -> None:
        if request.kind == "single":
            request.answered = True
            request.ops[0].answers.append((status, json.loads(content)))
        elif request.kind == "batch":
            request.answered = True
            body = json.loads(content)
            if status == 200:
                for op, result in zip(request.ops, body["results"], strict=True):
                    op.answers.append((result["status"], result["body"]))
            else:  # refused whole: none applied
                assert request.atomic or status == 422, (status, body)
                for op in request.ops:
                    op.answers.append((status, {"batch_refused": True, **body}))
        else:
            assert status == 200, (status, content)
            results = [json.loads(line) for line in content.splitlines() if line.strip()]
            for result in results:
                op = request.ops[result["line"] - 1]
                assert result["id"] == op.tag, result
                if result["status"] == 503:
                    continue  # a stopped stream: settled by a resend
                if result.get("duplicate"):
                    op.answers.append((result["status"], {"duplicate": True, **result["body"]}))
                else:
                    op.answers.append((result["status"], result["body"]))
            request.answered = all(op.answers for op in request.ops)  # else resend the rest

    def note_grants(self, request: Request) -> None:
        for op in request.ops:
            for status, body in op.answers:
                if op.kind == "grant" and status == 201 and "grant_id" in body:
                    assert op.timestamp is not None
                    self.grants[op.account_id].append((body["grant_id"], op.timestamp))

    async def client(self, http: httpx.AsyncClient) -> None:
        while self.issued < self.scenario.requests:
            self.issued += 1
            async with self.progress:
                self.progress.notify_all()
            request = self.draw()
            self.requests.append(request)
            live = self.live_urls()
            if request.twice and len(live) > 1:
                await asyncio.gather(*(self.send(http, request, s) for s in live))
            else:
                await self.send(http, request, self.rng.choice(live))
            self.note_grants(request)

    async def reached(self, issued: int) -> None:
        """Wait until the clients have issued ``issued`` requests (or all of them)."""
        async with self.progress:
            await self.progress.wait_for(lambda: self.issued >= issued)

    async def pg_crasher(self, pg: PostgresServer) -> None:
        for round_ in range(self.scenario.pg_restarts):
            threshold = self.scenario.requests * (round_ + 1) // (self.scenario.pg_restarts + 1)
            await self.reached(threshold)
            await asyncio.to_thread(pg.restart, "immediate")

    async def killer(self, servers: list[ServerProcess]) -> None:
        for round_ in range(self.scenario.kills):
            target = 1 + round_ % (len(servers) - 1)
            threshold = self.scenario.requests * (round_ + 1) // (self.scenario.kills + 1)
            await self.reached(threshold)
            self.down.add(target)
            servers[target].kill()
            await asyncio.to_thread(servers[target].start)
            self.down.discard(target)


def settle_events(request: Request) -> Request:
    """A resend of the lines of ``request`` that have no answer yet, same ids."""
    return Request("events", [op for op in request.ops if not op.answers], request.key)


async def resolve(load: Load, http: httpx.AsyncClient) -> int:
    """Resend every unanswered request with the same key or ids until it is answered."""
    resent = 0
    for _ in range(20):
        pending = [r for r in load.requests if not r.answered]
        if not pending:
            return resent
        for request in pending:
            resent += 1
            if request.kind == "events":
                again = settle_events(request)
                await load.send(http, again, load.rng.randrange(len(load.urls)))
                request.answered = all(op.answers for op in request.ops)
            else:
                await load.send(http, request, load.rng.randrange(len(load.urls)))
    raise AssertionError(f"unanswered after 20 resends: {[r.key for r in pending]}")


def expected_answer(model: LateAccount, op: Op) -> JSON:
    assert op.timestamp is not None, "writes have one"
    if op.kind == "grant":
        return model.grant(op.amount, op.timestamp, op.expiry, op.resources)
    if op.kind == "consume":
        return model.consume(op.amount, op.timestamp, op.resource)
    return model.void(op.grant_id, op.timestamp)


def check_account(
    account_id: str, ops: Sequence[Op], window: int
) -> tuple[LateAccount, int, int, int]:
    """The acknowledged writes through the model in sequence order; the model, how many
    writes, late writes and refusals."""
    acked: dict[int, Op] = {}
    refusals = 0
    reads = [op for op in ops if op.kind == "balance"]
    for op in ops:
        assert op.answers, f"never answered: {op.describe()}"
        if op.kind == "balance":
            continue
        sequences = {b["sequence"] for s, b in op.answers if op.applied(s, b)}
        full = [b for s, b in op.answers if op.applied(s, b) and not b.get("duplicate")]
        assert len(sequences) <= 1, f"applied more than once: {op.describe()}"
        assert len(full) <= 1 or all(b == full[0] for b in full), f"two answers: {op.describe()}"
        if not sequences:
            for status, _ in op.answers:
                assert status in (404, 409, 422), f"unexpected answer: {op.describe()}"
            refusals += 1
            continue
        (sequence,) = sequences
        assert sequence not in acked, (
            f"{account_id}: two operations share sequence {sequence}:\n"
            f"  {acked[sequence].describe()}\n  {op.describe()}"
        )
        acked[sequence] = op
    model = LateAccount(account_id, window)
    snapshots = [model.copy()]  # after 0, 1, ... acknowledged writes
    late = 0
    for sequence in sorted(acked):
        op = acked[sequence]
        late += op.timestamp is not None and op.timestamp < model.clock
        try:
            want: JSON | Refused = expected_answer(model, op)
        except Refused as refused:
            want = refused
        for status, body in op.answers:
            if not op.applied(status, body):
                continue
            if body.get("duplicate"):
                assert isinstance(want, dict), f"{account_id}: {op.describe()}\n model: {want}"
                assert body["sequence"] == want["sequence"], (op.describe(), want)
                if "grant_id" in body:
                    assert body["grant_id"] == want["grant_id"], (op.describe(), want)
            else:
                assert body == want, (
                    f"{account_id}: an answer differs from the model's replay in sequence "
                    f"order\n  op:    {op.describe()}\n  model: {want}"
                )
        snapshots.append(model.copy())
    model.check_replay()
    place = {sequence: index + 1 for index, sequence in enumerate(sorted(acked))}
    for read in reads:
        check_read(read, snapshots, place)
    return model, len(acked), late, refusals


def check_read(read: Op, snapshots: Sequence[LateAccount], place: dict[int, int]) -> None:
    """A balance read in a batch answered what the account was after some number of its
    acknowledged writes: after its batch's writes to the account before it, and before
    those after it (the batch holds the account throughout)."""
    assert read.batch is not None
    low, high = 0, len(snapshots) - 1
    before = True
    for op in read.batch:
        if op is read:
            before = False
            continue
        if op.account_id != read.account_id or op.kind == "balance":
            continue
        for status, body in op.answers:
            if op.applied(status, body):
                at = place[body["sequence"]]
                low, high = (max(low, at), high) if before else (low, min(high, at - 1))
    for status, body in read.answers:
        if body.get("batch_refused"):
            continue  # an atomic batch refused whole: no read answered
        if status == 422 and body["errors"][0]["type"] == "class_as_of":
            continue  # a time this batch's own writes made final (README): read it after
        assert status in (200, 404), read.describe()
        shown = [_read(snapshots[i], read) for i in range(low, high + 1)]
        got = [404, None] if status == 404 else [status, body]
        assert status != 404 or body["type"].endswith(":account-not-found"), read.describe()
        assert got in shown, (
            f"{read.account_id}: a read in a batch fits no moment between its batch's writes "
            f"(after {low} to {high} writes)\n  read: {read.describe()}\n"
            f"  model there: {shown[:4]}"
        )


def _read(model: LateAccount, read: Op) -> list[Any]:
    """What a balance read in a batch answers on ``model``: [status, body]."""
    if not model.exists:
        return [404, None]
    return [200, model.read_balance(read.timestamp, read.resource)]


@pytest.fixture(params=SCENARIOS, ids=[s.name for s in SCENARIOS])
def scenario(request: pytest.FixtureRequest) -> Scenario:
    param: Scenario = request.param
    return param


@pytest.fixture
def database(scenario: Scenario, request: pytest.FixtureRequest) -> Iterator[PostgresServer]:
    """The session's PostgreSQL, or one of the test's own when the test crashes it."""
    if not scenario.pg_restarts:
        yield request.getfixturevalue("postgres_url")
        return
    own = start_postgres_or_skip()
    try:
        yield own
    finally:
        own.stop()


@pytest.fixture
def cluster(
    scenario: Scenario, database: PostgresServer, tmp_path: Path
) -> Iterator[list[ServerProcess]]:
    database_url = database.create_database(f"adv_{uuid.uuid4().hex[:16]}")
    env = {"GPU_CREDITS_LATENESS_WINDOW": str(scenario.window), **dict(scenario.env)}
    with started(postgres_processes(tmp_path, database_url, 2, env)) as servers:
        yield servers


@pytest.mark.timeout(TEST_TIMEOUT_S)
async def test_processes_agree_under_mixed_writes(
    scenario: Scenario, cluster: list[ServerProcess], database: PostgresServer
) -> None:
    urls = [s.base_url for s in cluster]
    scenario = replace(scenario, requests=int(scenario.requests * SCALE))
    load = Load(scenario, urls)
    limits = httpx.Limits(max_connections=64)
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S, limits=limits) as http:
        tasks = [load.client(http) for _ in range(scenario.clients)]
        if scenario.kills:
            tasks.append(load.killer(cluster))
        if scenario.pg_restarts:
            tasks.append(load.pg_crasher(database))
        await asyncio.gather(*tasks)
        resent = await resolve(load, http)

        # Replays: a sample of answered single requests and batches, through the other
        # process, byte for byte.
        replayed = 0
        for request in load.requests:
            if request.kind == "events" or not request.raw or load.rng.random() > 0.3:
                continue
            path, headers, content = request.http()
            for url in urls:
                r = await http.post(f"{url}{path}", content=content, headers={
                    "content-type": "application/json", **headers})  # fmt: skip
                first = request.raw[0]
                if first[0] < 300 and not (request.kind == "batch" and _changed_nothing(first)):
                    assert (r.status_code, r.content) == first, (request.key, r.text, first)
                    assert r.headers.get("idempotent-replayed") == "true"
                    replayed += 1

        ops_by_account: dict[str, list[Op]] = {}
        for request in load.requests:
            for op in request.ops:
                ops_by_account.setdefault(op.account_id, []).append(op)
        totals = [0, 0, 0]
        reads = 0
        listed: dict[str, JSON] = {}  # the account list: existing accounts at their clock
        for url in urls:
            r = await http.get(f"{url}/v1/accounts", params={"prefix": "adv-", "limit": 1000})
            assert r.status_code == 200, r.text
            page = {item["account_id"]: item for item in r.json()["accounts"]}
            assert not listed or page == listed, "the processes list different accounts"
            listed = page
        for account_id in sorted(ops_by_account):
            model, writes, late, refusals = check_account(
                account_id, ops_by_account[account_id], scenario.window
            )
            totals = [totals[0] + writes, totals[1] + late, totals[2] + refusals]
            ledgers = [await whole_ledger(http, url, account_id) for url in urls]
            for ledger in ledgers:
                want = model.entries
                for index, (got, entry) in enumerate(zip(ledger, want, strict=False)):
                    assert got == entry, f"{account_id}: ledger entry {index}: {got} != {entry}"
                assert len(ledger) == len(want), (account_id, len(ledger), len(want))
            assert (account_id in listed) == model.exists, (account_id, listed.get(account_id))
            if not model.exists:
                for url in urls:
                    r = await http.get(f"{url}/v1/accounts/{account_id}/balance")
                    assert r.status_code == 404, (account_id, r.text)
                continue
            for url in urls:
                r = await http.get(f"{url}/v1/accounts/{account_id}/balance")
                assert r.status_code == 200, r.text
                want_balance = model.read_balance()
                assert r.json() == want_balance, (account_id, r.json(), want_balance)
                assert listed[account_id] == want_balance, (account_id, listed[account_id])
                r = await http.get(f"{url}/v1/accounts/{account_id}/grants")
                assert r.status_code == 200, r.text
                got_grants = r.json()
                want_grants = model.live_grants()
                assert got_grants == want_grants, (account_id, got_grants, want_grants)
            # As-of and projected reads, in total and per class, through both processes.
            step = max(3, model.clock // 100)
            times = sorted({*range(0, model.clock + 5, step), model.watermark, model.clock})
            for t in times:
                for resource in (None, *CLASSES):
                    params = {"timestamp": str(t)}
                    if resource is not None:
                        params["resource"] = resource
                    want_read = model.read_balance(t, resource)
                    for url in urls:
                        r = await http.get(f"{url}/v1/accounts/{account_id}/balance", params=params)
                        reads += 1
                        assert r.status_code == 200, (account_id, t, resource, r.text)
                        assert r.json() == want_read, (account_id, t, resource, r.json(), want_read)
    print(
        f"\n{scenario.name}: {len(load.requests)} requests, "
        f"{sum(len(r.ops) for r in load.requests)} operations, "
        f"{sum(1 for r in load.requests if r.twice)} sent twice at once, {resent} resends, "
        f"{replayed} replays, {reads} reads; {totals[0]} writes acknowledged ({totals[1]} late), "
        f"{totals[2]} refused; statuses {sorted(load.statuses.items())}, "
        f"{load.transport_errors} transport errors"
    )
    for server in cluster:
        assert "Traceback" not in server.log(), server.log()


def _changed_nothing(first: tuple[int, bytes]) -> bool:
    """A batch that changed nothing keeps no key: a resend is judged again."""
    status, content = first
    body: Any = json.loads(content)
    writes = [r for r in body["results"] if r["op"] != "balance" and r["status"] < 300]
    return status == 200 and not writes


# -- one process against two: the same writes, byte for byte ---------------------------------

TWIN_WINDOW = 10**9  # every write stays provisional until the bound of 10,000 folds the oldest
TWIN_BULK = int(10_050 * SCALE)  # in batches and streams of 300 to 600
TWIN_WRITES = TWIN_BULK + 100  # then small requests, singles too


def _twin_ops(rng: random.Random, counter: int, grants: int, n: int) -> tuple[list[JSON], int]:
    """``n`` batch operations (no account yet) from ``counter``: in order or a few behind."""
    ops: list[JSON] = []
    for _ in range(n):
        counter += rng.randint(0, 2)
        ts = max(0, counter - rng.choice([0, 0, 0, 1, 3, 8]))
        x = rng.random()
        if x < 0.45 or grants == 0:
            op: JSON = {"op": "grant", "amount": rng.randint(1, 100), "timestamp": ts,
                        "expiry": ts + rng.randint(1, 400)}  # fmt: skip
            if rng.random() < 0.4:
                op["resources"] = rng.choice([[CLASSES[0]], list(CLASSES)])
            grants += 1
        elif x < 0.93:
            op = {"op": "consume", "amount": rng.randint(1, 90), "timestamp": ts}
            if rng.random() < 0.5:
                op["resource"] = rng.choice(CLASSES)
        else:
            op = {"op": "void", "grant_id": rng.randint(1, grants), "timestamp": ts}
        ops.append(op)
    return ops, counter


@pytest.fixture
def twin_cluster(postgres_url: PostgresServer, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    database_url = postgres_url.create_database(f"twin_{uuid.uuid4().hex[:16]}")
    env = {"GPU_CREDITS_LATENESS_WINDOW": str(TWIN_WINDOW)}
    with started(postgres_processes(tmp_path, database_url, 2, env)) as servers:
        yield servers


def _unlike(solo: Any, duo: Any) -> Any:
    """``duo``'s answer with its account id as ``solo``'s (the one thing that differs)."""
    return json.loads(json.dumps(duo).replace("twin-duo", "twin-solo"))


@pytest.mark.timeout(TEST_TIMEOUT_S)
async def test_one_process_and_two_give_the_same_answers_past_the_provisional_bound(
    twin_cluster: list[ServerProcess],
) -> None:
    """The same writes to two accounts: one always through process 0, the other through
    either process at random (so its trackers are reloaded from the database again and
    again), as batches, streams and single requests, to past 10,000 provisional writes (the
    oldest then become final early). Every answer, the ledgers, balances, live grants and
    as-of reads (per class too) must be the same for both accounts."""
    urls = [s.base_url for s in twin_cluster]
    rng = random.Random(f"{SEED}-twin")
    counter = 0
    grants = 0
    written = 0
    requests = 0
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as http:

        async def send(account_id: str, url: str, ops: list[JSON], how: str) -> Any:
            named = [{**op, "account_id": account_id} for op in ops]
            if how == "batch":
                r = await http.post(f"{url}/v1/batch", json={"operations": named})
                assert r.status_code == 200, r.text
                return [(x["status"], x["body"]) for x in r.json()["results"]]
            if how == "events":
                lines = [json.dumps({**op, "id": f"e{written + i}"}) for i, op in enumerate(named)]
                r = await http.post(f"{url}/v1/events", content="\n".join(lines).encode(),
                                    headers={"content-type": NDJSON})  # fmt: skip
                assert r.status_code == 200, r.text
                return [(x["status"], x["body"]) for x in map(json.loads, r.text.splitlines())]
            out = []
            for op in named:
                body = {k: v for k, v in op.items() if k not in ("op", "account_id")}
                base = f"{url}/v1/accounts/{account_id}"
                if op["op"] == "grant":
                    r = await http.post(f"{base}/grants", json=body)
                elif op["op"] == "consume":
                    r = await http.post(f"{base}/consumptions", json=body)
                else:
                    gid = body.pop("grant_id")
                    r = await http.post(f"{base}/grants/{gid}/void", json=body)
                got = r.json()
                got.pop("request_id", None)
                out.append((r.status_code, got))
            return out

        t0 = time.monotonic()
        while written < TWIN_WRITES:
            bulk = written < TWIN_BULK
            n = rng.randint(300, 600) if bulk else rng.randint(1, 12)
            n = min(n, TWIN_BULK - written) if bulk else n
            ops, counter = _twin_ops(rng, counter, grants, n)
            grants += sum(1 for op in ops if op["op"] == "grant")
            how = (
                rng.choice(["batch", "events"])
                if bulk
                else rng.choice(["batch", "events", "single"])
            )
            solo = await send("twin-solo", urls[0], ops, how)
            duo = await send("twin-duo", rng.choice(urls), ops, how)
            for index, (a, b) in enumerate(zip(solo, duo, strict=True)):
                if isinstance(a[1], dict):
                    a[1].pop("request_id", None)
                    b[1].pop("request_id", None)
                assert list(a) == _unlike(a, list(b)), (written + index, ops[index], a, b)
            written += n
            requests += 1
            if os.environ.get("PG_ADVERSARIAL_TRACE"):
                print(f"{time.monotonic() - t0:.2f} s: {written} written ({how}, {n})", flush=True)

        solo_ledger = await whole_ledger(http, urls[0], "twin-solo")
        for url in urls:
            duo_ledger = await whole_ledger(http, url, "twin-duo")
            assert len(solo_ledger) == len(duo_ledger)
            for index, (a, b) in enumerate(zip(solo_ledger, duo_ledger, strict=True)):
                assert a == b, (index, a, b)
        reads = 0
        clock = counter
        for path, params in [("balance", {}), ("grants", {}), ("settings", {})] + [
            ("balance", {"timestamp": str(t), **({"resource": c} if c else {})})
            for t in range(0, clock + 3, max(1, clock // 25))
            for c in (None, *CLASSES)
        ]:
            a = (await http.get(f"{urls[0]}/v1/accounts/twin-solo/{path}", params=params)).json()
            for url in urls:
                b = (await http.get(f"{url}/v1/accounts/twin-duo/{path}", params=params)).json()
                for x in (a, b):
                    if isinstance(x, dict):
                        x.pop("request_id", None)
                assert a == _unlike(a, b), (path, params, a, b)
                reads += 1
        settings = (await http.get(f"{urls[0]}/v1/accounts/twin-solo/settings")).json()
    print(f"\ntwins: {written} writes each in {requests} requests, {len(solo_ledger)} entries, "
          f"{reads} reads compared; {settings}")  # fmt: skip
    assert settings["watermark"] > 0, "the bound of provisional writes was not reached"
