"""Prometheus metrics (``prometheus-client``): what ``GET /metrics`` answers.

One ``Metrics`` per app, with a registry of its own (not the library's global one): every
app a test process builds counts for itself, and a process serves exactly one.

Labels are bounded on purpose: a route is its template (``/v1/accounts/{account_id}/grants``,
never the path), a method one of the standard ones or ``other``, a status one the service
answers; no account id, key id or anything else a caller chooses is ever a label.

Cheap on the hot path: every labelled child is bound once (at start, or at the first request
of a route, method and status) and kept, so a request costs one dictionary lookup and one
histogram observation, and a write a handful of counter increments.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.observe import AuthFailure, Observer, OperationKind, Outcome, outcome_of
from app.service.commands import BalanceOp, ConsumeOp, GrantOp, Operation, VoidOp
from app.service.results import BatchOutcome, ConsumptionReceipt, GrantReceipt, VoidReceipt
from app.storage.base import Change

NAMESPACE: Final = "gpu_credits"
KINDS: Final[tuple[OperationKind, ...]] = ("grant", "consume", "void", "balance")
OUTCOMES: Final[tuple[Outcome, ...]] = ("ok", "refused", "failed")
REPLAY_KINDS: Final = ("grant", "consume", "void", "batch")
AUTH_FAILURES: Final[tuple[AuthFailure, ...]] = ("missing", "malformed", "invalid", "forbidden")
CREDIT_KINDS: Final = (
    "granted",
    "consumed",
    "expired",
    "voided",
    "debt_incurred",
    "debt_settled",
)
# Methods other than these share one label value, so a client cannot make new series.
METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
UNMATCHED_ROUTE: Final = "unmatched"  # no route: 404 (a template always starts with "/")

# A request on memory takes about 0.3 ms, on SQLite 1 ms or more (a commit), a batch of
# 10,000 up to a second.
HTTP_BUCKETS: Final = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
COMMIT_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
GROUP_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
BATCH_BUCKETS: Final = (1, 10, 100, 1000, 2500, 5000, 10_000)

# No ``*_created`` series (when each counter was created): they double the output and
# Prometheus does not need them. A switch of the library, for the whole process.
disable_created_metrics()  # type: ignore[no-untyped-call]

_KIND_OF_OP: Final[dict[type[Operation], OperationKind]] = {
    GrantOp: "grant",
    ConsumeOp: "consume",
    VoidOp: "void",
    BalanceOp: "balance",
}


class _Debt(Collector):
    """The debt outstanding over every account: set just before each scrape (the ledger is
    asked, ``GET /metrics``), absent when it could not be read (the database is down)."""

    NAME: Final = f"{NAMESPACE}_debt_outstanding_credits"
    HELP: Final = "Debt outstanding over every account, in credits (at each account's clock)."

    def __init__(self) -> None:
        self.value: int | None = None

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily(self.NAME, self.HELP)]

    def collect(self) -> Iterable[Metric]:
        if self.value is None:
            return []
        return [GaugeMetricFamily(self.NAME, self.HELP, value=float(self.value))]


class Metrics(Observer):
    def __init__(self, version: str, storage: str) -> None:
        self.registry = registry = CollectorRegistry()
        # The process itself (CPU, memory, file descriptors, GC), as the library's default
        # registry has them.
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            registry.register(collector)
        info = Gauge(
            f"{NAMESPACE}_info",
            "The service's version and storage backend (always 1).",
            ("version", "storage"),
            registry=registry,
        )
        info.labels(version, storage).set(1)
        self._http = Histogram(
            f"{NAMESPACE}_http_request_duration_seconds",
            "HTTP requests answered by the application, by route template, method and "
            "status, and how long each took (_count: the number of requests).",
            ("route", "method", "status"),
            buckets=HTTP_BUCKETS,
            registry=registry,
        )
        self._http_children: dict[tuple[str, str, int], Histogram] = {}
        operations = Counter(
            f"{NAMESPACE}_operations",
            "Ledger operations, single or in a batch, by kind (grant, consume, void, balance "
            "read) and result (ok; refused: the request or the account's state said no; "
            "failed: storage could not do it). Replays are counted apart.",
            ("kind", "result"),
            registry=registry,
        )
        self._operations = {(k, o): operations.labels(k, o) for k in KINDS for o in OUTCOMES}
        credits = Counter(
            f"{NAMESPACE}_credits",
            "Credits by what happened to them, as each write recorded them: granted, consumed "
            "(paid from credits), expired, voided, debt_incurred (usage no credit could pay), "
            "debt_settled (paid by later grants). A late write's restatements do not change "
            "what was counted.",
            ("kind",),
            registry=registry,
        )
        self._credits = {kind: credits.labels(kind) for kind in CREDIT_KINDS}
        replays = Counter(
            f"{NAMESPACE}_idempotent_replays",
            "Retries answered with the stored answer of their Idempotency-Key, by operation.",
            ("kind",),
            registry=registry,
        )
        self._replays = {kind: replays.labels(kind) for kind in REPLAY_KINDS}
        auth = Counter(
            f"{NAMESPACE}_auth_failures",
            "Requests refused by authentication (missing, malformed, invalid: 401) or "
            "authorization (forbidden: 403).",
            ("reason",),
            registry=registry,
        )
        self._auth = {reason: auth.labels(reason) for reason in AUTH_FAILURES}
        self._late = Counter(
            f"{NAMESPACE}_late_writes",
            "Writes accepted with a timestamp before their account's clock (SPEC section 6).",
            registry=registry,
        )
        self._restated = Counter(
            f"{NAMESPACE}_restated_entries",
            "Ledger entries late writes restated (their effect changed, or an expiration "
            "no longer happens): the sum of the answers' `restated`.",
            registry=registry,
        )
        self._batch_size = Histogram(
            f"{NAMESPACE}_batch_operations",
            "Operations per batch request answered (replays excluded).",
            buckets=BATCH_BUCKETS,
            registry=registry,
        )
        self._commit_s = Histogram(
            f"{NAMESPACE}_storage_commit_seconds",
            "Storage commits (SQLite: a group's transaction and fsync, from the event loop's "
            "point of view; PostgreSQL: COMMIT). The memory backend has none.",
            buckets=COMMIT_BUCKETS,
            registry=registry,
        )
        self._group_size = Histogram(
            f"{NAMESPACE}_storage_commit_group_size",
            "Units of work (single writes, batches) made durable by one commit: SQLite groups "
            "the commits of concurrent requests; PostgreSQL commits each on its own (1).",
            buckets=GROUP_BUCKETS,
            registry=registry,
        )
        self.debt = _Debt()
        registry.register(self.debt)

    # -- HTTP (app.api.requests) -----------------------------------------------------------

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        child = self._http_children.get(key)
        if child is None:
            if method not in METHODS:
                key = (route, "other", status)
                child = self._http_children.get(key)
            if child is None:
                child = self._http_children[key] = self._http.labels(*key[:2], str(status))
        child.observe(seconds)

    # -- the ledger ------------------------------------------------------------------------

    def wrote(
        self,
        kind: OperationKind,
        receipt: GrantReceipt | ConsumptionReceipt | VoidReceipt,
        change: Change,
    ) -> None:
        self._operations[kind, "ok"].inc()
        credits = self._credits
        if isinstance(receipt, GrantReceipt):
            credits["granted"].inc(receipt.amount)
            if receipt.settled_debt:
                credits["debt_settled"].inc(receipt.settled_debt)
        elif isinstance(receipt, ConsumptionReceipt):
            if receipt.consumed:
                credits["consumed"].inc(receipt.consumed)
            if receipt.debt_added:
                credits["debt_incurred"].inc(receipt.debt_added)
        elif receipt.amount:
            credits["voided"].inc(receipt.amount)
        if len(change.entries) > 1:  # the write's own entry, and expirations it recorded
            expired = sum(e.amount for e in change.entries if e.kind == "expiration")
            if expired:
                credits["expired"].inc(expired)
        if receipt.timestamp < change.account.clock:
            self._late.inc()
        if receipt.restated:
            self._restated.inc(receipt.restated)

    def read(self, kind: OperationKind) -> None:
        self._operations[kind, "ok"].inc()

    def not_done(self, kind: OperationKind, outcome: Outcome) -> None:
        self._operations[kind, outcome].inc()

    def replayed(self, kind: str) -> None:
        self._replays[kind].inc()

    def batch(
        self, operations: Sequence[Operation], outcome: BatchOutcome, changes: Sequence[Change]
    ) -> None:
        self._batch_size.observe(len(operations))
        results = outcome.results
        if outcome.failed_index is not None:  # atomic, aborted: one refusal, nothing done
            error = results[0]
            assert isinstance(error, Exception)
            kind = _KIND_OF_OP[type(operations[outcome.failed_index])]
            self._operations[kind, outcome_of(error)].inc()
            return
        # Summed here, counted once each: a batch of 10,000 costs a handful of increments.
        done = dict.fromkeys(self._operations, 0)
        granted = consumed = voided = expired = incurred = settled = late = restated = 0
        written = iter(changes)
        for op, result in zip(operations, results, strict=True):
            kind = _KIND_OF_OP[type(op)]
            if isinstance(result, Exception):
                done[kind, outcome_of(result)] += 1
                continue
            done[kind, "ok"] += 1
            if kind == "balance":
                continue
            change = next(written)
            if isinstance(result, GrantReceipt):
                granted += result.amount
                settled += result.settled_debt
            elif isinstance(result, ConsumptionReceipt):
                consumed += result.consumed
                incurred += result.debt_added
            elif isinstance(result, VoidReceipt):
                voided += result.amount
            if len(change.entries) > 1:
                expired += sum(e.amount for e in change.entries if e.kind == "expiration")
            if result.timestamp < change.account.clock:
                late += 1
            restated += getattr(result, "restated", 0)
        for key, count in done.items():
            if count:
                self._operations[key].inc(count)
        for name, amount in (
            ("granted", granted),
            ("consumed", consumed),
            ("voided", voided),
            ("expired", expired),
            ("debt_incurred", incurred),
            ("debt_settled", settled),
        ):
            if amount:
                self._credits[name].inc(amount)
        if late:
            self._late.inc(late)
        if restated:
            self._restated.inc(restated)

    # -- authentication and storage --------------------------------------------------------

    def auth_failed(self, reason: AuthFailure) -> None:
        self._auth[reason].inc()

    def committed(self, seconds: float, group_size: int) -> None:
        self._commit_s.observe(seconds)
        self._group_size.observe(group_size)
