"""PostgreSQL restarting and crashing under load (issue 9, item 1): an answer never lies
about whether a write committed.

``test_restarts_and_crashes_under_load_never_misreport_a_write``
    A real ``gpu-credits serve`` process on its own throwaway PostgreSQL (its own, because the
    test restarts it). ``CLIENTS`` asyncio clients send grants (every second one with an
    ``Idempotency-Key``) and a few balance reads, while PostgreSQL is restarted with
    ``pg_ctl stop -m fast`` (clean shutdown: every connection is told to go away) and
    ``-m immediate`` (a crash) in turn, ``len(RESTART_MODES)`` times. Each grant has a unique
    amount, so the ledger says exactly which writes committed. Afterwards:

    - no request was answered 500, and every request got an answer (no dropped connection);
    - every grant answered 201 is in its account's ledger exactly once;
    - every grant answered with any error other than the outcome-unknown 503 is absent;
    - a grant answered with the outcome-unknown 503 may be present or absent, once at most;
      retried with the same ``Idempotency-Key`` it converges to 201 and to exactly one entry
      (a replay if the first attempt had committed, applied by the retry if not);
    - the ledger holds nothing that no client sent.

The fault-injection tests (no restart needed) live in ``tests/test_postgres.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from tests.support.pg_server import PostgresServer, start_postgres_or_skip
from tests.support.server_process import ServerProcess

TEST_TIMEOUT_S = 60  # the whole test: PostgreSQL and service start included
LOAD_BUDGET_S = 35.0  # the load phase; the restarts take a few seconds in all
REQUEST_TIMEOUT_S = 15.0
RESTART_MODES: tuple[Literal["fast", "immediate"], ...] = (
    "fast",
    "immediate",
    "fast",
    "fast",
    "immediate",
    "fast",
)
CLIENTS = 8
ACCOUNTS = tuple(f"restart-{i}" for i in range(4))
# Before each restart, wait until this many grants succeeded since the last one: PostgreSQL
# is then busy with transactions again, and the service has reconnected.
SUCCESSES_BEFORE_RESTART = 15
MAX_WRITES = 6_000  # a bound on the load, whatever the timing
READ_EVERY = 5  # every fifth request of a client is a balance read
# After a 503 a client pauses, as one honouring Retry-After would (scaled down): while
# PostgreSQL is down, the two cores go to its recovery rather than to answering 503s.
PAUSE_AFTER_503_S = 0.02
EXPIRY = 10**12  # nothing expires: every grant stays one ledger entry
LEDGER_PAGE_LIMIT = 1000
OUTCOME_UNKNOWN = "tag:gpu-credits,2026:problem:outcome-unknown"


@dataclass
class Write:
    account_id: str
    amount: int  # unique: identifies the grant in the ledger
    key: str | None
    status: int | None = None  # None: no answer (transport error)
    problem_type: str | None = None
    error: str | None = None
    retries: list[tuple[int, bool]] = field(default_factory=list)  # (status, replayed)

    @property
    def outcome_unknown(self) -> bool:
        return self.status == 503 and self.problem_type == OUTCOME_UNKNOWN

    def __str__(self) -> str:
        answer = self.error or f"{self.status} {self.problem_type or ''}".strip()
        return f"grant {self.amount} on {self.account_id} (key {self.key}) -> {answer}"


@dataclass
class Load:
    writes: list[Write] = field(default_factory=list)
    read_statuses: Counter[int] = field(default_factory=Counter)
    read_errors: list[str] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)  # every 500, reads included
    successes: int = 0
    done: bool = False
    progress: asyncio.Condition = field(default_factory=asyncio.Condition)

    async def succeeded(self) -> None:
        async with self.progress:
            self.successes += 1
            self.progress.notify_all()

    async def stop(self) -> None:
        async with self.progress:
            self.done = True
            self.progress.notify_all()

    async def wait_for_successes(self, count: int, deadline: float) -> bool:
        """Wait until ``count`` more grants succeeded; False if the load ended first or the
        deadline passed."""
        target = self.successes + count
        async with self.progress:
            try:
                async with asyncio.timeout_at(_loop_time(deadline)):
                    await self.progress.wait_for(lambda: self.done or self.successes >= target)
            except TimeoutError:
                return False
        return self.successes >= target


def _loop_time(monotonic_deadline: float) -> float:
    """A ``time.monotonic()`` deadline on the event loop's clock."""
    return asyncio.get_running_loop().time() + (monotonic_deadline - time.monotonic())


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    server = start_postgres_or_skip()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def service(own_postgres: PostgresServer, tmp_path: Path) -> Iterator[ServerProcess]:
    url = own_postgres.create_database(f"restarts_{uuid.uuid4().hex[:12]}")
    env = {"GPU_CREDITS_STORAGE": "postgres", "GPU_CREDITS_DATABASE_URL": url}
    server = ServerProcess(tmp_path / "service", storage="postgres", env=env)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def _grant(http: httpx.AsyncClient, write: Write) -> httpx.Response:
    headers = {} if write.key is None else {"Idempotency-Key": write.key}
    return await http.post(
        f"/v1/accounts/{write.account_id}/grants",
        json={"amount": write.amount, "timestamp": 0, "expiry": EXPIRY},
        headers=headers,
    )


def _problem_type(r: httpx.Response) -> str | None:
    if r.headers.get("content-type", "").startswith("application/problem+json"):
        kind = r.json().get("type")
        return kind if isinstance(kind, str) else None
    return None


async def _client(base_url: str, load: Load, amounts: Iterator[int]) -> None:
    async with httpx.AsyncClient(base_url=base_url, timeout=REQUEST_TIMEOUT_S) as http:
        for n in itertools.count():
            if load.done:
                return
            if n % READ_EVERY == READ_EVERY - 1:
                account_id = ACCOUNTS[n % len(ACCOUNTS)]
                try:
                    r = await http.get(f"/v1/accounts/{account_id}/balance")
                except httpx.TransportError as exc:
                    load.read_errors.append(f"balance {account_id}: {exc!r}")
                    continue
                load.read_statuses[r.status_code] += 1
                if r.status_code >= 500 and r.status_code != 503:
                    load.server_errors.append(f"balance {account_id}: {r.status_code} {r.text}")
                continue
            amount = next(amounts)
            if amount > MAX_WRITES:
                await load.stop()
                return
            write = Write(
                ACCOUNTS[amount % len(ACCOUNTS)],
                amount,
                f"restart-key-{amount}" if amount % 2 == 0 else None,
            )
            load.writes.append(write)
            try:
                r = await _grant(http, write)
            except httpx.TransportError as exc:
                write.error = f"{type(exc).__name__}: {exc}"
                continue
            write.status = r.status_code
            write.problem_type = _problem_type(r)
            if r.status_code == 201:
                await load.succeeded()
            elif r.status_code == 503:
                await asyncio.sleep(PAUSE_AFTER_503_S)
            elif r.status_code >= 500:
                load.server_errors.append(f"{write}: {r.text}")


async def _restarts(pg: PostgresServer, load: Load, deadline: float) -> list[str]:
    """Restart PostgreSQL once per mode, each time once the service is writing again."""
    done: list[str] = []
    for mode in RESTART_MODES:
        # The service has reconnected and PostgreSQL is busy with transactions again.
        if not await load.wait_for_successes(SUCCESSES_BEFORE_RESTART, deadline):
            return done
        await asyncio.to_thread(pg.restart, mode)
        done.append(mode)
    # Let the load run until it has written again after the last restart.
    await load.wait_for_successes(SUCCESSES_BEFORE_RESTART, deadline)
    return done


async def _ledger_amounts(http: httpx.AsyncClient, account_id: str) -> Counter[int]:
    amounts: Counter[int] = Counter()
    after = 0
    while True:
        r = await http.get(
            f"/v1/accounts/{account_id}/ledger",
            params={"after": after, "limit": LEDGER_PAGE_LIMIT},
        )
        if r.status_code == 404 and after == 0:
            return amounts
        assert r.status_code == 200, r.text
        page: dict[str, Any] = r.json()
        for entry in page["entries"]:
            assert entry["kind"] == "grant", entry
            amounts[entry["amount"]] += 1
        if page["next_after"] is None:
            return amounts
        after = page["next_after"]


def _summary(load: Load, restarts: list[str]) -> str:
    statuses = Counter(
        w.error.split(":")[0] if w.error else f"{w.status} {(w.problem_type or '').split(':')[-1]}"
        for w in load.writes
    )
    replayed = sum(1 for w in load.writes if w.retries and w.retries[-1][1])
    retried = sum(1 for w in load.writes if w.retries)
    return (
        f"restarts {restarts}; {len(load.writes)} grants: {dict(sorted(statuses.items()))}; "
        f"keyed retries of unknown outcomes: {retried} ({replayed} had committed); "
        f"reads: {dict(load.read_statuses)}, {len(load.read_errors)} without an answer"
    )


@pytest.mark.timeout(TEST_TIMEOUT_S)
async def test_restarts_and_crashes_under_load_never_misreport_a_write(
    own_postgres: PostgresServer, service: ServerProcess
) -> None:
    load = Load()
    amounts = itertools.count(1)
    deadline = time.monotonic() + LOAD_BUDGET_S
    clients = [
        asyncio.create_task(_client(service.base_url, load, amounts)) for _ in range(CLIENTS)
    ]
    try:
        restarts = await _restarts(own_postgres, load, deadline)
    finally:
        await load.stop()
        await asyncio.gather(*clients)
    assert restarts == list(RESTART_MODES), (
        f"the load stalled: {_summary(load, restarts)}\n{service.log()}"
    )

    async with httpx.AsyncClient(base_url=service.base_url, timeout=REQUEST_TIMEOUT_S) as http:
        # Retry every keyed grant whose outcome was unknown: same key, same body. The first
        # attempt committed or not; either way there is now exactly one.
        for write in load.writes:
            if write.key is not None and (write.outcome_unknown or write.error is not None):
                r = await _grant(http, write)
                write.retries.append(
                    (r.status_code, r.headers.get("Idempotent-Replayed") == "true")
                )
        ledger: Counter[int] = Counter()
        for account_id in ACCOUNTS:
            ledger.update(await _ledger_amounts(http, account_id))

    summary = _summary(load, restarts)
    sent = {w.amount for w in load.writes}
    violations = {
        "answers of 500": load.server_errors,
        # Committed although the answer said it failed: a client retrying it grants twice.
        "committed writes answered with an error": [
            str(w)
            for w in load.writes
            if w.status not in (None, 201) and not w.outcome_unknown and ledger[w.amount]
        ],
        "acknowledged writes not in the ledger exactly once": [
            str(w) for w in load.writes if w.status == 201 and ledger[w.amount] != 1
        ],
        "keyed retries that did not converge to one entry": [
            f"{w} then {w.retries}"
            for w in load.writes
            if w.retries and (w.retries[-1][0] != 201 or ledger[w.amount] != 1)
        ],
        "writes in the ledger more than once": [
            str(w) for w in load.writes if ledger[w.amount] > 1
        ],
        "ledger entries nobody sent": [str(a) for a in sorted(set(ledger) - sent)],
        "answers other than 201 and 503": [
            str(w) for w in load.writes if w.status not in (None, 201, 503)
        ],
        "requests without an answer": [str(w) for w in load.writes if w.error is not None]
        + load.read_errors,
    }
    failed = {name: cases for name, cases in violations.items() if cases}
    report = "\n".join(
        f"{len(cases)} {name}: {'; '.join(cases[:3])}" for name, cases in failed.items()
    )
    assert not failed, f"{report}\n{summary}"
    assert load.successes >= SUCCESSES_BEFORE_RESTART * (len(RESTART_MODES) + 1), summary
    print(summary)  # the figures behind the README's restart numbers (pytest -s)
