"""Crash test: a real server process under concurrent load, killed with SIGKILL again and again.

Design (issue 3, item 4):

- One ``gpu-credits serve`` process (sqlite storage in ``tmp_path``) is restarted on the same
  data directory after every kill. ``KILLS`` rounds; each round runs ``WORKERS`` asyncio workers,
  each with its own ``httpx.AsyncClient`` and its own account, so every account's operations
  are issued one after the other by one worker and their order is known exactly.
- A worker issues grants, consumptions and timed reads (``GET balance?timestamp=T``, which
  must change nothing: reads are safe) with non-decreasing timestamps, some POSTs with an
  ``Idempotency-Key``, plus plain reads that it checks against its model at once. A 2xx
  response acknowledges an operation; the worker applies it to the account's model and
  compares the response with the model's. A transport error (the server died) leaves that
  one operation "in flight": the worker stops for the round.
- The kill comes at a random moment: once a random number of operations of the round has been
  acknowledged (so the load is under way), plus a random delay (``random.Random(SEED)``).
- After each restart, per account: the in-flight operation is either wholly present (exactly the
  entries the model predicts for it follow the acknowledged ones) or wholly absent, never in
  between; then the whole ledger (every page of ``GET .../ledger``) must equal the model's
  entries, which includes every acknowledged operation at the sequence its response reported,
  and ``GET balance`` and ``GET grants`` must equal the model's view.
- Idempotent retries after a crash: a keyed in-flight operation is retried and must replay if it
  was present (``Idempotent-Replayed: true``, the body the model predicts) or apply once if it
  was absent; a few keyed operations acknowledged earlier are retried and must replay their
  original status and body, changing nothing (the next round's full ledger check proves that).

The model is the reference model of ``tests/support/model.py``: SPEC section 1's rules and the
ledger's entry format, deliberately plain.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from tests.support.kill_round import Round
from tests.support.model import Account as AccountModel
from tests.support.server_process import ServerProcess

Json = dict[str, Any]
OpKind = Literal["grant", "consume", "read"]
OpState = Literal["sent", "acked", "in_flight", "present", "absent", "rejected"]

SEED = int(os.environ.get("CRASH_TEST_SEED", "20250403"))
KILLS = 10
WORKERS = 24
REQUEST_TIMEOUT_S = 10.0
KILL_CONDITION_TIMEOUT_S = 20.0  # the load must get going well within this
LEDGER_PAGE_LIMIT = 1000
RETRIES_OF_ACKED_PER_ACCOUNT = 2
TEST_TIMEOUT_S = 60  # the whole test, server restarts included


# -- the model -------------------------------------------------------------------------


@dataclass
class Op:
    account_id: str
    kind: OpKind
    amount: int  # 0 for a read
    timestamp: int
    expiry: int  # 0 unless a grant
    key: str | None
    state: OpState = "sent"
    reached_server: bool = True  # False: the connection was refused, so it was never sent
    status_code: int | None = None
    response: Json | None = None

    @property
    def expected_status(self) -> int:
        return 201 if self.kind == "grant" else 200

    @property
    def entry_kind(self) -> str:
        return "consumption" if self.kind == "consume" else self.kind

    def describe(self) -> str:
        return (
            f"{self.kind}(account={self.account_id}, amount={self.amount}, "
            f"timestamp={self.timestamp}, expiry={self.expiry}, key={self.key})"
        )


def apply(model: AccountModel, op: Op) -> Json:
    """Apply an accepted operation to the reference model; return the body the service must
    send. A read is safe: it changes nothing, not even the clock."""
    if op.kind == "grant":
        return model.grant(op.amount, op.timestamp, op.expiry)
    if op.kind == "consume":
        return model.consume(op.amount, op.timestamp)
    return model.read_balance(op.timestamp)


# -- the load --------------------------------------------------------------------------


@dataclass
class Account:
    account_id: str
    rng: random.Random
    model: AccountModel
    ops: list[Op] = field(default_factory=list)
    issued_clock: int = 0  # latest timestamp ever sent, acknowledged or not
    keys_issued: int = 0
    in_flight: Op | None = None


@functools.cache
def _tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def make_client(base_url: str) -> httpx.AsyncClient:
    # One TLS context for every client: httpx builds (slowly) one per client otherwise, and
    # the test makes a client per worker per round. The server speaks plain HTTP anyway.
    return httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT_S, verify=_tls())


def request_for(op: Op) -> tuple[str, str, Json | None, dict[str, str]]:
    """(method, url, json body, headers) of an operation."""
    base = f"/v1/accounts/{op.account_id}"
    headers = {} if op.key is None else {"Idempotency-Key": op.key}
    if op.kind == "grant":
        body = {"amount": op.amount, "timestamp": op.timestamp, "expiry": op.expiry}
        return "POST", f"{base}/grants", body, headers
    if op.kind == "consume":
        body = {"amount": op.amount, "timestamp": op.timestamp}
        return "POST", f"{base}/consumptions", body, headers
    return "GET", f"{base}/balance?timestamp={op.timestamp}", None, headers


async def send(client: httpx.AsyncClient, op: Op) -> httpx.Response:
    method, url, body, headers = request_for(op)
    return await client.request(method, url, json=body, headers=headers)


def next_op(account: Account) -> Op | None:
    """The worker's next operation, or None for a plain read."""
    rng = account.rng
    x = rng.random()
    if account.model.exists and x >= 0.88:
        return None
    timestamp = account.issued_clock + rng.randint(0, 3)
    account.issued_clock = timestamp
    if not account.model.exists or x < 0.4:
        kind: OpKind = "grant"
    elif x < 0.75:
        kind = "consume"
    else:
        kind = "read"
    key = None
    if kind != "read" and rng.random() < 0.4:
        account.keys_issued += 1
        key = f"{account.account_id}:key-{account.keys_issued}"
    return Op(
        account_id=account.account_id,
        kind=kind,
        amount=0 if kind == "read" else rng.randint(1, 100 if kind == "grant" else 150),
        timestamp=timestamp,
        expiry=timestamp + rng.randint(1, 40) if kind == "grant" else 0,
        key=key,
    )


async def worker(base_url: str, account: Account, rnd: Round) -> None:
    """Drive one account until the server dies (the first transport error) or a check fails."""
    model = account.model
    async with make_client(base_url) as client:
        while not rnd.failures:
            op = next_op(account)
            if op is None:  # a plain read, checked against the model at once
                grants = account.rng.random() < 0.5
                url = f"/v1/accounts/{account.account_id}/{'grants' if grants else 'balance'}"
                try:
                    r = await client.get(url)
                except httpx.TransportError:
                    return
                expected = model.live_grants() if grants else model.read_balance()
                if r.status_code != 200 or r.json() != expected:
                    rnd.fail(f"GET {url}: {r.status_code} {r.text}, model says {expected}")
                    return
                continue
            account.ops.append(op)
            try:
                r = await send(client, op)
            except httpx.TransportError as exc:
                op.state = "in_flight"
                op.reached_server = not isinstance(exc, httpx.ConnectError)
                account.in_flight = op
                return
            if r.status_code != op.expected_status:
                op.state = "rejected"
                rnd.fail(f"{op.describe()}: unexpected {r.status_code} {r.text}")
                return
            op.state, op.status_code, op.response = "acked", r.status_code, r.json()
            expected = apply(model, op)
            if op.response != expected:
                rnd.fail(f"{op.describe()}: answered {op.response}, model says {expected}")
                return
            rnd.ack()


# -- the checks after a restart --------------------------------------------------------


async def fetch_ledger(client: httpx.AsyncClient, account_id: str) -> list[Json] | None:
    """Every entry of the account's ledger, page by page; None if the account is unknown."""
    entries: list[Json] = []
    after = 0
    while True:
        r = await client.get(
            f"/v1/accounts/{account_id}/ledger",
            params={"after": after, "limit": LEDGER_PAGE_LIMIT},
        )
        if r.status_code == 404 and not entries:
            return None
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["entries"]) <= LEDGER_PAGE_LIMIT
        entries.extend(page["entries"])
        if page["next_after"] is None:
            return entries
        after = page["next_after"]


@dataclass(frozen=True)
class Resolved:
    op: Op
    present: bool
    predicted: Json  # the response the model predicts for it


async def resolve_in_flight(
    client: httpx.AsyncClient, account: Account, ledger: list[Json] | None
) -> Resolved | None:
    """Decide whether the in-flight operation took effect, wholly or not at all, and fold it
    into the model if it did."""
    op = account.in_flight
    if op is None:
        return None
    account.in_flight = None
    trial = account.model.copy()
    known = len(trial.entries)
    predicted = apply(trial, op)
    its_entries = trial.entries[known:]
    beyond = (ledger or [])[known:]
    if its_entries:
        # Its entries are all there after the acknowledged ones, or none of them is.
        assert beyond in ([], its_entries), (
            f"in-flight {op.describe()} is partly present: the ledger has {beyond} after the "
            f"acknowledged entries, the operation would have written {its_entries}"
        )
        present = beyond == its_entries
    elif ledger is None:
        present = False  # the account does not exist
    else:
        # A read writes nothing; the full ledger and view checks prove it changed nothing.
        assert op.kind == "read", op.describe()
        present = False
    assert op.reached_server or not present, f"{op.describe()} was refused, yet took effect"
    op.state = "present" if present else "absent"
    if present:
        account.model = trial
    return Resolved(op, present, predicted)


def check_acknowledged(account: Account, ledger: list[Json]) -> None:
    """Every acknowledged grant and consumption has its entry at the sequence it was told."""
    for op in account.ops:
        if op.state != "acked" or op.kind == "read":
            continue
        assert op.response is not None
        sequence = op.response["sequence"]
        assert sequence <= len(ledger), (
            f"acknowledged {op.describe()} (sequence {sequence}) is lost"
        )
        entry = ledger[sequence - 1]
        assert entry["kind"] == op.entry_kind, (op.describe(), sequence, entry)
        assert entry["timestamp"] == op.timestamp, (op.describe(), sequence, entry)
        assert entry["amount"] == op.amount, (op.describe(), sequence, entry)


def check_ledger(account: Account, ledger: list[Json], resolved: Resolved | None) -> None:
    expected = account.model.entries
    if ledger == expected:
        return
    diverge = next(
        (i for i, (a, b) in enumerate(zip(ledger, expected, strict=False)) if a != b),
        min(len(ledger), len(expected)),
    )
    last = "none" if resolved is None else f"{resolved.op.describe()} {resolved.op.state}"
    pytest.fail(
        f"{account.account_id}: the ledger ({len(ledger)} entries) differs from the replay "
        f"({len(expected)}) at index {diverge}: {ledger[diverge : diverge + 2]} vs "
        f"{expected[diverge : diverge + 2]}; in-flight operation: {last}"
    )


async def check_get(client: httpx.AsyncClient, url: str, expected: Json | None) -> None:
    """GET ``url`` answers ``expected`` (None: 404)."""
    r = await client.get(url)
    if expected is None:
        assert r.status_code == 404, (url, r.text)
        return
    assert r.status_code == 200, (url, r.text)
    assert r.json() == expected, (url, r.text, expected)


async def retry_idempotent(
    client: httpx.AsyncClient, account: Account, resolved: Resolved | None
) -> None:
    """Retries after the crash: an in-flight keyed request replays if it took effect and
    applies once if it did not; acknowledged keyed requests replay their original answer."""
    if resolved is not None and resolved.op.key is not None:
        op = resolved.op
        r = await send(client, op)
        assert r.status_code == op.expected_status, (op.describe(), r.text)
        if resolved.present:
            assert r.headers.get("Idempotent-Replayed") == "true", (op.describe(), r.headers)
            assert r.json() == resolved.predicted, (op.describe(), r.text, resolved.predicted)
        else:
            assert "Idempotent-Replayed" not in r.headers, (op.describe(), r.headers)
            expected = apply(account.model, op)
            assert r.json() == expected, (op.describe(), r.text, expected)
        op.state, op.status_code, op.response = "acked", r.status_code, r.json()
    keyed = [op for op in account.ops if op.state == "acked" and op.key is not None]
    for op in account.rng.sample(keyed, min(RETRIES_OF_ACKED_PER_ACCOUNT, len(keyed))):
        r = await send(client, op)
        assert r.status_code == op.status_code, (op.describe(), r.status_code, r.text)
        assert r.headers.get("Idempotent-Replayed") == "true", (op.describe(), r.headers)
        assert r.json() == op.response, (op.describe(), r.text, op.response)


async def check_account(client: httpx.AsyncClient, account: Account) -> Resolved | None:
    """After a restart: the account's state equals the model's replay, entry for entry."""
    ledger = await fetch_ledger(client, account.account_id)
    resolved = await resolve_in_flight(client, account, ledger)
    model = account.model
    base = f"/v1/accounts/{account.account_id}"
    if model.exists:
        assert ledger is not None, f"{account.account_id} is lost (404) after the restart"
        check_acknowledged(account, ledger)
        check_ledger(account, ledger, resolved)
    else:
        assert ledger is None, f"{account.account_id}: nothing took effect, yet {ledger}"
    await check_get(client, f"{base}/balance", model.read_balance() if model.exists else None)
    await check_get(client, f"{base}/grants", model.live_grants() if model.exists else None)
    await retry_idempotent(client, account, resolved)
    return resolved


# -- the test --------------------------------------------------------------------------


@pytest.mark.timeout(TEST_TIMEOUT_S)
async def test_sigkill_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    server = ServerProcess(tmp_path / "data", storage="sqlite")
    accounts = [
        Account(f"acct-{i:02d}", random.Random(rng.getrandbits(64)), AccountModel(f"acct-{i:02d}"))
        for i in range(WORKERS)
    ]
    report: list[str] = []
    outcomes = {"present": 0, "absent": 0, "never sent": 0}
    await asyncio.to_thread(server.start)
    try:
        for kill in range(1, KILLS + 1):
            rnd = Round(kill_after_acks=rng.randint(1, 300))
            delay_s = rng.uniform(0.0, 0.05)
            tasks = [asyncio.create_task(worker(server.base_url, a, rnd)) for a in accounts]
            try:
                await asyncio.wait_for(rnd.trigger.wait(), KILL_CONDITION_TIMEOUT_S)
            except TimeoutError:
                rnd.fail(f"{rnd.acked} operations acknowledged in {KILL_CONDITION_TIMEOUT_S} s")
            await asyncio.sleep(delay_s)  # the random moment of the crash
            await asyncio.to_thread(server.kill)
            await asyncio.gather(*tasks)
            assert not rnd.failures, f"seed {SEED}, kill {kill}: {rnd.failures[:3]}"

            restart_s = await asyncio.to_thread(server.start)
            async with make_client(server.base_url) as client:
                resolved = await asyncio.gather(*(check_account(client, a) for a in accounts))
            counts = {"present": 0, "absent": 0, "never sent": 0}
            for r in resolved:
                if r is not None:
                    outcome = "present" if r.present else "absent"
                    counts[outcome if r.op.reached_server else "never sent"] += 1
            for k, v in counts.items():
                outcomes[k] += v
            report.append(
                f"kill {kill}: {rnd.acked} acknowledged; unanswered: {counts}; "
                f"restart {restart_s:.1f} s"
            )
    finally:
        server.kill()
    acked = sum(op.state in ("acked", "present") for a in accounts for op in a.ops)
    print(
        f"\ncrash test (seed {SEED}): {KILLS} kills, {acked} operations took effect, "
        f"unanswered at a kill: {outcomes}; {time.monotonic() - started:.1f} s"
    )
    print("\n".join(report))
