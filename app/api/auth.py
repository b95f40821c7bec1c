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
from pathlib import Path

from app.keys import KeyRecord, KeyRing, Scope, load_records

log = logging.getLogger("app.auth")

# The OpenAPI security scheme (declared by app.api.openapi on every non-public operation).
SECURITY_SCHEME_NAME = "ApiKey"
SECURITY_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "An API key from `gpu-credits keys create`: `Authorization: Bearer gck_...`.",
}


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
        self._mtime_ns: tuple[int, int, int] | None = None
        self.ring = KeyRing([])
        # Once a key file has been seen, authentication stays on for the life of the
        # process: revoking the last key (or losing the file) must lock everyone out, not
        # let everyone in.
        self._required = False
        self.reload_if_changed()

    @property
    def enabled(self) -> bool:
        return self._required

    def reload_if_changed(self) -> bool:
        try:
            st = self._path.stat()
            # The inode too: key commands replace the file (rename), so two changes within
            # one coarse mtime tick still look different.
            mtime_ns: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_ino, st.st_size)
        except FileNotFoundError:
            mtime_ns = None
        if mtime_ns == self._mtime_ns:
            return False
        if mtime_ns is None:
            # The file went away: keep the keys in force rather than guess.
            self._mtime_ns = None
            return False
        # A broken file raises here and keeps the previous ring: failing closed would lock
        # every client out, failing open would let everyone in; keeping the old keys is safer.
        self.ring = KeyRing(load_records(self._path))
        self._mtime_ns = mtime_ns
        self._required = True
        log.info("API keys loaded: %d key(s) from %s", len(self.ring), self._path)
        return True


def authenticate(auth: Authenticator, authorization: str | None) -> KeyRecord | None:
    """The caller's key from an ``Authorization`` header (401 without a valid one), or None
    when authentication is off."""
    if not auth.enabled:
        return None
    if authorization is None:
        raise Unauthenticated("an API key is required: Authorization: Bearer <key>")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("the Authorization header must be: Bearer <key>")
    record = auth.ring.authenticate(token.strip())
    if record is None:
        raise Unauthenticated("the API key is not valid")
    return record


def authorize(
    record: KeyRecord | None, scope: Scope, account_id: str | None, where: str = ""
) -> None:
    """403 unless ``record`` holds ``scope`` and may touch ``account_id`` (None: auth off)."""
    if record is None:
        return
    if scope not in record.scopes:
        raise Forbidden(f"{where}the API key lacks the scope {scope.value}")
    if account_id is not None and not record.allows_account(account_id):
        raise Forbidden(
            f"{where}the API key may only touch accounts starting with {record.account_prefix!r}"
        )
