"""Linearizability with late writes (issue 12, item 5): PostgreSQL across processes, and
SQLite.

``tests/test_linearizability.py`` with a lateness window. Two ``gpu-credits serve``
processes on different ports share one fresh PostgreSQL database, both with
``GPU_CREDITS_LATENESS_WINDOW=WINDOW`` (and, as a second case, one process on a SQLite
file: its reads and writes meet in one process, and an as-of read there once answered
figures and watermark of two different moments). ``CLIENTS`` asyncio clients, each picking
one of the processes at random for every request, send ``TOTAL_OPS`` operations to
``ACCOUNTS``:
grants (unrestricted or scoped to GPU classes), consumptions (with or without a class),
voids of grants acknowledged before, and balance reads (at the clock, at a time: as of a
time before the clock, final or not, or a projection; in total or for a class). Timestamps
come from one shared counter, ticked once per operation, minus a random lag of up to
``LAG``: with the window smaller than the lag, some writes arrive late and are placed
before writes that arrived earlier, restating them, and some arrive too late and are
refused (409 with the account's clock and watermark). Every request is recorded with its
answer and its start and end (``time.monotonic()``).

Per account, the history must be linearizable: one total order of all its calls that
respects real time, in which the model of ``tests/support/late_model.py`` (sort-and-replay
of the accepted writes in effective order, SPEC sections 1, 5, 6, 7) gives every answer:

(a) the acknowledged writes take the order of their ``sequence`` (the account numbers a
    write's entry when it accepts it: arrival), and a write that ended before another
    began has the smaller one;
(b) replaying them in that order through the model reproduces every write's answer (its
    own effect at its effective place, the totals at the clock, ``watermark``,
    ``restated``), and the ledger, read through both processes, is exactly the model's:
    entries in effective order with their effects, balance after, sequence, revision and
    finality;
(c) every other call fits in that order within its real-time window: a balance read where
    the model's state gives exactly its answer (an as-of answer depends on the late writes
    accepted before it, and ``watermark`` and ``final`` on where the clock was), a refused
    write where the model refuses it the same way (too late for the watermark then, a
    grant already voided, a void before its grant), a 404 before the account's first write.
    Calls that change nothing are placed greedily, as early as they fit: with the writes'
    order fixed, that finds a linearization whenever one exists, so no search is needed.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from tests.support.api import whole_ledger
from tests.support.late_model import JSON, LateAccount, Refused
from tests.support.pg_server import PostgresServer
from tests.support.server_process import ServerProcess, postgres_processes, started

Kind = Literal["grant", "consume", "void", "balance"]

SEED = int(os.environ.get("LINEARIZABILITY_LATE_SEED", "20260613"))
TEST_TIMEOUT_S = 60  # server starts included
REQUEST_TIMEOUT_S = 15.0
PROCESSES = 2

ACCOUNTS = ("late-a", "late-b", "late-c")
CLIENTS = 24
TOTAL_OPS = 900
WINDOW = 20  # the service's lateness window
LAG = 30  # a timestamp is the shared counter minus 0..LAG: late, or too late
EXPIRY_SPAN = 60  # a grant lives 1..EXPIRY_SPAN ticks
CLASSES = ("h100", "a100")


@pytest.fixture(params=["postgres", "sqlite"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Two service processes on different ports sharing one fresh PostgreSQL database, or
    one process on a SQLite file."""
    window = {"GPU_CREDITS_LATENESS_WINDOW": str(WINDOW)}
    if request.param == "sqlite":
        servers = [ServerProcess(tmp_path / "data", storage="sqlite", env=window)]
    else:
        postgres_url: PostgresServer = request.getfixturevalue("postgres_url")
        database_url = postgres_url.create_database(f"linlate_{uuid.uuid4().hex[:16]}")
        servers = postgres_processes(tmp_path, database_url, PROCESSES, window)
    with started(servers) as running_servers:
        yield running_servers


# -- the history ----------------------------------------------------------------------------


@dataclass
class Call:
    """One request and what came back: a response, or a transport error (``error``)."""

    client: int
    server: int
    account_id: str
    kind: Kind
    amount: int | None = None
    timestamp: int | None = None
    expiry: int | None = None
    resources: list[str] | None = None  # a grant's classes
    resource: str | None = None  # a consumption's class, or the class a balance read asks
    grant_id: int | None = None  # the grant a void names
    start: float = math.inf
    end: float = math.inf
    status: int | None = None
    body: JSON | None = None
    error: str | None = None

    @property
    def success_status(self) -> int:
        return 201 if self.kind == "grant" else 200

    @property
    def acked_write(self) -> bool:
        return self.kind != "balance" and self.status == self.success_status

    @property
    def sequence(self) -> int:
        assert self.acked_write
        assert self.body is not None
        sequence: int = self.body["sequence"]
        return sequence

    def describe(self) -> str:
        args = {
            "amount": self.amount,
            "timestamp": self.timestamp,
            "expiry": self.expiry,
            "resources": self.resources,
            "resource": self.resource,
            "grant_id": self.grant_id,
        }
        shown = ", ".join(f"{k}={v}" for k, v in args.items() if v is not None)
        outcome = f"{self.status} {self.body}" if self.error is None else self.error
        return (
            f"{self.kind}({shown}) on {self.account_id} via process {self.server} "
            f"[{self.start:.6f}, {self.end:.6f}] -> {outcome}"
        )


async def _send(http: httpx.AsyncClient, base_url: str, call: Call) -> None:
    url = f"{base_url}/v1/accounts/{call.account_id}"
    call.start = time.monotonic()
    try:
        if call.kind == "grant":
            body: JSON = {"amount": call.amount, "timestamp": call.timestamp, "expiry": call.expiry}
            if call.resources is not None:
                body["resources"] = call.resources
            r = await http.post(f"{url}/grants", json=body)
        elif call.kind == "consume":
            body = {"amount": call.amount, "timestamp": call.timestamp}
            if call.resource is not None:
                body["resource"] = call.resource
            r = await http.post(f"{url}/consumptions", json=body)
        elif call.kind == "void":
            r = await http.post(
                f"{url}/grants/{call.grant_id}/void", json={"timestamp": call.timestamp}
            )
        else:
            params: dict[str, str] = {}
            if call.timestamp is not None:
                params["timestamp"] = str(call.timestamp)
            if call.resource is not None:
                params["resource"] = call.resource
            r = await http.get(f"{url}/balance", params=params)
    except httpx.TransportError as exc:
        call.end = time.monotonic()
        call.error = f"{type(exc).__name__}: {exc}"
        return
    call.end = time.monotonic()
    call.status = r.status_code
    call.body = r.json() if r.content else None


# -- the check ------------------------------------------------------------------------------


def apply(model: LateAccount, call: Call) -> JSON:
    """An acknowledged write through the model; the answer it predicts (or ``Refused``)."""
    assert call.timestamp is not None
    if call.kind == "grant":
        assert call.amount is not None
        assert call.expiry is not None
        return model.grant(call.amount, call.timestamp, call.expiry, call.resources)
    if call.kind == "consume":
        assert call.amount is not None
        return model.consume(call.amount, call.timestamp, call.resource)
    assert call.grant_id is not None
    return model.void(call.grant_id, call.timestamp)


def fits(call: Call, model: LateAccount) -> bool:
    """Whether ``call``, which changes nothing, answered what ``model`` (the account after
    some number of writes) gives."""
    body = call.body or {}
    if call.kind == "balance":
        if call.status == 404:
            return not model.exists
        return model.exists and body == model.read_balance(call.timestamp, call.resource)
    assert call.timestamp is not None
    refused = model.refusal(call.kind, call.timestamp, call.grant_id or 0)
    if refused is None or call.status != refused.status:
        return False
    slug = str(body.get("type", "")).rsplit(":", 1)[-1]
    return slug == refused.slug and {k: body.get(k) for k in refused.members} == refused.members


@dataclass
class Verdict:
    account_id: str
    calls: int
    writes: int
    late: int  # acknowledged writes with a timestamp before the clock when they were applied
    restating: int  # acknowledged writes that restated something
    revised: int  # ledger entries restated at least once
    too_late: int  # 409 for the watermark
    other_refusals: int  # grant already voided, void before its grant
    reads: int
    as_of_reads: int  # reads before the clock
    final_reads: int  # reads answered final (before the watermark)
    ledger_entries: int


def check_real_time_of_writes(writes: Sequence[Call]) -> None:
    """(a): no write that ended before another began has the higher sequence. ``writes``
    in sequence order; O(n) with the suffix minimum of end times."""
    suffix_min_end = math.inf
    for b in reversed(writes):
        assert suffix_min_end >= b.start, (
            f"real-time violation: a write with sequence > {b.sequence} ended before this one "
            f"started: {b.describe()}"
        )
        suffix_min_end = min(suffix_min_end, b.end)


def place(account_id: str, calls: Sequence[Call], snapshots: Sequence[LateAccount]) -> int:
    """(c): place every call in real-time order, the writes in sequence order and every
    other call as early as it fits (``snapshots[k]``: the account after k writes). Returns
    how many reads were placed before the clock there; fails with the calls that could come
    next and why they do not."""
    writes = sorted((c for c in calls if c.acked_write), key=lambda c: c.sequence)
    index_of = {id(c): i for i, c in enumerate(calls)}
    pending = set(range(len(calls)))
    placed_writes = 0
    as_of = 0

    def candidates() -> list[int]:
        min_end = min(calls[i].end for i in pending)
        return [i for i in pending if calls[i].start <= min_end]

    while pending:
        model = snapshots[placed_writes]
        progress = True
        while progress and pending:
            progress = False
            for i in candidates():
                call = calls[i]
                if not call.acked_write and fits(call, model):
                    pending.remove(i)
                    progress = True
                    as_of += call.kind == "balance" and (call.timestamp or math.inf) < model.clock
        if not pending:
            break
        write = writes[placed_writes] if placed_writes < len(writes) else None
        ready = candidates()
        if write is None or index_of[id(write)] not in ready:
            lines = [
                f"{account_id}: no linearization: {placed_writes} writes placed (clock "
                f"{model.clock}, watermark {model.watermark}), {len(pending)} calls left; the "
                f"next write is {write.describe() if write else 'none'}; calls that must come "
                "first and do not fit here:"
            ]
            for i in ready:
                call = calls[i]
                if call.acked_write:
                    continue
                if call.kind == "balance":
                    here: Any = model.read_balance(call.timestamp, call.resource)
                else:
                    here = model.refusal(call.kind, call.timestamp or 0, call.grant_id or 0)
                lines.append(f"  {call.describe()}\n    model here: {here}")
            pytest.fail("\n".join(lines))
        pending.remove(index_of[id(write)])
        placed_writes += 1
    return as_of


def check_account(account_id: str, calls: Sequence[Call], ledger: Sequence[JSON]) -> Verdict:
    allowed = {
        "grant": {201, 409},
        "consume": {200, 409},
        "void": {200, 409, 422},
        "balance": {200, 404},
    }
    for call in calls:
        assert call.error is None, f"no response: {call.describe()}"
        assert call.status in allowed[call.kind], f"unexpected status: {call.describe()}"

    writes = sorted((c for c in calls if c.acked_write), key=lambda c: c.sequence)
    seqs = [c.sequence for c in writes]
    assert len(set(seqs)) == len(seqs), f"{account_id}: two writes share a sequence: {seqs}"
    check_real_time_of_writes(writes)  # (a)

    # (b) the writes in sequence order through the model: every answer, then the ledger
    model = LateAccount(account_id, WINDOW)
    snapshots = [model.copy()]
    late = 0
    for call in writes:
        late += call.timestamp is not None and call.timestamp < model.clock
        try:
            expected: JSON | Refused = apply(model, call)
        except Refused as refused:
            expected = refused
        assert call.body == expected, (
            f"{account_id}: an answer differs from the model's replay in sequence order\n"
            f"  call:  {call.describe()}\n  model: {expected}"
        )
        snapshots.append(model.copy())
    model.check_replay()
    want = model.entries
    for index, (got, entry) in enumerate(zip(ledger, want, strict=False)):
        assert got == entry, f"{account_id}: ledger entry {index}: {got} != model {entry}"
    assert len(ledger) == len(want), (account_id, len(ledger), len(want))

    as_of_reads = place(account_id, calls, snapshots)  # (c)
    reads = [c for c in calls if c.kind == "balance" and c.status == 200 and c.body]
    refusals = [c for c in calls if c.kind != "balance" and not c.acked_write]
    too_late = [c for c in refusals if (c.body or {}).get("watermark") is not None]
    return Verdict(
        account_id=account_id,
        calls=len(calls),
        writes=len(writes),
        late=late,
        restating=sum(1 for c in writes if (c.body or {}).get("restated")),
        revised=sum(1 for e in ledger if e["revision"]),
        too_late=len(too_late),
        other_refusals=len(refusals) - len(too_late),
        reads=len(reads),
        as_of_reads=as_of_reads,
        final_reads=sum(1 for c in reads if c.body is not None and c.body["final"]),
        ledger_entries=len(ledger),
    )


# -- the load -------------------------------------------------------------------------------


class Load:
    """The operations the clients draw, sharing one counter and the acknowledged grants."""

    def __init__(self, urls: Sequence[str]) -> None:
        self.urls = urls
        self.issued = 0
        self.calls: list[Call] = []
        self.grants: dict[str, list[tuple[int, int]]] = {a: [] for a in ACCOUNTS}

    def draw(self, rng: random.Random, client: int) -> Call:
        self.issued += 1  # the shared clock: one tick per operation
        account_id = rng.choice(ACCOUNTS)
        ts = max(0, self.issued - rng.randint(0, LAG))
        call = Call(client, rng.randrange(len(self.urls)), account_id, "balance")
        x = rng.random()
        if x < 0.34:
            call.kind = "grant"
            call.amount = rng.randint(1, 100)
            call.timestamp = ts
            call.expiry = ts + rng.randint(1, EXPIRY_SPAN)
            call.resources = rng.choice([None, None, [CLASSES[0]], list(CLASSES)])
        elif x < 0.68:
            call.kind = "consume"
            call.amount = rng.randint(1, 80)
            call.timestamp = ts
            call.resource = rng.choice([None, None, *CLASSES])
        elif x < 0.78 and self.grants[account_id]:
            call.kind = "void"
            call.grant_id, granted_at = rng.choice(self.grants[account_id])
            # Mostly at or after the grant's timestamp; now and then before it (422).
            call.timestamp = ts if rng.random() < 0.2 else max(ts, granted_at)
        else:
            if rng.random() < 0.7:
                # Further back than writes go (clients run ahead of the clock): as of a time
                # before the watermark (final) or after it, or a projection.
                call.timestamp = max(0, self.issued - rng.randint(0, 3 * LAG))
            if rng.random() < 0.3:
                call.resource = rng.choice(CLASSES)
        return call

    async def client(self, index: int) -> None:
        rng = random.Random(SEED * 1000 + index)
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as http:
            while self.issued < TOTAL_OPS:
                call = self.draw(rng, index)
                self.calls.append(call)
                await _send(http, self.urls[call.server], call)
                if call.kind == "grant" and call.acked_write and call.body is not None:
                    assert call.timestamp is not None
                    self.grants[call.account_id].append((call.body["grant_id"], call.timestamp))


@pytest.mark.timeout(TEST_TIMEOUT_S)
async def test_linearizable_with_late_writes(
    cluster: list[ServerProcess],
) -> None:
    urls = [s.base_url for s in cluster]
    started = time.monotonic()
    load = Load(urls)
    await asyncio.gather(*(load.client(i) for i in range(CLIENTS)))
    load_s = time.monotonic() - started

    verdicts: list[Verdict] = []
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as http:
        for account_id in ACCOUNTS:
            final = Call(client=-1, server=len(urls) - 1, account_id=account_id, kind="balance")
            await _send(http, urls[-1], final)  # after everything: real time puts it last
            load.calls.append(final)
            ledgers = [await whole_ledger(http, url, account_id) for url in urls]
            assert all(ledger == ledgers[0] for ledger in ledgers), (
                f"{account_id}: the processes show different ledgers"
            )
            calls = [c for c in load.calls if c.account_id == account_id]
            verdicts.append(check_account(account_id, calls, ledgers[0]))
    checked_s = time.monotonic() - started - load_s

    print(
        f"\nlinearizability with late writes (seed {SEED}, window {WINDOW}, lag up to {LAG}): "
        f"{len(load.calls)} calls, {CLIENTS} clients, {len(cluster)} process(es), load "
        f"{load_s:.2f} s, check {checked_s:.2f} s: linearizable per account"
    )
    for v in verdicts:
        print(
            f"  {v.account_id}: {v.calls} calls; {v.writes} writes acknowledged ({v.late} late, "
            f"{v.restating} restating), {v.too_late} x 409 too late, {v.other_refusals} other "
            f"refusals; {v.reads} reads ({v.as_of_reads} before the clock, {v.final_reads} "
            f"final); ledger {v.ledger_entries} entries, {v.revised} restated"
        )
    assert sum(v.late for v in verdicts) > 0, "no write arrived late"
    assert sum(v.restating for v in verdicts) > 0, "no late write restated anything"
    assert sum(v.too_late for v in verdicts) > 0, "no write arrived too late"
