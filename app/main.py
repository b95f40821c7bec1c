"""The application factory: ``create_app()`` wires settings, storage, the ledger service,
routes and error mapping; its lifespan opens storage before the first request and closes it
after the last."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp

from app.adapters.embedded import EmbeddedPort
from app.api import docs_pages, problems, render
from app.api.auth import Authenticator
from app.api.events import EVENTS_PATH, StreamLimits
from app.api.limits import RequestLimits
from app.api.openapi import build_openapi
from app.api.requests import RequestObserver
from app.api.routes import BATCH_PATH, About, router
from app.collector import COLLECTOR
from app.keys import tenant_quotas
from app.logs import write_through
from app.metrics import Metrics
from app.observe import NULL_OBSERVER, Observer
from app.service.ledger import Ledger
from app.service.limits import Limits
from app.settings import Settings
from app.storage import open_store
from app.storage.base import EmbeddedJournal
from app.ui import pages as ui_pages
from app.version import package_version

DESCRIPTION = """\
A ledger of expiring GPU compute credits per account. Grants expire; consumption takes the
earliest-expiring credits first; consumption beyond the active credits becomes debt, which
new grants settle first. Timestamps are the caller's and never decrease per account.
Every error is an RFC 9457 problem document (`application/problem+json`).
Every answer carries `X-Request-ID`: the request's own (1 to 128 visible ASCII characters)
or one the service made; problem documents repeat it as `request_id`.
"""
log = logging.getLogger("app")
IDEMPOTENCY_PRUNE_INTERVAL_S = 3600.0
KEY_RELOAD_INTERVAL_S = 2.0
# How often the API keys' last uses noted in memory are written to their record (see
# app.api.auth.KeyUsage): what a crash can lose.
KEY_USE_SAVE_INTERVAL_S = 10.0
# How often the backend is asked whether its files are still in place: a deleted or replaced
# database is noticed within about this long even when no write arrives to find out.
STORAGE_CHECK_INTERVAL_S = 1.0


def build_ledger(settings: Settings, observer: Observer = NULL_OBSERVER) -> Ledger:
    """The one service over the adapter for the backend the settings name: embedded
    (memory, sqlite) or shared (postgres); ``observer`` is told what it does (metrics)."""
    limits = settings.limits()
    store = open_store(settings)
    if isinstance(store, EmbeddedJournal):
        return embedded_ledger(store, limits, observer=observer)
    from app.adapters.postgres import PostgresPort  # loads asyncpg only when used

    store.observer = observer
    port = PostgresPort(store, limits)
    return Ledger(port, render.encode_answer, limits, observer=observer)


def embedded_ledger(
    store: EmbeddedJournal,
    limits: Limits | None = None,
    wall_clock_s: Callable[[], float] = time.time,
    observer: Observer = NULL_OBSERVER,
) -> Ledger:
    """The service over an embedded store (memory, sqlite), answers encoded as the API
    sends them: what ``serve`` runs, for benchmarks and tests that skip HTTP."""
    limits = limits or Limits()
    store.observer = observer  # a store that commits (sqlite) reports its commits
    port = EmbeddedPort(store, limits, wall_clock_s)
    return Ledger(port, render.encode_answer, limits, wall_clock_s, observer)


class _App(FastAPI):
    """FastAPI with ``RequestObserver`` outside everything else, Starlette's error
    middleware included, so that it sees (and ids, counts and logs) a 500 too."""

    request_observer: Callable[[ASGIApp], ASGIApp] | None = None

    def build_middleware_stack(self) -> ASGIApp:
        stack = super().build_middleware_stack()
        return stack if self.request_observer is None else self.request_observer(stack)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    metrics = Metrics(package_version(), settings.storage) if settings.metrics else None
    observer: Observer = metrics or NULL_OBSERVER

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        ledger = build_ledger(settings, observer)
        await ledger.start()
        COLLECTOR.tune()
        app.state.ledger = ledger
        app.state.about = About(
            package_version(), settings.storage, await _schema_version(ledger, settings)
        )
        log.info("ledger ready: storage=%s", settings.storage)
        authenticator = Authenticator(settings.keys_path, observer)
        app.state.authenticator = authenticator
        _configure_tenants(ledger, authenticator, settings)
        if not authenticator.enabled:
            log.warning(
                "no API keys in %s: authentication is OFF; anyone who can reach this "
                "service can grant credits",
                settings.keys_path,
            )
        tasks = [
            asyncio.create_task(_prune_forever(ledger)),
            asyncio.create_task(_reload_keys_forever(authenticator, ledger, settings)),
            asyncio.create_task(_check_storage_forever(ledger)),
            asyncio.create_task(_save_key_usage_forever(authenticator)),
        ]
        try:
            yield
        finally:
            # From here on, log lines are written as they come (see app.logs.write_through).
            write_through()
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await _save_key_usage(authenticator)
            await ledger.close()

    app = _App(
        title="gpu-credits",
        version=package_version(),
        description=DESCRIPTION,
        lifespan=lifespan,
        # No 307 to the slash-less URL (built from the client's Host header): a trailing
        # slash is an unknown route, answered 404 like any other.
        redirect_slashes=False,
        # FastAPI's own /docs and /redoc load their assets from a CDN: app.api.docs_pages
        # serves them from the installed package instead.
        docs_url=None,
        redoc_url=None,
        openapi_tags=[
            {"name": "credits", "description": "Grants, consumption, balances, history."},
            {
                "name": "operations",
                "description": "Probes (liveness, readiness) and the version; no API key.",
            },
        ],
    )
    app.state.metrics = metrics
    app.state.metrics_public = settings.metrics_public
    app.state.observer = observer
    # The API's routes go into the app's router as they are, not through include_router:
    # FastAPI (0.165) keeps an included router as one route that matches its own routes
    # through a context of its own on every request, about 15 us a request in the profile
    # (see docs/performance.md, Single operations). Nothing is prefixed or tagged at inclusion
    # here, so the routes, their handling and the OpenAPI document are the same.
    app.router.routes.extend(router.routes)
    docs_pages.install(app)
    ui_pages.install(app)

    # The API's routes one by one (the app's router holds them as one included router),
    # then the others (documentation): what a request refused before routing is matched to.
    routes = [*router.routes, *app.router.routes]
    app.request_observer = lambda inner: RequestObserver(
        inner, routes=routes, metrics=metrics, log_requests=settings.access_log
    )
    batch_cap = settings.max_batch_body_bytes
    caps = {BATCH_PATH: batch_cap, EVENTS_PATH: settings.max_event_stream_bytes}
    app.state.event_stream_limits = StreamLimits(
        max_body_bytes=settings.max_event_stream_bytes,
        max_line_bytes=settings.max_event_line_bytes,
        max_lines=settings.max_event_lines,
        idle_timeout_s=settings.body_timeout_s,
    )
    app.add_middleware(
        RequestLimits,
        max_body_bytes=settings.max_body_bytes,
        max_url_bytes=settings.max_url_bytes,
        max_header_bytes=settings.max_header_bytes,
        body_timeout_s=settings.body_timeout_s,
        body_cap_for_path=lambda path: caps.get(path, 0),
        streaming_paths=frozenset({EVENTS_PATH}),
    )
    storage_errors: tuple[type[Exception], ...] = ()
    if settings.storage == "postgres":
        from app.storage.postgres import DRIVER_ERRORS  # loads asyncpg only when used

        storage_errors = DRIVER_ERRORS
    problems.install(app, router.routes, storage_errors)

    def openapi() -> dict[str, Any]:
        return build_openapi(app, router.routes)

    app.openapi = openapi  # type: ignore[method-assign]
    return app


async def _schema_version(ledger: Ledger, settings: Settings) -> int | None:
    """Read once, at startup, once the storage has applied its migrations: ``GET /version``
    then answers without touching storage. A failure here (the database just went away) must
    not stop the service, whose readiness reports that anyway."""
    try:
        return await ledger.schema_version()
    except Exception as exc:
        log.warning("schema version of the %s storage unknown: %s", settings.storage, exc)
        return None


def _configure_tenants(ledger: Ledger, authenticator: Authenticator, settings: Settings) -> None:
    """The tenants and quotas the keys in force define (see app.quotas)."""
    quotas, prefix_of_key = tenant_quotas(authenticator.ring.records(), settings.tenant_quota())
    ledger.configure_tenants(quotas, prefix_of_key)


async def _reload_keys_forever(
    authenticator: Authenticator, ledger: Ledger, settings: Settings
) -> None:
    while True:
        await asyncio.sleep(KEY_RELOAD_INTERVAL_S)
        try:
            if authenticator.reload_if_changed():
                _configure_tenants(ledger, authenticator, settings)
        except Exception:  # keep the keys in force; say so loudly
            log.exception("API key file unreadable; keeping the previous keys")


async def _save_key_usage_forever(authenticator: Authenticator) -> None:
    while True:
        await asyncio.sleep(KEY_USE_SAVE_INTERVAL_S)
        await _save_key_usage(authenticator)


async def _save_key_usage(authenticator: Authenticator) -> None:
    """Write the keys' uses noted since the last save, in a worker thread; what cannot be
    written now is kept for the next save (KeyUsage logs why)."""
    usage = authenticator.usage
    unsaved = usage.take_unsaved()
    if not unsaved:
        return
    keep = {record.key_id for record in authenticator.ring.records()}
    try:
        await asyncio.to_thread(usage.save, unsaved, keep)
    except asyncio.CancelledError:  # shutting down: the last save writes them
        usage.give_back(unsaved)
        raise
    except Exception:
        usage.give_back(unsaved)


async def _check_storage_forever(ledger: Ledger) -> None:
    while not ledger.failure:
        await asyncio.sleep(STORAGE_CHECK_INTERVAL_S)
        try:
            await ledger.check_storage()
        except Exception:  # a broken check must not end the checking; say so loudly
            log.exception("storage check failed")


async def _prune_forever(ledger: Ledger) -> None:
    while True:
        await asyncio.sleep(IDEMPOTENCY_PRUNE_INTERVAL_S)
        try:
            await ledger.prune_idempotency()
        except Exception:  # keep pruning on the next round; the ledger itself is unaffected
            log.exception("idempotency pruning failed")
