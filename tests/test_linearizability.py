"""Linearizability of the PostgreSQL backend across service processes (issue 6, item 5).

Two ``gpu-credits serve`` processes on different ports share ONE PostgreSQL database (a fresh
one per test, on the session's throwaway server from ``tests.support.pg_server``).

``test_two_processes_are_linearizable_per_account``
    ``CLIENTS`` asyncio clients (``httpx.AsyncClient``), each picking one of the two servers at
    random for every request, send ``TOTAL_OPS`` mixed operations to ``ACCOUNTS``: grants,
    consumptions, balance reads without a timestamp and balance reads with one (which change
    nothing: a projection at or after the clock, the state as of then before it). Timestamps
    come from one shared counter, ticked once per operation,
    minus a small random jitter, so some calls arrive late and are rejected with 409. Every
    request is recorded with its response and its start and end (``time.monotonic()``).

    Then, per account, the history must be linearizable: one total order of all its calls
    that respects real time (a call that ended before another started comes first) and in
    which replaying them through a small model reproduces every response. The check uses the
    ``sequence`` of each acknowledged grant and consumption, which fixes the order of writes:

    (a) real time on writes: if write A ended before write B started, sequence(A) < sequence(B);
    (b) the ledger (every page, read through both processes, identical) has sequences exactly
        1..N, its grant and consumption entries are exactly the acknowledged writes, and
        replaying those writes in sequence order through the model (live grants ordered
        by (expiry, grant order), debt, clock, lazy expiration; SPEC section 1) reproduces every
        ledger entry (expirations included) and every write's response body exactly;
    (c) every other call (balance reads, 409 rejections, 404s before the account exists) is
        placed in that write order within its real-time window so that the model's state
        there gives exactly its response; a 409 needs the model clock above its timestamp and
        equal to ``account_timestamp``. Reads are safe (SPEC section 3): a timestamped read
        at or after the clock is the projection of the state there, one before it is the
        state after the last ledger entry at or before its time. The placement is a search
        (Wing & Gong style, memoised on (placed calls, clock)) over the order of writes.
        Reads never change a write's response nor the ledger, which is why (b) can be
        checked on the writes alone.

``test_one_process_killed_mid_load_loses_nothing_acknowledged``
    The same two processes under load through both; once the load is under way one of them is
    SIGKILLed. Every request to the survivor, before and after, must succeed (2xx or a 409
    from the rules), and afterwards, read through the survivor, every acknowledged write is in
    the ledger at the sequence its response gave, every ledger write is an acknowledged one or
    one in flight on the killed process, and the whole ledger replays through the model.
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
from tests.support.model import Account
from tests.support.pg_server import PostgresServer
from tests.support.server_process import ROOT, ServerProcess, postgres_processes, started

Json = dict[str, Any]
Kind = Literal["grant", "consume", "balance"]

SEED = int(os.environ.get("LINEARIZABILITY_SEED", "20250406"))
TEST_TIMEOUT_S = 60  # each test, server starts included
REQUEST_TIMEOUT_S = 15.0
PROCESSES = 2

# -- the linearizability run ------------------------------------------------------------
ACCOUNTS = ("lin-a", "lin-b", "lin-c")
CLIENTS = 24
TOTAL_OPS = 600
JITTER = 4  # a timestamp is the shared counter minus 0..JITTER
EXPIRY_SPAN = 90  # a grant lives 1..EXPIRY_SPAN ticks of the shared counter
MAX_SEARCH_STATES = 500_000  # per account; the search is far below this when it succeeds

# -- the kill run -------------------------------------------------------------------------
KILL_ACCOUNTS = ("kill-a", "kill-b", "kill-c", "kill-d")
KILL_CLIENTS = 16
KILL_TOTAL_OPS = 900
KILL_AFTER_ACKS = 250
MIN_SURVIVOR_ACKS_AFTER_KILL = 100


# -- servers ------------------------------------------------------------------------------


def _postgres_backend_present() -> bool:
    return (ROOT / "app" / "storage" / "postgres.py").exists()


@pytest.fixture
def cluster(postgres_url: PostgresServer, tmp_path: Path) -> Iterator[list[ServerProcess]]:
    """Two service processes on different ports sharing one fresh database."""
    if not _postgres_backend_present():
        pytest.fail("app/storage/postgres.py is missing: the postgres backend is required")
    database_url = postgres_url.create_database(f"lin_{uuid.uuid4().hex[:16]}")
    with started(postgres_processes(tmp_path, database_url, PROCESSES)) as servers:
        yield servers


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
    start: float = math.inf
    end: float = math.inf
    status: int | None = None
    body: Json | None = None
    error: str | None = None

    @property
    def is_write(self) -> bool:
        return self.kind != "balance"

    @property
    def success_status(self) -> int:
        return 201 if self.kind == "grant" else 200

    @property
    def acked_write(self) -> bool:
        return self.is_write and self.status == self.success_status

    @property
    def sequence(self) -> int:
        assert self.acked_write
        assert self.body is not None
        sequence: int = self.body["sequence"]
        return sequence

    def describe(self) -> str:
        args = {"amount": self.amount, "timestamp": self.timestamp, "expiry": self.expiry}
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
            body = {"amount": call.amount, "timestamp": call.timestamp, "expiry": call.expiry}
            r = await http.post(f"{url}/grants", json=body)
        elif call.kind == "consume":
            body = {"amount": call.amount, "timestamp": call.timestamp}
            r = await http.post(f"{url}/consumptions", json=body)
        else:
            params = {} if call.timestamp is None else {"timestamp": call.timestamp}
            r = await http.get(f"{url}/balance", params=params)
    except httpx.TransportError as exc:
        call.end = time.monotonic()
        call.error = f"{type(exc).__name__}: {exc}"
        return
    call.end = time.monotonic()
    call.status = r.status_code
    call.body = r.json() if r.content else None


# -- the model ------------------------------------------------------------------------------


def apply(model: Account, call: Call) -> Json:
    """An acknowledged write through the reference model; returns the answer it predicts."""
    assert call.amount is not None
    assert call.timestamp is not None
    if call.kind == "grant":
        assert call.expiry is not None
        return model.grant(call.amount, call.timestamp, call.expiry)
    return model.consume(call.amount, call.timestamp)


def check_real_time_of_writes(writes: Sequence[Call]) -> None:
    """(a): no write that ended before another began has the higher sequence. ``writes``
    in sequence order; O(n) with the suffix minimum of end times."""
    suffix_min_end = math.inf
    for later in reversed(range(len(writes))):
        b = writes[later]
        assert suffix_min_end >= b.start, (
            f"real-time violation: a write with sequence > {b.sequence} ended before this one "
            f"started: {b.describe()}"
        )
        suffix_min_end = min(suffix_min_end, writes[later].end)


# -- the linearizability check ----------------------------------------------------------------


@dataclass
class Verdict:
    account_id: str
    calls: int
    writes: int
    reads: int
    rejected: int
    not_found: int
    ledger_entries: int
    expirations: int
    into_debt: int  # consumptions that added debt
    settling: int  # grants that settled debt
    search_states: int


class Placement:
    """(c): find one total order of all calls of an account, consistent with real time, in
    which the acknowledged writes come in sequence order and every other call gets exactly
    the response recorded for it. State = (set of placed calls, model clock); the number of
    placed writes is implied by the set, and the account between two writes is the model's
    copy after the first, read at the clock."""

    def __init__(
        self,
        account_id: str,
        calls: Sequence[Call],
        snapshots: Sequence[Account],
        replayed: Account,
    ) -> None:
        self.account_id = account_id
        self.calls = list(calls)
        self.snapshots = snapshots  # [0] is "the account does not exist yet"
        self.replayed = replayed  # the whole replayed ledger: what as-of reads answer from
        writes = sorted((c for c in self.calls if c.acked_write), key=lambda c: c.sequence)
        self.write_rank = {id(c): rank for rank, c in enumerate(writes, start=1)}
        self.states = 0
        self.deepest: tuple[int, int, int] = (0, 0, 0)  # (mask, writes placed, clock)

    def fits(self, call: Call, writes: int, clock: int) -> tuple[bool, int]:
        """Whether ``call`` answered as recorded with ``writes`` writes placed and the clock
        at ``clock``; and the clock after it. Acknowledged writes are handled by rank."""
        body = call.body or {}
        if call.acked_write:
            rank = self.write_rank[id(call)]
            assert call.timestamp is not None
            ok = rank == writes + 1 and call.timestamp >= clock
            return ok, call.timestamp
        exists = writes > 0
        if call.status == 404:
            return call.kind == "balance" and not exists, clock
        if call.status == 409:
            assert call.timestamp is not None
            ok = exists and call.timestamp < clock and body.get("account_timestamp") == clock
            return ok, clock
        if call.kind == "balance" and call.status == 200 and exists:
            at = clock if call.timestamp is None else call.timestamp
            if at < clock:
                # Entries at or before a time the clock has passed are final: the as-of
                # state is the same wherever the read sits after this point; the read says
                # the watermark it saw (the clock here: a lateness window of 0).
                return body == self._as_of(at, clock), clock
            return body == self.snapshots[writes].read_balance(at), clock  # a projection
        return False, clock

    def _as_of(self, at: int, clock: int) -> Json:
        return {**self.replayed.read_balance(at), "watermark": clock, "final": True}

    def search(self) -> bool:
        n = len(self.calls)
        full = (1 << n) - 1
        seen: set[tuple[int, int]] = set()
        stack: list[tuple[int, int, int]] = [(0, 0, 0)]
        while stack:
            mask, writes, clock = stack.pop()
            mask = self._place_reads_greedily(mask, writes, clock)
            if mask == full:
                return True
            if (mask, clock) in seen:
                continue
            seen.add((mask, clock))
            self.states += 1
            assert self.states <= MAX_SEARCH_STATES, (
                f"{self.account_id}: placement search gave up after {self.states} states"
            )
            if mask.bit_count() > self.deepest[0].bit_count():
                self.deepest = (mask, writes, clock)
            for i in self._candidates(mask):
                call = self.calls[i]
                moves_clock = call.acked_write or (
                    call.kind == "balance" and call.timestamp is not None and call.status == 200
                )
                if not moves_clock:
                    continue  # calls that change nothing were placed greedily if they fit
                ok, new_clock = self.fits(call, writes, clock)
                if ok:
                    stack.append((mask | 1 << i, writes + call.acked_write, new_clock))
        return False

    def _candidates(self, mask: int) -> list[int]:
        """Unplaced calls that no unplaced call precedes in real time."""
        pending = [i for i in range(len(self.calls)) if not mask >> i & 1]
        if not pending:
            return []
        min_end = min(self.calls[i].end for i in pending)
        return [i for i in pending if self.calls[i].start <= min_end]

    def _place_reads_greedily(self, mask: int, writes: int, clock: int) -> int:
        """Place every candidate that changes nothing (reads at the current clock,
        rejections, 404s) and fits now: placing it now can only widen the choices of the
        others, so no search is needed for them."""
        while True:
            placed = False
            for i in self._candidates(mask):
                call = self.calls[i]
                if call.acked_write:
                    continue
                ok, new_clock = self.fits(call, writes, clock)
                if ok and new_clock == clock:
                    mask |= 1 << i
                    placed = True
            if not placed:
                return mask

    def explain(self) -> str:
        mask, writes, clock = self.deepest
        lines = [
            f"{self.account_id}: no linearization; the search got furthest with "
            f"{mask.bit_count()} of {len(self.calls)} calls placed, {writes} writes, "
            f"clock {clock}; the calls that could come next and why they do not fit:"
        ]
        for i in self._candidates(mask):
            call = self.calls[i]
            expected: Any
            if call.acked_write:
                expected = f"write rank {self.write_rank[id(call)]}, next is {writes + 1}"
            elif writes == 0:
                expected = "404 (no write placed yet)"
            else:
                at = clock if call.timestamp is None else call.timestamp
                expected = (
                    self._as_of(at, clock)
                    if at < clock
                    else self.snapshots[writes].read_balance(at)
                )
            lines.append(f"  {call.describe()}\n    model here: {expected}")
        return "\n".join(lines)


def check_account(
    account_id: str, calls: Sequence[Call], ledger: Sequence[Json], final_clock: int
) -> Verdict:
    for call in calls:
        assert call.error is None, f"no response: {call.describe()}"
        allowed = {"grant": {201, 409}, "consume": {200, 409}, "balance": {200, 404}}
        assert call.status in allowed[call.kind], f"unexpected status: {call.describe()}"

    writes = sorted((c for c in calls if c.acked_write), key=lambda c: c.sequence)
    seqs = [c.sequence for c in writes]
    assert len(set(seqs)) == len(seqs), f"{account_id}: two writes share a sequence: {seqs}"

    # (a) real time among the writes
    check_real_time_of_writes(writes)

    # (b) the ledger is exactly the acknowledged writes, replayed through the model
    assert [e["sequence"] for e in ledger] == list(range(1, len(ledger) + 1)), (
        f"{account_id}: ledger sequences are not 1..{len(ledger)}"
    )
    ledger_writes = [e["sequence"] for e in ledger if e["kind"] != "expiration"]
    assert ledger_writes == seqs, (
        f"{account_id}: the ledger's writes {ledger_writes} are not the acknowledged ones {seqs}"
    )
    model = Account(account_id)
    snapshots = [model.copy()]
    for call in writes:
        expected = apply(model, call)
        assert call.body == expected, (
            f"{account_id}: response differs from the model's replay of the ledger order\n"
            f"  call:  {call.describe()}\n  model: {expected}"
        )
        snapshots.append(model.copy())
    if writes:  # the final plain read answers at the clock, which only writes moved
        assert final_clock == model.clock, (account_id, final_clock, model.clock)
    for got, want in zip(ledger, model.entries, strict=False):
        assert got == want, f"{account_id}: ledger entry {got} != model {want}"
    assert len(ledger) == len(model.entries), (
        f"{account_id}: ledger has {len(ledger)} entries, the model {len(model.entries)}"
    )

    # (c) every read and rejection fits somewhere in its real-time window
    placement = Placement(account_id, calls, snapshots, model)
    assert placement.search(), placement.explain()
    return Verdict(
        account_id=account_id,
        calls=len(calls),
        writes=len(writes),
        reads=sum(1 for c in calls if c.kind == "balance" and c.status == 200),
        rejected=sum(1 for c in calls if c.status == 409),
        not_found=sum(1 for c in calls if c.status == 404),
        ledger_entries=len(ledger),
        expirations=sum(1 for e in ledger if e["kind"] == "expiration"),
        into_debt=sum(1 for e in ledger if e["kind"] == "consumption" and e["debt_added"]),
        settling=sum(1 for e in ledger if e["kind"] == "grant" and e["settled_debt"]),
        search_states=placement.states,
    )


# -- the load -------------------------------------------------------------------------------


def _random_call(rng: random.Random, client: int, tick: int, processes: int) -> Call:
    account_id = rng.choice(ACCOUNTS)
    server = rng.randrange(processes)
    ts = max(0, tick - rng.randint(0, JITTER))
    r = rng.random()
    call = Call(client=client, server=server, account_id=account_id, kind="balance")
    if r < 0.40:
        call.kind = "grant"
        call.amount = rng.randint(1, 100)
        call.timestamp = ts
        call.expiry = ts + rng.randint(1, EXPIRY_SPAN)
    elif r < 0.72:
        call.kind = "consume"
        call.amount = rng.randint(1, 120)
        call.timestamp = ts
    elif r < 0.86:
        call.timestamp = ts  # a timed read: a projection or an as-of read
    return call


async def _mixed_load(urls: Sequence[str]) -> list[Call]:
    calls: list[Call] = []
    issued = 0

    async def client(index: int) -> None:
        nonlocal issued
        rng = random.Random(SEED * 1000 + index)
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as http:
            while issued < TOTAL_OPS:
                issued += 1  # also the shared clock: one tick per operation
                call = _random_call(rng, index, issued, len(urls))
                calls.append(call)
                await _send(http, urls[call.server], call)

    await asyncio.gather(*(client(i) for i in range(CLIENTS)))
    return calls


@pytest.mark.timeout(TEST_TIMEOUT_S)
async def test_two_processes_are_linearizable_per_account(cluster: list[ServerProcess]) -> None:
    urls = [s.base_url for s in cluster]
    started = time.monotonic()
    history = await _mixed_load(urls)
    load_s = time.monotonic() - started

    verdicts: list[Verdict] = []
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as http:
        for account_id in ACCOUNTS:
            final = Call(client=-1, server=0, account_id=account_id, kind="balance")
            await _send(http, urls[0], final)  # after everything: real time puts it last
            history.append(final)
            ledgers = [await whole_ledger(http, url, account_id) for url in urls]
            assert all(ledger == ledgers[0] for ledger in ledgers), (
                f"{account_id}: the processes show different ledgers"
            )
            calls = [c for c in history if c.account_id == account_id]
            final_clock = final.body["timestamp"] if final.status == 200 and final.body else 0
            verdicts.append(check_account(account_id, calls, ledgers[0], final_clock))

    print(
        f"\nlinearizability: {len(history)} calls ({TOTAL_OPS} concurrent + "
        f"{len(ACCOUNTS)} final reads), {CLIENTS} clients, {len(cluster)} processes, "
        f"load {load_s:.2f} s: linearizable per account"
    )
    for v in verdicts:
        print(
            f"  {v.account_id}: {v.calls} calls, {v.writes} writes acknowledged, "
            f"{v.reads} reads, {v.rejected} x 409, {v.not_found} x 404; ledger "
            f"{v.ledger_entries} entries ({v.expirations} expirations, {v.into_debt} "
            f"consumptions into debt, {v.settling} grants settling debt); "
            f"{v.search_states} search states"
        )
    assert sum(v.rejected for v in verdicts) > 0, "no 409 at all: the load did not contend"
    assert all(v.writes > 0 for v in verdicts)


# -- kill one process mid-load ----------------------------------------------------------------


@pytest.mark.timeout(TEST_TIMEOUT_S)
async def test_one_process_killed_mid_load_loses_nothing_acknowledged(
    cluster: list[ServerProcess],
) -> None:
    survivor, victim = 0, 1
    urls = [s.base_url for s in cluster]
    calls: list[Call] = []
    issued = 0
    acked = 0
    trigger = asyncio.Event()
    kill_started = math.inf  # time.monotonic() when the SIGKILL was decided
    killed_at = math.inf  # time.monotonic() once the victim has been reaped

    async def client(index: int) -> None:
        nonlocal issued, acked
        rng = random.Random(SEED * 2000 + index)
        up = [True] * len(urls)  # as a load balancer would: drop a process once it fails
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as http:
            while issued < KILL_TOTAL_OPS:
                issued += 1  # unique, increasing timestamps: each entry names its call
                live = [i for i, u in enumerate(up) if u]
                call = Call(
                    client=index,
                    server=rng.choice(live),
                    account_id=rng.choice(KILL_ACCOUNTS),
                    kind="grant" if rng.random() < 0.55 else "consume",
                    amount=rng.randint(1, 100),
                    timestamp=issued,
                )
                if call.kind == "grant":
                    call.expiry = issued + rng.randint(1, 4 * EXPIRY_SPAN)
                calls.append(call)
                if call.server == victim and acked >= KILL_AFTER_ACKS:
                    trigger.set()  # kill while this request is on its way to the victim
                await _send(http, urls[call.server], call)
                if call.error is not None:
                    up[call.server] = False
                elif call.acked_write:
                    acked += 1

    async def killer() -> None:
        nonlocal kill_started, killed_at
        await trigger.wait()
        kill_started = time.monotonic()
        await asyncio.to_thread(cluster[victim].kill)
        killed_at = time.monotonic()

    kill_task = asyncio.create_task(killer())
    await asyncio.gather(*(client(i) for i in range(KILL_CLIENTS)))
    assert trigger.is_set(), "the load ended before the kill was due"
    await kill_task
    victim_proc = cluster[victim].proc
    assert victim_proc is not None
    assert victim_proc.returncode == -9

    # The survivor served everything, before, during and after the kill.
    to_survivor = [c for c in calls if c.server == survivor]
    failed = [c for c in to_survivor if c.status not in (c.success_status, 409)]
    assert not failed, "the survivor failed requests:\n" + "\n".join(
        c.describe() for c in failed[:10]
    )
    after_kill = [c for c in to_survivor if c.start > killed_at and c.acked_write]
    assert len(after_kill) >= MIN_SURVIVOR_ACKS_AFTER_KILL, (
        f"only {len(after_kill)} writes acknowledged by the survivor after the kill"
    )
    # The victim answered everything it was sent before the kill; what was on its way when it
    # died is in doubt; nothing sent after it was reaped can have been applied.
    to_victim = [c for c in calls if c.server == victim]
    early_failures = [c for c in to_victim if c.error is not None and c.end < kill_started]
    assert not early_failures, early_failures[0].describe()
    wrong = [c for c in to_victim if c.error is None and c.status not in (c.success_status, 409)]
    assert not wrong, wrong[0].describe()
    in_doubt = {id(c) for c in to_victim if c.error is not None and c.start < killed_at}
    committed_in_doubt = 0

    # Nothing acknowledged is lost; the ledger, read through the survivor, replays exactly.
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as http:
        for account_id in KILL_ACCOUNTS:
            ledger = await whole_ledger(http, urls[survivor], account_id)
            mine = [c for c in calls if c.account_id == account_id]
            by_ts = {c.timestamp: c for c in mine}
            assert [e["sequence"] for e in ledger] == list(range(1, len(ledger) + 1))
            ledger_writes = [by_ts.get(e["timestamp"]) for e in ledger if e["kind"] != "expiration"]
            for entry, call in zip(
                (e for e in ledger if e["kind"] != "expiration"), ledger_writes, strict=True
            ):
                assert call is not None, f"{account_id}: ledger entry from no call: {entry}"
                assert call.acked_write or id(call) in in_doubt, (
                    f"{account_id}: ledger holds a call that was not acknowledged: "
                    f"{call.describe()}"
                )
                assert (entry["kind"] == "grant") == (call.kind == "grant"), entry
                assert entry["amount"] == call.amount, (entry, call.describe())
                if call.kind == "grant":
                    assert entry["expiry"] == call.expiry, (entry, call.describe())
            present = {id(c) for c in ledger_writes if c is not None}
            committed_in_doubt += len(present & in_doubt)
            lost = [c for c in mine if c.acked_write and id(c) not in present]
            assert not lost, f"{account_id}: acknowledged writes lost:\n" + "\n".join(
                c.describe() for c in lost
            )
            check_real_time_of_writes(
                sorted((c for c in mine if c.acked_write), key=lambda c: c.sequence)
            )
            # Replay what the ledger holds (in-doubt calls that committed included); every
            # acknowledged response must be reproduced.
            model = Account(account_id)
            for call in ledger_writes:
                assert call is not None
                expected = apply(model, call)
                if call.acked_write:
                    assert call.body == expected, (call.describe(), expected)
            assert ledger == model.entries, f"{account_id}: the ledger does not replay"
            r = await http.get(f"{urls[survivor]}/v1/accounts/{account_id}/balance")
            assert r.status_code == 200, r.text
            assert r.json() == model.read_balance()

    print(
        f"\nkill: {len(calls)} calls through {len(cluster)} processes, process {victim} "
        f"SIGKILLed after {KILL_AFTER_ACKS} acknowledged writes; "
        f"{sum(c.acked_write for c in calls)} writes acknowledged, "
        f"{len(after_kill)} by the survivor after the kill; {len(in_doubt)} in flight on the "
        f"killed process ({committed_in_doubt} of them committed); none lost"
    )
