"""Crash test with late writes (issue 12, item 2): a late write and all its restatements are
one commit, so a crash leaves all of it or none.

Like ``tests/test_crash.py``: one ``gpu-credits serve`` process (sqlite storage in
``tmp_path``, started the way README starts it) is SIGKILLed ``KILLS`` times under load and
restarted on the same data directory. Here the service has a lateness window
(``GPU_CREDITS_LATENESS_WINDOW=WINDOW``) and some accounts their own, smaller one
(``PUT .../settings``, before the load).

- ``WORKERS`` asyncio workers, each with its own client and account, so every account's
  operations are issued one after the other and their order is known exactly. A worker
  sends grants (unrestricted or scoped to GPU classes), consumptions (with or without a
  class) and voids, some with an ``Idempotency-Key``; their timestamps are in order (at or
  after the clock), late (from the watermark to the clock: they restate later entries) or
  too late (before the watermark: 409). Each answer is compared at once with the reference
  model of ``tests/support/late_model.py`` (sort-and-replay of the accepted writes, SPEC
  sections 1, 5, 6, 7), and so are now and then a read: a balance (as of a time before the
  clock, a projection, per class), the live grants, the settings. A transport error (the
  server died) leaves that one operation in flight: the worker stops for the round.
- The kill comes once a random number of operations of the round have been acknowledged,
  plus a random delay (``random.Random(SEED)``).
- After each restart, per account: the ledger (every page) must be exactly what the model
  gives for the acknowledged writes, or for those plus the one in flight: all of it
  (its own entry, every entry it restated with its new revision and balance after, the
  expirations it made appear or undid), or none of it, never a part. Then the whole ledger,
  entries in effective order with their effects, balance after, revision, sequence and
  finality, must equal the model's replay; so must the balance (in total and per class, at
  the clock, as of a few times before it, projected), the live grants and the settings.
- Idempotent retries: an in-flight keyed write is retried and must replay if it took
  effect (``Idempotent-Replayed: true`` and the answer the model predicts) or apply once
  if not; a few keyed writes acknowledged earlier must replay their first answer, byte for
  byte, even though later late writes have restated their entries since.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import httpx
import pytest

from tests.support.kill_round import Round
from tests.support.late_model import JSON, LateAccount, Refused
from tests.support.server_process import ServerProcess
from tests.test_crash import fetch_ledger, make_client

OpKind = Literal["grant", "consume", "void"]
OpState = Literal["sent", "acked", "refused", "in_flight", "present", "absent"]

SEED = int(os.environ.get("CRASH_LATE_TEST_SEED", "20260612"))
KILLS = 10
WORKERS = 16
WINDOW = 50  # the service's lateness window
OWN_WINDOW = 20  # every fourth account's own
CLASSES = ("h100", "a100")
KILL_CONDITION_TIMEOUT_S = 20.0  # the load must get going well within this
RETRIES_OF_ACKED_PER_ACCOUNT = 2
TEST_TIMEOUT_S = 90  # the whole test, server restarts included


@dataclass
class Op:
    account_id: str
    kind: OpKind
    timestamp: int
    amount: int = 0
    expiry: int = 0
    resources: list[str] | None = None  # a grant's classes
    resource: str | None = None  # a consumption's class
    grant_id: int = 0  # the grant a void names
    key: str | None = None
    late: bool = False  # sent with a timestamp before the account's clock
    state: OpState = "sent"
    reached_server: bool = True  # False: the connection was refused, so it was never sent
    status_code: int | None = None
    response: JSON | None = None

    def describe(self) -> str:
        shown = {
            k: v
            for k, v in vars(self).items()
            if k in ("timestamp", "amount", "expiry", "resources", "resource", "grant_id", "key")
            and v not in (None, 0)
        }
        return f"{self.kind}({self.account_id}, {shown})"

    def request(self) -> tuple[str, JSON, dict[str, str]]:
        """(path, body, headers)."""
        base = f"/v1/accounts/{self.account_id}"
        headers = {} if self.key is None else {"Idempotency-Key": self.key}
        if self.kind == "grant":
            body: JSON = {"amount": self.amount, "timestamp": self.timestamp, "expiry": self.expiry}
            if self.resources is not None:
                body["resources"] = self.resources
            return f"{base}/grants", body, headers
        if self.kind == "consume":
            body = {"amount": self.amount, "timestamp": self.timestamp}
            if self.resource is not None:
                body["resource"] = self.resource
            return f"{base}/consumptions", body, headers
        return f"{base}/grants/{self.grant_id}/void", {"timestamp": self.timestamp}, headers

    @property
    def success_status(self) -> int:
        return 201 if self.kind == "grant" else 200


def apply(model: LateAccount, op: Op) -> JSON:
    """The write through the model: the answer it predicts, or ``Refused``."""
    if op.kind == "grant":
        return model.grant(op.amount, op.timestamp, op.expiry, op.resources)
    if op.kind == "consume":
        return model.consume(op.amount, op.timestamp, op.resource)
    return model.void(op.grant_id, op.timestamp)


async def send(client: httpx.AsyncClient, op: Op) -> httpx.Response:
    path, body, headers = op.request()
    return await client.post(path, json=body, headers=headers)


def check_answer(op: Op, r: httpx.Response, expected: JSON | Refused) -> str | None:
    """None if ``r`` is what the model predicts, else what differs."""
    if isinstance(expected, Refused):
        body = r.json() if r.content else {}
        got = {k: body.get(k) for k in expected.members}
        slug = str(body.get("type", "")).rsplit(":", 1)[-1]
        if (r.status_code, slug, got) != (expected.status, expected.slug, expected.members):
            return f"answered {r.status_code} {r.text}, model refuses: {expected}"
        return None
    if r.status_code != op.success_status or r.json() != expected:
        return f"answered {r.status_code} {r.text}, model says {expected}"
    return None


# -- the load --------------------------------------------------------------------------


@dataclass
class Account:
    account_id: str
    rng: random.Random
    model: LateAccount
    ops: list[Op] = field(default_factory=list)
    keys_issued: int = 0
    in_flight: Op | None = None


def next_op(account: Account) -> Op:
    rng, model = account.rng, account.model
    clock, watermark = model.clock, model.watermark
    x = rng.random()
    if x < 0.55:
        timestamp = clock + rng.randint(0, 3)
    elif x < 0.95 or watermark == 0:
        timestamp = rng.randint(watermark, clock)  # late: restates what comes after it
    else:
        timestamp = rng.randint(max(0, watermark - 10), watermark - 1)  # too late: 409
    y = rng.random()
    open_grants = [g for g in model.grants if g not in model.voided]
    if y < 0.35 or not model.exists:
        resources = rng.choice([None, None, [CLASSES[0]], [CLASSES[1]], list(CLASSES)])
        op = Op(account.account_id, "grant", timestamp, amount=rng.randint(1, 100))
        op.expiry = timestamp + rng.randint(1, 60)
        op.resources = resources
    elif y < 0.88 or not open_grants:
        op = Op(account.account_id, "consume", timestamp, amount=rng.randint(1, 120))
        op.resource = rng.choice([None, None, *CLASSES])
    else:
        op = Op(account.account_id, "void", timestamp, grant_id=rng.choice(open_grants))
        # At or after the grant's own timestamp (an earlier one is 422: not this test's).
        op.timestamp = max(timestamp, model.grants[op.grant_id].timestamp)
    op.late = op.timestamp < clock
    if rng.random() < 0.4:
        account.keys_issued += 1
        op.key = f"{account.account_id}:key-{account.keys_issued}"
    return op


async def check_read(client: httpx.AsyncClient, account: Account) -> str | None:
    """One read, compared with the model at once (reads change nothing)."""
    rng, model = account.rng, account.model
    base = f"/v1/accounts/{account.account_id}"
    x = rng.random()
    resource = rng.choice([None, *CLASSES])
    params: dict[str, str] = {} if resource is None else {"resource": resource}
    if x < 0.5:
        at = rng.randint(max(0, model.watermark - 10), model.clock + 5)
        url, expected = f"{base}/balance", model.read_balance(at, resource)
        params["timestamp"] = str(at)
    elif x < 0.8:
        url, expected = f"{base}/grants", model.live_grants(resource)
    else:
        url, expected, params = f"{base}/settings", model.settings(), {}
    r = await client.get(url, params=params)
    if r.status_code != 200 or r.json() != expected:
        return f"GET {url} {params}: {r.status_code} {r.text}, model says {expected}"
    return None


async def worker(base_url: str, account: Account, rnd: Round) -> None:
    """Drive one account until the server dies (the first transport error) or a check fails."""
    async with make_client(base_url) as client:
        while not rnd.failures:
            if account.model.exists and account.rng.random() < 0.08:
                try:
                    failure = await check_read(client, account)
                except httpx.TransportError:
                    return
                if failure is not None:
                    rnd.fail(f"{account.account_id}: {failure}")
                    return
                continue
            op = next_op(account)
            account.ops.append(op)
            try:
                r = await send(client, op)
            except httpx.TransportError as exc:
                op.state = "in_flight"
                op.reached_server = not isinstance(exc, httpx.ConnectError)
                account.in_flight = op
                return
            expected: JSON | Refused
            try:
                expected = apply(account.model, op)
            except Refused as refused:
                expected = refused
            failure = check_answer(op, r, expected)
            if failure is not None:
                rnd.fail(f"{op.describe()}: {failure}")
                return
            op.status_code, op.response = r.status_code, r.json()
            op.state = "refused" if isinstance(expected, Refused) else "acked"
            rnd.ack()


# -- the checks after a restart --------------------------------------------------------


@dataclass(frozen=True)
class Resolved:
    op: Op
    present: bool
    predicted: JSON | Refused  # the answer the model gives it on the state it was sent to


def resolve_in_flight(account: Account, ledger: list[JSON] | None) -> Resolved | None:
    """Whether the in-flight write took effect: the ledger must be the model's without it
    or with it, entry for entry (a part of it, say its own entry without the restatements
    it made, is neither). Folds it into the model if it took effect."""
    op = account.in_flight
    if op is None:
        return None
    account.in_flight = None
    without = account.model
    got = ledger or []
    trial = without.copy()
    try:
        predicted: JSON | Refused = apply(trial, op)
    except Refused as refused:
        predicted = refused
    candidates = [without.entries]
    if not isinstance(predicted, Refused):
        candidates.append(trial.entries)
    if got not in candidates:
        first = next(
            (i for i, (a, b) in enumerate(zip(got, trial.entries, strict=False)) if a != b),
            min(len(got), len(trial.entries)),
        )
        pytest.fail(
            f"{account.account_id}: in-flight {op.describe()} is partly present (or something "
            f"else is wrong): the ledger has {len(got)} entries, the model {len(without.entries)} "
            f"without it and {len(trial.entries)} with it; with it, they first differ at "
            f"{first}: {got[first : first + 2]} vs {trial.entries[first : first + 2]}"
        )
    present = len(candidates) == 2 and got == candidates[1]
    assert op.reached_server or not present, f"{op.describe()} was never sent, yet took effect"
    op.state = "present" if present else "absent"
    if present:
        account.model = trial
    return Resolved(op, present, predicted)


async def check_views(client: httpx.AsyncClient, account: Account) -> None:
    """Balances (at the clock, as of times before it, projected; in total and per class),
    live grants and settings: the model's."""
    model = account.model
    base = f"/v1/accounts/{account.account_id}"
    if not model.exists:
        r = await client.get(f"{base}/balance")
        assert r.status_code == 404, r.text
        return
    # As of a time before the watermark (final) and one after it, and a projection.
    times = {max(0, model.watermark - 1), (model.watermark + model.clock) // 2, model.clock + 7}
    for resource in (None, *CLASSES):
        extra = {} if resource is None else {"resource": resource}
        for at in [None, *sorted(times)]:
            params = dict(extra) if at is None else {**extra, "timestamp": str(at)}
            await expect_get(client, f"{base}/balance", params, model.read_balance(at, resource))
        await expect_get(client, f"{base}/grants", extra, model.live_grants(resource))
    await expect_get(client, f"{base}/settings", {}, model.settings())


async def expect_get(
    client: httpx.AsyncClient, url: str, params: dict[str, str], expected: JSON
) -> None:
    r = await client.get(url, params=params)
    assert r.status_code == 200, (url, params, r.text)
    assert r.json() == expected, (url, params, r.text, expected)


async def retry_idempotent(
    client: httpx.AsyncClient, account: Account, resolved: Resolved | None
) -> None:
    """An in-flight keyed write replays if it took effect and applies once if not; keyed
    writes acknowledged earlier replay their first answer (restated since or not)."""
    if resolved is not None and resolved.op.key is not None:
        op = resolved.op
        r = await send(client, op)
        if resolved.present:
            assert r.headers.get("Idempotent-Replayed") == "true", (op.describe(), r.headers)
            assert isinstance(resolved.predicted, dict)
            assert r.json() == resolved.predicted, (op.describe(), r.text, resolved.predicted)
            op.state = "acked"
        else:
            assert "Idempotent-Replayed" not in r.headers, (op.describe(), r.headers)
            expected: JSON | Refused
            try:
                expected = apply(account.model, op)
            except Refused as refused:
                expected = refused
            failure = check_answer(op, r, expected)
            assert failure is None, f"retry of {op.describe()}: {failure}"
            op.state = "refused" if isinstance(expected, Refused) else "acked"
        op.status_code, op.response = r.status_code, r.json()
    keyed = [op for op in account.ops if op.state == "acked" and op.key is not None]
    for op in account.rng.sample(keyed, min(RETRIES_OF_ACKED_PER_ACCOUNT, len(keyed))):
        r = await send(client, op)
        assert r.status_code == op.status_code, (op.describe(), r.status_code, r.text)
        assert r.headers.get("Idempotent-Replayed") == "true", (op.describe(), r.headers)
        assert r.json() == op.response, (op.describe(), r.text, op.response)


async def check_account(base_url: str, account: Account) -> Resolved | None:
    """After a restart: the account is exactly the model's replay."""
    async with make_client(base_url) as client:
        ledger = await fetch_ledger(client, account.account_id)
        resolved = resolve_in_flight(account, ledger)
        model = account.model
        model.check_replay()
        if model.exists:
            assert ledger == model.entries, f"{account.account_id}: the ledger is not the replay"
        else:
            assert ledger is None, f"{account.account_id}: nothing took effect, yet {ledger}"
        await check_views(client, account)
        await retry_idempotent(client, account, resolved)
    return resolved


async def set_up(client: httpx.AsyncClient, accounts: list[Account]) -> None:
    """Every account's first grant; every fourth account gets its own, smaller window."""
    for index, account in enumerate(accounts):
        model = account.model
        op = Op(account.account_id, "grant", 0, amount=50, expiry=40)
        r = await send(client, op)
        assert check_answer(op, r, apply(model, op)) is None, r.text
        op.state, op.status_code, op.response = "acked", r.status_code, r.json()
        account.ops.append(op)
        if index % 4 == 0:
            r = await client.put(
                f"/v1/accounts/{account.account_id}/settings",
                json={"lateness_window": OWN_WINDOW},
            )
            assert r.status_code == 200, r.text
            assert r.json() == model.set_window(OWN_WINDOW, WINDOW)


# -- the test --------------------------------------------------------------------------


@pytest.mark.timeout(TEST_TIMEOUT_S)
async def test_sigkill_with_late_writes_leaves_all_or_none_of_each(tmp_path: Path) -> None:
    started = time.monotonic()
    rng = random.Random(SEED)
    env = {"GPU_CREDITS_LATENESS_WINDOW": str(WINDOW)}
    server = ServerProcess(tmp_path / "data", storage="sqlite", env=env)
    accounts = [
        Account(
            f"late-{i:02d}",
            random.Random(rng.getrandbits(64)),
            LateAccount(f"late-{i:02d}", WINDOW),
        )
        for i in range(WORKERS)
    ]
    report: list[str] = []
    outcomes: dict[str, int] = {}
    await asyncio.to_thread(server.start)
    try:
        async with make_client(server.base_url) as client:
            await set_up(client, accounts)
        for kill in range(1, KILLS + 1):
            rnd = Round(kill_after_acks=rng.randint(50, 400))
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
            resolved = await asyncio.gather(*(check_account(server.base_url, a) for a in accounts))
            counts: dict[str, int] = {}
            for res in resolved:
                if res is None:
                    continue
                restates = not isinstance(res.predicted, Refused) and res.predicted["restated"]
                what = (
                    "never sent"
                    if not res.op.reached_server
                    else ("present" if res.present else "absent")
                    + (" late" if res.op.late else "")
                    + (", restating" if restates else "")
                )
                counts[what] = counts.get(what, 0) + 1
            for k, v in counts.items():
                outcomes[k] = outcomes.get(k, 0) + v
            report.append(
                f"kill {kill}: {rnd.acked} answered; in flight: {counts}; restart {restart_s:.1f} s"
            )
    finally:
        server.kill()
    ops = [op for a in accounts for op in a.ops]
    took_effect = [op for op in ops if op.state in ("acked", "present")]
    restating = sum(
        1 for op in took_effect if op.response is not None and op.response.get("restated")
    )
    entries = sum(len(a.model.entries) for a in accounts)
    revised = sum(1 for a in accounts for e in a.model.entries if e["revision"])
    print(
        f"\ncrash test with late writes (seed {SEED}): {KILLS} kills, {len(took_effect)} "
        f"writes took effect ({sum(op.late for op in took_effect)} late, {restating} of them "
        f"restating), {sum(op.state == 'refused' for op in ops)} refused; ledgers: {entries} "
        f"entries, {revised} restated at least once; in flight at a kill: {outcomes}; "
        f"{time.monotonic() - started:.1f} s"
    )
    print("\n".join(report))
    assert restating > 0, "no late write that took effect restated anything"
    # What this test is for: some write in flight at a kill was late and restated entries
    # (whether it took effect or not: either way all of it or none). Over 10 kills about one
    # in flight in twenty is such a write, so none at all would mean the load went wrong.
    assert any("restating" in k for k in outcomes), f"no restating write in flight: {outcomes}"
