"""Authentication and authorization of API calls: bearer API keys with scopes.

Who may do what:
- ``credits:grant`` may POST grants; ``credits:consume`` may POST consumptions;
  ``credits:read`` may read balances, live grants, one grant and the ledger, and list
  accounts. Reads never change an account (SPEC section 3), so a read-only key cannot move
  an account's clock.
- A key with an account prefix may touch only account ids that start with it, and lists
  only those (``visible_prefix``).
- Public: the probes (``/livez``, ``/readyz``, ``/healthz``) and ``/version`` (API routes
  marked ``@public``), ``/openapi.json``, and the documentation pages with their assets
  (``/docs``, ``/redoc``, ``/docs/assets/*``, from ``app.api.docs_pages``). The last ones are
  served outside the API routes (``LedgerRoute``, ``app.api.routing``), which are the only
  routes that authenticate.
- The account pages (``/ui/...``, ``app.ui.pages``) are not API routes either: they take the
  same keys, with ``credits:read``, from the header or from their sign-in cookie.

When no key is configured, authentication is off; ``app.cli`` then refuses to listen on
anything but loopback unless it is explicitly started with ``--insecure-no-auth``.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from app.keys import (
    KEY_ID_HEX_CHARS,
    KEY_PREFIX,
    KeyRecord,
    KeyRing,
    Scope,
    load_records,
    record_last_used,
)
from app.observe import NULL_OBSERVER, Observer

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


# A claimed key id is logged only when it has the shape of one: nothing else a caller sends
# in the header reaches the log (no secrets, no forged log lines).
_KEY_ID_RE: Final = re.compile(rf"{KEY_PREFIX}([0-9a-f]{{{KEY_ID_HEX_CHARS}}})_")
AUTH_LOG_MAX_LINES_PER_WINDOW: Final = 10
AUTH_LOG_WINDOW_S: Final = 10.0


class AuthFailureLog:
    """One WARNING line per failed authentication (401): why, the key id the caller claimed
    (never its secret) and the client address, so an operator can see a misconfigured
    client or someone guessing keys. At most ``max_lines`` lines per ``window_s``: a flood of
    bad keys must not flood the log (or the disk under it); the failures over the cap are
    counted and reported in one line when the next window opens."""

    def __init__(
        self,
        max_lines: int = AUTH_LOG_MAX_LINES_PER_WINDOW,
        window_s: float = AUTH_LOG_WINDOW_S,
        monotonic_s: Callable[[], float] = time.monotonic,
    ) -> None:
        assert max_lines >= 1
        assert window_s > 0
        self._max_lines = max_lines
        self._window_s = window_s
        self._monotonic_s = monotonic_s
        self._window_start_s = -window_s
        self._lines = 0
        self._suppressed = 0

    def record(self, reason: str, authorization: str | None, client: str) -> None:
        now_s = self._monotonic_s()
        if now_s - self._window_start_s >= self._window_s:
            if self._suppressed:
                log.warning(
                    "%d more failed authentications in the last %g s were not logged "
                    "(at most %d lines per window)",
                    self._suppressed,
                    self._window_s,
                    self._max_lines,
                )
            self._window_start_s, self._lines, self._suppressed = now_s, 0, 0
        if self._lines >= self._max_lines:
            self._suppressed += 1
            return
        self._lines += 1
        match = _KEY_ID_RE.match(authorization.partition(" ")[2].strip()) if authorization else None
        log.warning(
            "authentication failed (401): %s; key id %s; client %s",
            reason,
            match.group(1) if match else "none",
            client,
        )


# A key's last use is noted at most this often (seconds): exact enough to tell a key in use
# from a forgotten one, and one dictionary look-up per request otherwise.
KEY_USE_RESOLUTION_S: Final = 60.0


class KeyUsage:
    """When each key was last used, noted in memory as keys authenticate and written to the
    record of last use (``app.keys.record_last_used``) by ``save``, which the service calls
    every few seconds in a worker thread and once at shutdown. A request never waits for it
    and never fails because of it: a use is noted at most once per ``resolution_s`` per key
    (later uses within that time change nothing), and what a crash loses is the uses noted
    since the last save (a few seconds' worth)."""

    def __init__(
        self,
        keys_path: Path,
        resolution_s: float = KEY_USE_RESOLUTION_S,
        wall_clock_s: Callable[[], float] = time.time,
    ) -> None:
        self._keys_path = keys_path
        self._resolution_s = resolution_s
        self._wall_clock_s = wall_clock_s
        self._noted: dict[str, float] = {}  # the last use noted, per key
        self._unsaved: dict[str, float] = {}
        self._save_failed = False

    def note(self, key_id: str) -> None:
        now_s = self._wall_clock_s()
        last_s = self._noted.get(key_id)
        if last_s is not None and now_s - last_s < self._resolution_s:
            return
        self._noted[key_id] = now_s
        self._unsaved[key_id] = now_s

    def take_unsaved(self) -> dict[str, float]:
        """The uses noted since the last call (on the event loop: no lock needed)."""
        unsaved, self._unsaved = self._unsaved, {}
        return unsaved

    def give_back(self, unsaved: dict[str, float]) -> None:
        """Uses a save could not write, kept for the next one."""
        for key_id, at in unsaved.items():
            self._unsaved[key_id] = max(at, self._unsaved.get(key_id, at))

    def save(self, unsaved: dict[str, float], keep: set[str]) -> None:
        """Write ``unsaved`` (from ``take_unsaved``) into the record; blocking file I/O, so
        call it in a worker thread. Failures are logged (once until a save succeeds) and
        raised for the caller to ``give_back``."""
        try:
            record_last_used(self._keys_path, unsaved, keep)
        except Exception as exc:
            if not self._save_failed:
                log.warning("cannot record when API keys were last used: %s", exc)
            self._save_failed = True
            raise
        self._save_failed = False


class Authenticator:
    """The key ring in force, re-read when the key file changes (create or revoke a key and
    it takes effect within one poll, without a restart)."""

    def __init__(self, path: Path, observer: Observer = NULL_OBSERVER) -> None:
        self._path = path
        self.observer = observer  # counts every failure (the log is capped; this is not)
        # (mtime in ns, inode, size): what tells that the key file changed.
        self._file_identity: tuple[int, int, int] | None = None
        self.ring = KeyRing([])
        # Once a key file has been seen, authentication stays on for the life of the
        # process: revoking the last key (or losing the file) must lock everyone out, not
        # let everyone in.
        self._required = False
        self.failures = AuthFailureLog()
        self.usage = KeyUsage(path)
        self.reload_if_changed()

    @property
    def enabled(self) -> bool:
        return self._required

    def reload_if_changed(self) -> bool:
        try:
            st = self._path.stat()
            # The inode too: key commands replace the file (rename), so two changes within
            # one coarse mtime tick still look different.
            identity: tuple[int, int, int] | None = (st.st_mtime_ns, st.st_ino, st.st_size)
        except FileNotFoundError:
            identity = None
        if identity == self._file_identity:
            return False
        if identity is None:
            # The file went away: keep the keys in force rather than guess.
            self._file_identity = None
            return False
        # A broken file raises here and keeps the previous ring: failing closed would lock
        # every client out, failing open would let everyone in; keeping the old keys is safer.
        self.ring = KeyRing(load_records(self._path))
        self._file_identity = identity
        self._required = True
        log.info("API keys loaded: %d key(s) from %s", len(self.ring), self._path)
        return True


def authenticate(
    auth: Authenticator, authorization: str | None, client: str = "unknown"
) -> KeyRecord | None:
    """The caller's key from an ``Authorization`` header (401 without a valid one, logged
    with ``client``, the caller's address), or None when authentication is off."""
    if not auth.enabled:
        return None
    if authorization is None:
        auth.observer.auth_failed("missing")
        auth.failures.record("no Authorization header", authorization, client)
        raise Unauthenticated("an API key is required: Authorization: Bearer <key>")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        auth.observer.auth_failed("malformed")
        auth.failures.record("not a Bearer token", authorization, client)
        raise Unauthenticated("the Authorization header must be: Bearer <key>")
    record = auth.ring.authenticate(token.strip())
    if record is None:
        auth.observer.auth_failed("invalid")
        auth.failures.record("unknown or revoked key, or wrong secret", authorization, client)
        raise Unauthenticated("the API key is not valid")
    auth.usage.note(record.key_id)
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


def visible_prefix(record: KeyRecord | None, prefix: str) -> str | None:
    """What a listing of the accounts starting with ``prefix`` may show the caller: the
    accounts that start with both ``prefix`` and the key's account prefix. Two prefixes
    either nest (the longer one then says it all) or exclude each other (None: no account
    can start with both, so the answer is empty, not an error). With authentication off or
    a key without a prefix, ``prefix`` itself."""
    if record is None or prefix.startswith(record.account_prefix):
        return prefix
    if record.account_prefix.startswith(prefix):
        return record.account_prefix
    return None
