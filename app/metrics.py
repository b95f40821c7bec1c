"""Prometheus metrics: what ``GET /metrics`` answers, through ``prometheus-client``.

One ``Metrics`` per app, with a registry of its own (not the library's global one): every
app a test process builds counts for itself, and a process serves exactly one.

Labels are bounded on purpose: a route is its template (``/v1/accounts/{account_id}/grants``,
never the path), a method one of the standard ones or ``other``, a status one the service
answers; no account id, key id or anything else a caller chooses is ever a label.

Cheap on the hot path. The library's own counters take a lock per increment (they may be
shared by threads); here every update comes from the event loop's thread (requests, the
ledger, authentication, and the stores, whose commits are reported on the loop), so the
service's figures are plain numbers in slotted objects, bound once per label set (at start,
or at the first request of a route, method and status) and kept: a request costs a
dictionary lookup, a ``bisect`` and two additions, a write a few additions. A collector
turns them into Prometheus' families when scraped (on the same thread). The process's own
metrics (CPU, memory, file descriptors, garbage collection) are the library's collectors.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Final

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

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

_KIND_OF_OP: Final[dict[type[Operation], OperationKind]] = {
    GrantOp: "grant",
    ConsumeOp: "consume",
    VoidOp: "void",
    BalanceOp: "balance",
}


class Histogram:
    """Counts per bucket (``le``: at most the bound; the last is ``+Inf``) and the sum."""

    __slots__ = ("bounds", "counts", "labels", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0
        # The ``le`` label of each bucket, as the library writes them ("0.005", "+Inf").
        self.labels: tuple[str, ...] = tuple(
            floatToGoString(b)  # type: ignore[no-untyped-call]
            for b in (*self.bounds, float("inf"))
        )

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative, as Prometheus wants them."""
        out: list[tuple[str, float]] = []
        total = 0
        for label, count in zip(self.labels, self.counts, strict=True):
            total += count
            out.append((label, float(total)))
        return out


class Metrics(Observer):
    def __init__(self, version: str, storage: str) -> None:
        self.version = version
        self.storage = storage
        # (route template, method, status) -> latency histogram
        self.http: dict[tuple[str, str, int], Histogram] = {}
        self.operations = dict.fromkeys(((k, o) for k in KINDS for o in OUTCOMES), 0)
        self.credits = dict.fromkeys(CREDIT_KINDS, 0)
        self.replays = dict.fromkeys(REPLAY_KINDS, 0)
        self.auth_failures = dict.fromkeys(AUTH_FAILURES, 0)
        self.late_writes = 0
        self.restated_entries = 0
        self.batch_operations = Histogram(BATCH_BUCKETS)
        self.commit_seconds = Histogram(COMMIT_BUCKETS)
        self.commit_group_size = Histogram(GROUP_BUCKETS)
        # Debt outstanding: set just before each scrape (``GET /metrics`` asks the ledger);
        # None when it could not be read (the database is down): the gauge is left out.
        self.debt: int | None = None
        self.registry = CollectorRegistry()
        for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(collector)
        self.registry.register(_Exposition(self))

    # -- HTTP (app.api.requests) -----------------------------------------------------------

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        key = (route, method, status)
        histogram = self.http.get(key)
        if histogram is None:
            if method not in METHODS:
                key = (route, "other", status)
                histogram = self.http.get(key)
            if histogram is None:
                histogram = self.http[key] = Histogram(HTTP_BUCKETS)
        histogram.observe(seconds)

    # -- the ledger ------------------------------------------------------------------------

    def wrote(
        self,
        kind: OperationKind,
        receipt: GrantReceipt | ConsumptionReceipt | VoidReceipt,
        change: Change,
    ) -> None:
        self.operations[kind, "ok"] += 1
        credits = self.credits
        if isinstance(receipt, GrantReceipt):
            credits["granted"] += receipt.amount
            credits["debt_settled"] += receipt.settled_debt
        elif isinstance(receipt, ConsumptionReceipt):
            credits["consumed"] += receipt.consumed
            credits["debt_incurred"] += receipt.debt_added
        else:
            credits["voided"] += receipt.amount
        if len(change.entries) > 1:  # the write's own entry, and expirations it recorded
            credits["expired"] += sum(e.amount for e in change.entries if e.kind == "expiration")
        if receipt.timestamp < change.account.clock:
            self.late_writes += 1
        self.restated_entries += receipt.restated

    def read(self, kind: OperationKind) -> None:
        self.operations[kind, "ok"] += 1

    def not_done(self, kind: OperationKind, outcome: Outcome) -> None:
        self.operations[kind, outcome] += 1

    def replayed(self, kind: str) -> None:
        self.replays[kind] += 1

    def batch(
        self, operations: Sequence[Operation], outcome: BatchOutcome, changes: Sequence[Change]
    ) -> None:
        self.batch_operations.observe(len(operations))
        self._count(operations, outcome, changes)

    def events(
        self, operations: Sequence[Operation], outcome: BatchOutcome, changes: Sequence[Change]
    ) -> None:
        self._count(operations, outcome, changes)

    def _count(
        self, operations: Sequence[Operation], outcome: BatchOutcome, changes: Sequence[Change]
    ) -> None:
        """Every operation's result, and the credits of those that succeeded."""
        results = outcome.results
        counts = self.operations
        if outcome.failed_index is not None:  # atomic, aborted: one refusal, nothing done
            error = results[0]
            assert isinstance(error, Exception)
            counts[_KIND_OF_OP[type(operations[outcome.failed_index])], outcome_of(error)] += 1
            return
        # Summed here and added once: this runs for every operation of every batch.
        ok = dict.fromkeys(KINDS, 0)
        granted = settled = consumed = incurred = voided = expired = late = restated = 0
        written = iter(changes)
        for op, result in zip(operations, results, strict=True):
            kind = _KIND_OF_OP[type(op)]
            if isinstance(result, Exception):
                counts[kind, outcome_of(result)] += 1
                continue
            ok[kind] += 1
            if kind == "balance":
                continue
            change = next(written)
            if type(result) is GrantReceipt:
                granted += result.amount
                settled += result.settled_debt
            elif type(result) is ConsumptionReceipt:
                consumed += result.consumed
                incurred += result.debt_added
            elif type(result) is VoidReceipt:
                voided += result.amount
            if len(change.entries) > 1:
                expired += sum(e.amount for e in change.entries if e.kind == "expiration")
            if result.timestamp < change.account.clock:
                late += 1
            restated += getattr(result, "restated", 0)
        for kind, n in ok.items():
            counts[kind, "ok"] += n
        credits = self.credits
        credits["granted"] += granted
        credits["debt_settled"] += settled
        credits["consumed"] += consumed
        credits["debt_incurred"] += incurred
        credits["voided"] += voided
        credits["expired"] += expired
        self.late_writes += late
        self.restated_entries += restated

    # -- authentication and storage --------------------------------------------------------

    def auth_failed(self, reason: AuthFailure) -> None:
        self.auth_failures[reason] += 1

    def committed(self, seconds: float, group_size: int) -> None:
        self.commit_seconds.observe(seconds)
        self.commit_group_size.observe(group_size)


def _counter(
    name: str, documentation: str, label: str, values: Iterable[tuple[str, int]]
) -> CounterMetricFamily:
    family = CounterMetricFamily(name, documentation, labels=[label])
    for value, count in values:
        family.add_metric([value], float(count))
    return family


def _histogram(name: str, documentation: str, histogram: Histogram) -> HistogramMetricFamily:
    return HistogramMetricFamily(
        name, documentation, buckets=histogram.buckets(), sum_value=histogram.sum
    )


class _Exposition(Collector):
    """The service's figures as Prometheus families, read when scraped."""

    def __init__(self, metrics: Metrics) -> None:
        self._m = metrics

    def collect(self) -> Iterable[Metric]:
        m = self._m
        info = GaugeMetricFamily(
            f"{NAMESPACE}_info",
            "The service's version and storage backend (always 1).",
            labels=["version", "storage"],
        )
        info.add_metric([m.version, m.storage], 1.0)
        yield info
        http = HistogramMetricFamily(
            f"{NAMESPACE}_http_request_duration_seconds",
            "HTTP requests answered by the application, by route template, method and "
            "status, and how long each took (_count: the number of requests).",
            labels=["route", "method", "status"],
        )
        for (route, method, status), histogram in list(m.http.items()):
            http.add_metric([route, method, str(status)], histogram.buckets(), histogram.sum)
        yield http
        operations = CounterMetricFamily(
            f"{NAMESPACE}_operations",
            "Ledger operations, single or in a batch, by kind (grant, consume, void, balance "
            "read) and result (ok; refused: the request or the account's state said no; "
            "failed: storage could not do it). Replays are counted apart.",
            labels=["kind", "result"],
        )
        for (kind, outcome), count in m.operations.items():
            operations.add_metric([kind, outcome], float(count))
        yield operations
        yield _counter(
            f"{NAMESPACE}_credits",
            "Credits by what happened to them, as each write recorded them: granted, consumed "
            "(paid from credits), expired, voided, debt_incurred (usage no credit could pay), "
            "debt_settled (paid by later grants). A late write's restatements do not change "
            "what was counted.",
            "kind",
            m.credits.items(),
        )
        yield _counter(
            f"{NAMESPACE}_idempotent_replays",
            "Retries answered with the stored answer of their Idempotency-Key, by operation.",
            "kind",
            m.replays.items(),
        )
        yield _counter(
            f"{NAMESPACE}_auth_failures",
            "Requests refused by authentication (missing, malformed, invalid: 401) or "
            "authorization (forbidden: 403).",
            "reason",
            m.auth_failures.items(),
        )
        yield CounterMetricFamily(
            f"{NAMESPACE}_late_writes",
            "Writes accepted with a timestamp before their account's clock (SPEC section 6).",
            value=float(m.late_writes),
        )
        yield CounterMetricFamily(
            f"{NAMESPACE}_restated_entries",
            "Ledger entries late writes restated (their effect changed, or an expiration "
            "no longer happens): the sum of the answers' `restated`.",
            value=float(m.restated_entries),
        )
        yield _histogram(
            f"{NAMESPACE}_batch_operations",
            "Operations per batch request answered (replays excluded).",
            m.batch_operations,
        )
        yield _histogram(
            f"{NAMESPACE}_storage_commit_seconds",
            "Storage commits (SQLite: a group's transaction and fsync, from the event loop's "
            "point of view; PostgreSQL: COMMIT). The memory backend has none.",
            m.commit_seconds,
        )
        yield _histogram(
            f"{NAMESPACE}_storage_commit_group_size",
            "Units of work (single writes, batches) made durable by one commit: SQLite groups "
            "the commits of concurrent requests; PostgreSQL commits each on its own (1).",
            m.commit_group_size,
        )
        if m.debt is not None:
            yield GaugeMetricFamily(
                f"{NAMESPACE}_debt_outstanding_credits",
                "Debt outstanding over every account, in credits (at each account's clock).",
                value=float(m.debt),
            )
