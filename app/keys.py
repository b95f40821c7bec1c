"""API keys: bearer tokens with scopes and an optional account-id prefix.

A key looks like ``gck_<key_id>_<secret>``. Only ``sha256(secret)`` is stored, in a JSON file
(``GPU_CREDITS_API_KEYS_FILE``) that ``gpu-credits keys create`` appends to; the key itself is
printed once and never kept. The secret carries 256 random bits, so a fast hash is enough (a
slow password hash protects low-entropy secrets, which these are not). ``key_id`` is public:
it finds the record; the secret is then compared in constant time (``hmac.compare_digest``).

The file is small and read whole; the service re-reads it when its modification time changes,
so creating or revoking a key takes effect without a restart.

When each key was last used is kept apart, in ``<keys file stem>.last-used.json`` next to
it (``last_used_path``): the service notes a key's use in memory when it authenticates
(at most once a minute per key, see ``app.api.auth.KeyUsage``) and merges what it noted into
that file every few seconds, off the request path. The key file itself is never rewritten
by the service, so its hashes are only ever written by the key commands.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import secrets
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Final

from app.quotas import Quota

KEY_PREFIX: Final = "gck_"
KEY_ID_HEX_CHARS: Final = 12
MAX_KEYS: Final = 10_000  # the file is read whole; keep it small
MAX_KEY_CHARS: Final = 128


class Scope(StrEnum):
    GRANT = "credits:grant"
    CONSUME = "credits:consume"
    READ = "credits:read"
    # Account settings (the lateness window, SPEC section 6). New in the release with late
    # events: keys made before it never hold it, so nothing they could do changes.
    ADMIN = "credits:admin"
    # GET /metrics (unless GPU_CREDITS_METRICS_PUBLIC): figures over every account, so only
    # a key without an account prefix may use it.
    METRICS = "metrics:read"


@dataclass(frozen=True, slots=True)
class KeyRecord:
    key_id: str
    name: str
    secret_sha256: str
    scopes: tuple[Scope, ...]
    account_prefix: str  # "" allows every account
    created_at_s: float
    # Quota overrides for the tenant of ``account_prefix`` (None: the service's defaults).
    max_accounts: int | None = None
    max_live_grants: int | None = None
    max_idempotency_keys: int | None = None

    def allows_account(self, account_id: str) -> bool:
        return account_id.startswith(self.account_prefix)


def tenant_quotas(
    records: Iterable[KeyRecord], default: Quota
) -> tuple[dict[str, Quota], dict[str, str]]:
    """The tenants the keys define: each account prefix a key is restricted to, with its
    quota (a key's override where it has one; with several keys on one prefix, the largest
    any of them grants), and which key belongs to which prefix."""
    overrides: dict[str, list[KeyRecord]] = {}
    prefix_of_key: dict[str, str] = {}
    for record in records:
        if record.account_prefix:
            overrides.setdefault(record.account_prefix, []).append(record)
            prefix_of_key[record.key_id] = record.account_prefix

    def pick(values: list[int | None], fallback: int) -> int:
        given = [v for v in values if v is not None]
        return max(given) if given else fallback

    quotas = {
        prefix: Quota(
            max_accounts=pick([r.max_accounts for r in keys], default.max_accounts),
            max_live_grants=pick([r.max_live_grants for r in keys], default.max_live_grants),
            max_idempotency_keys=pick(
                [r.max_idempotency_keys for r in keys], default.max_idempotency_keys
            ),
        )
        for prefix, keys in overrides.items()
    }
    return quotas, prefix_of_key


class KeyFileError(ValueError):
    pass


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_key(
    name: str, scopes: tuple[Scope, ...], account_prefix: str, now_s: float
) -> tuple[str, KeyRecord]:
    """A fresh key and the record to store for it. The key is returned once, never stored."""
    key_id = secrets.token_hex(KEY_ID_HEX_CHARS // 2)
    secret = secrets.token_urlsafe(32)
    record = KeyRecord(key_id, name, _digest(secret), scopes, account_prefix, now_s)
    return f"{KEY_PREFIX}{key_id}_{secret}", record


class KeyRing:
    """The keys the service accepts, looked up by key id."""

    def __init__(self, records: list[KeyRecord]) -> None:
        self._by_id = {r.key_id: r for r in records}

    def __len__(self) -> int:
        return len(self._by_id)

    def records(self) -> list[KeyRecord]:
        return list(self._by_id.values())

    def authenticate(self, token: str) -> KeyRecord | None:
        """The record of a valid key, or None. Constant time in the secret."""
        if len(token) > MAX_KEY_CHARS or not token.startswith(KEY_PREFIX):
            return None
        key_id, sep, secret = token[len(KEY_PREFIX) :].partition("_")
        if not sep:
            return None
        record = self._by_id.get(key_id)
        # Compare against a dummy digest when the id is unknown, so timing does not tell
        # whether a key id exists.
        expected = record.secret_sha256 if record is not None else "0" * 64
        ok = hmac.compare_digest(_digest(secret), expected)
        return record if ok and record is not None else None


def load_records(path: Path) -> list[KeyRecord]:
    if not path.exists():
        return []
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        items = raw["keys"]
        if not isinstance(items, list) or len(items) > MAX_KEYS:
            raise KeyFileError(f"{path}: 'keys' must be a list of at most {MAX_KEYS}")
        return [
            KeyRecord(
                key_id=str(item["key_id"]),
                name=str(item["name"]),
                secret_sha256=str(item["secret_sha256"]),
                scopes=tuple(Scope(s) for s in item["scopes"]),
                account_prefix=str(item["account_prefix"]),
                created_at_s=float(item["created_at_s"]),
                max_accounts=_optional_count(item.get("max_accounts")),
                max_live_grants=_optional_count(item.get("max_live_grants")),
                max_idempotency_keys=_optional_count(item.get("max_idempotency_keys")),
            )
            for item in items
        ]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise KeyFileError(f"{path}: unreadable API key file: {exc}") from exc


def _optional_count(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 1:
        raise ValueError(f"a quota must be a positive integer, got {value!r}")
    return value


def save_records(path: Path, records: list[KeyRecord]) -> None:
    """Write atomically (temp file + rename), readable by the owner only: the hashes are not
    secrets, but the file's contents are nobody else's business."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"keys": [asdict(r) for r in records]}, indent=2) + "\n"
    _replace_owner_only(path, body, ".api-keys.")


def _replace_owner_only(path: Path, body: str, temp_prefix: str) -> None:
    """``path`` holds ``body`` afterwards, or what it held before (a temp file fsynced and
    renamed over it), readable by the owner only."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=temp_prefix, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise read-modify-write of the key file between concurrent commands: without it
    two `keys create` lose one key, and a `keys revoke` can be undone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def create_key(
    path: Path,
    name: str,
    scopes: tuple[Scope, ...],
    account_prefix: str,
    max_accounts: int | None = None,
    max_live_grants: int | None = None,
    max_idempotency_keys: int | None = None,
) -> tuple[str, KeyRecord]:
    """The ``max_*`` arguments override the service's quota for the tenant of
    ``account_prefix``."""
    with _locked(path):
        records = load_records(path)
        if len(records) >= MAX_KEYS:
            raise KeyFileError(f"{path}: already holds {MAX_KEYS} keys; revoke some first")
        key, record = new_key(name, scopes, account_prefix, time.time())
        record = replace(
            record,
            max_accounts=_optional_count(max_accounts),
            max_live_grants=_optional_count(max_live_grants),
            max_idempotency_keys=_optional_count(max_idempotency_keys),
        )
        save_records(path, [*records, record])
    return key, record


def revoke_key(path: Path, key_id: str) -> bool:
    with _locked(path):
        records = load_records(path)
        kept = [r for r in records if r.key_id != key_id]
        if len(kept) == len(records):
            return False
        save_records(path, kept)
    with contextlib.suppress(OSError, KeyFileError):  # a record of use is no key: best effort
        record_last_used(path, {}, keep={r.key_id for r in kept})
    return True


# -- last use ------------------------------------------------------------------------------


def last_used_path(keys_path: Path) -> Path:
    """Where the last use of the keys of ``keys_path`` is kept: next to it."""
    return keys_path.with_name(f"{keys_path.stem}.last-used.json")


def load_last_used(keys_path: Path) -> dict[str, float]:
    """When each key was last used (seconds since the epoch), by key id; {} when none was
    recorded yet."""
    path = last_used_path(keys_path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"{path}: unreadable record of key use: {exc}") from exc
    used = raw.get("last_used_s") if isinstance(raw, dict) else None
    if not isinstance(used, dict) or not all(
        isinstance(k, str) and type(v) in (int, float) for k, v in used.items()
    ):
        raise KeyFileError(f"{path}: 'last_used_s' must map key ids to seconds")
    return {k: float(v) for k, v in used.items()}


def record_last_used(keys_path: Path, used: dict[str, float], keep: set[str] | None = None) -> None:
    """Merge ``used`` into the record of last use (the later time of the two wins, so
    several processes sharing a key file can all write it), forgetting the keys not in
    ``keep`` when it is given. Atomic, under a lock: read, merge, replace."""
    path = last_used_path(keys_path)
    with _locked(path):
        try:
            recorded = load_last_used(keys_path)
        except KeyFileError:
            recorded = {}  # a broken record is rebuilt from what is known now
        merged = dict(recorded)
        for key_id, at in used.items():
            merged[key_id] = max(at, merged.get(key_id, at))
        if keep is not None:
            merged = {k: v for k, v in merged.items() if k in keep}
        if merged == recorded and (path.exists() or not merged):
            return
        body = json.dumps({"last_used_s": merged}, indent=2, sort_keys=True) + "\n"
        _replace_owner_only(path, body, ".last-used.")
