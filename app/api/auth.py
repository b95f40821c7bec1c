"""Authentication and authorization of API calls: bearer API keys with scopes.

Who may do what:
- ``credits:grant`` may POST grants; ``credits:consume`` may POST consumptions;
  ``credits:read`` may read balances (a read at a timestamp advances the account's clock),
  live grants, one grant and the ledger.
- A key with an account prefix may touch only account ids that start with it.
- ``/healthz`` and ``/openapi.json`` are public.

When no key is configured, authentication is off; ``app.cli`` then refuses to listen on
anything but loopback unless it is explicitly started with ``--insecure-no-auth``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.keys import KeyRecord, KeyRing, Scope, load_records

log = logging.getLogger("app.auth")

bearer = HTTPBearer(
    auto_error=False,
    scheme_name="ApiKey",
    description="An API key from `gpu-credits keys create`: `Authorization: Bearer gck_...`.",
)


class AuthError(Exception):
    """Base of 401 and 403; mapped to problem documents in ``app.api.problems``."""


class Unauthenticated(AuthError):
    pass


class Forbidden(AuthError):
    pass


class Authenticator:
    """The key ring in force, re-read when the key file changes (create or revoke a key and
    it takes effect within one poll, without a restart)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._mtime_ns: int | None = None
        self.ring = KeyRing([])
        self.reload_if_changed()

    @property
    def enabled(self) -> bool:
        return len(self.ring) > 0

    def reload_if_changed(self) -> bool:
        try:
            mtime_ns: int | None = self._path.stat().st_mtime_ns
        except FileNotFoundError:
            mtime_ns = None
        if mtime_ns == self._mtime_ns:
            return False
        # A broken file raises here and keeps the previous ring: failing closed would lock
        # every client out, failing open would let everyone in; keeping the old keys is safer.
        self.ring = KeyRing(load_records(self._path))
        self._mtime_ns = mtime_ns
        log.info("API keys loaded: %d key(s) from %s", len(self.ring), self._path)
        return True


def _authenticator(request: Request) -> Authenticator:
    auth = request.app.state.authenticator
    assert isinstance(auth, Authenticator)
    return auth


async def authenticated(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> KeyRecord | None:
    """A dependency: the caller's key (401 without a valid one), or None when auth is off."""
    auth = _authenticator(request)
    if not auth.enabled:
        return None
    if credentials is None:
        raise Unauthenticated("an API key is required: Authorization: Bearer <key>")
    record = auth.ring.authenticate(credentials.credentials)
    if record is None:
        raise Unauthenticated("the API key is not valid")
    return record


def authorize(record: KeyRecord | None, scope: Scope, account_id: str, where: str = "") -> None:
    """403 unless ``record`` holds ``scope`` and may touch ``account_id`` (None: auth off)."""
    if record is None:
        return
    if scope not in record.scopes:
        raise Forbidden(f"{where}the API key lacks the scope {scope.value}")
    if not record.allows_account(account_id):
        raise Forbidden(
            f"{where}the API key may only touch accounts starting with {record.account_prefix!r}"
        )


def require(scope: Scope) -> Callable[..., Awaitable[KeyRecord | None]]:
    """A dependency that lets the call through only with a key holding ``scope`` and, for
    account routes, allowed on the account. Returns the key, or None when auth is off."""

    async def check(
        request: Request, record: Annotated[KeyRecord | None, Depends(authenticated)]
    ) -> KeyRecord | None:
        account_id = request.path_params.get("account_id")
        if record is not None:
            if isinstance(account_id, str):
                authorize(record, scope, account_id)
            elif scope not in record.scopes:
                raise Forbidden(f"the API key lacks the scope {scope.value}")
        return record

    return check
