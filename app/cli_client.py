"""The client commands: ``gpu-credits grant``, ``consume``, ``balance``, ``ledger``, which
call a running service over HTTP and print its JSON answer.

- Where and who: ``--url`` (or ``GPU_CREDITS_URL``, default ``http://127.0.0.1:8000``) and
  the API key from ``--key``, ``--key-file``, ``GPU_CREDITS_KEY`` or ``GPU_CREDITS_KEY_FILE``
  (flags first; a key on the command line is visible to other users in ``ps``, so prefer
  a file or the environment).
- Writes are safe to retry: each carries an ``Idempotency-Key`` (``--idempotency-key``, or a
  fresh random one), and a request that got no answer, or a 503, is sent again with the
  same key (at most ``ATTEMPTS`` times): the service applies it once. When no answer ever
  comes, the command says the key, so the write can be repeated by hand just as safely.
- Exit codes: 0 success (the answer on stdout); 1 the service refused (its problem document
  on stdout, one line saying why on stderr); 2 a usage or configuration error; 3 no answer
  (for a write: it may or may not have been applied; repeat it with the key printed).
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

DEFAULT_URL: Final = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S: Final = 30.0
ATTEMPTS: Final = 3
RETRY_DELAYS_S: Final = (0.5, 1.0)  # before the second and third attempts
MAX_RETRY_AFTER_S: Final = 5.0
LEDGER_PAGE: Final = 1000

EXIT_REFUSED: Final = 1
EXIT_USAGE: Final = 2
EXIT_NO_ANSWER: Final = 3


class ClientUsageError(Exception):
    """A flag or variable that cannot be used: one line, exit 2."""


@dataclass(frozen=True, slots=True)
class Target:
    url: str  # the service's base URL, without a trailing slash
    key: str | None
    timeout_s: float


def target(url: str | None, key: str | None, key_file: str | None, timeout_s: float) -> Target:
    """Where to send requests and with which key, from the flags, else the environment."""
    base = url or os.environ.get("GPU_CREDITS_URL") or DEFAULT_URL
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ClientUsageError(f"the service URL must be http(s)://host[:port], got {base!r}")
    if key is not None and key_file is not None:
        raise ClientUsageError("give --key or --key-file, not both")
    if key is None and key_file is None:
        key = os.environ.get("GPU_CREDITS_KEY") or None
        if key is None:
            key_file = os.environ.get("GPU_CREDITS_KEY_FILE") or None
    if key_file is not None:
        try:
            key = Path(key_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ClientUsageError(f"cannot read the key file {key_file}: {exc}") from None
        if not key:
            raise ClientUsageError(f"the key file {key_file} is empty")
    if timeout_s <= 0:
        raise ClientUsageError("--timeout must be positive")
    return Target(base.rstrip("/"), key, timeout_s)


def account_path(account_id: str, *rest: str) -> str:
    """The path of an account's resource; the id is percent-encoded, so an id the service
    would refuse reaches it as given and is refused there (422), not misrouted."""
    return "/".join(("/v1/accounts", urllib.parse.quote(account_id, safe=":"), *rest))


def metadata_pairs(pairs: list[str] | None) -> dict[str, str] | None:
    if not pairs:
        return None
    metadata: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ClientUsageError(f"--metadata takes KEY=VALUE, got {pair!r}")
        if key in metadata:
            raise ClientUsageError(f"--metadata {key} given twice")
        metadata[key] = value
    return metadata


def grant_body(
    amount: int,
    timestamp: int,
    expiry: int,
    resources: list[str] | None,
    name: str | None,
    metadata: dict[str, str] | None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"amount": amount, "timestamp": timestamp, "expiry": expiry}
    if resources:
        body["resources"] = resources
    if name is not None:
        body["name"] = name
    if metadata is not None:
        body["metadata"] = metadata
    return body


def consume_body(amount: int, timestamp: int, resource: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"amount": amount, "timestamp": timestamp}
    if resource is not None:
        body["resource"] = resource
    return body


class NoAnswer(Exception):
    """No HTTP answer after every attempt."""


def call(
    where: Target,
    method: str,
    path: str,
    *,
    body: dict[str, Any] | None = None,
    params: dict[str, int | str] | None = None,
    idempotency_key: str | None = None,
) -> httpx.Response:
    """One request, sent again (same body, same key) after no answer or a 503, at most
    ``ATTEMPTS`` times in all. A write is only retried with an ``Idempotency-Key``."""
    headers = {"Accept": "application/json", "User-Agent": "gpu-credits-cli"}
    if where.key is not None:
        headers["Authorization"] = f"Bearer {where.key}"
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    retry_safe = method == "GET" or idempotency_key is not None
    last_error = ""
    retry_after = ""
    with httpx.Client(base_url=where.url, timeout=where.timeout_s, headers=headers) as client:
        for attempt in range(ATTEMPTS):
            if attempt:
                time.sleep(_delay(attempt, retry_after))
            try:
                response = client.request(method, path, json=body, params=params)
            except httpx.TransportError as exc:
                last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                retry_after = ""
                if retry_safe:
                    continue
                raise NoAnswer(last_error) from None
            if response.status_code == 503 and retry_safe and attempt + 1 < ATTEMPTS:
                retry_after = response.headers.get("retry-after", "")
                continue
            return response
    raise NoAnswer(last_error)


def _delay(attempt: int, retry_after: str) -> float:
    """The pause before attempt ``attempt`` (1-based after the first): the service's
    ``Retry-After`` when it gave a small one, else a short backoff."""
    if retry_after.isdigit():
        return min(float(retry_after), MAX_RETRY_AFTER_S)
    return RETRY_DELAYS_S[min(attempt, len(RETRY_DELAYS_S)) - 1]


def print_answer(response: httpx.Response) -> int:
    """The answer's JSON on stdout; for an error, also one line on stderr saying why.
    Returns the exit code."""
    try:
        document = response.json()
    except ValueError:
        document = None
    if document is not None:
        print(json.dumps(document, indent=2, ensure_ascii=False))
    if response.is_success and document is not None:
        return 0
    print(f"gpu-credits: {problem_line(response, document)}", file=sys.stderr)
    return EXIT_REFUSED


def problem_line(response: httpx.Response, document: Any) -> str:
    """An error answer in one line: status, the problem's type and its detail (and the
    fields a validation problem names)."""
    status = f"{response.status_code} {response.reason_phrase}".strip()
    if not isinstance(document, dict):
        text = " ".join(response.text.split())[:200]
        return f"{status}: {text or 'no body'}"
    slug = str(document.get("type", "")).rpartition(":")[2]
    line = f"{status} ({slug})" if slug else status
    detail = document.get("detail") or document.get("title") or ""
    if detail:
        line += f": {' '.join(str(detail).split())}"
    errors = document.get("errors")
    if isinstance(errors, list) and errors:
        named = [
            ".".join(str(part) for part in e.get("loc", ())) + f": {e.get('message', '')}"
            for e in errors[:5]
            if isinstance(e, dict)
        ]
        line += " [" + "; ".join(named) + "]"
    return line


def new_idempotency_key() -> str:
    return f"cli-{uuid.uuid4()}"


def write(where: Target, path: str, body: dict[str, Any], key: str | None, what: str) -> int:
    """POST a write with an Idempotency-Key and print the answer (see the module docstring)."""
    key = key or new_idempotency_key()
    try:
        response = call(where, "POST", path, body=body, idempotency_key=key)
    except NoAnswer as exc:
        print(
            f"gpu-credits: no answer from {where.url} ({exc}): the {what} may or may not have "
            f"been applied; repeat the command with --idempotency-key {key} to apply it at "
            "most once",
            file=sys.stderr,
        )
        return EXIT_NO_ANSWER
    if response.status_code == 503:
        # Still 503 after the retries: say the key, in case it was outcome-unknown.
        code = print_answer(response)
        print(
            f"gpu-credits: repeat with --idempotency-key {key} once the service is back: "
            f"the {what} is then applied at most once",
            file=sys.stderr,
        )
        return code
    return print_answer(response)


def read(where: Target, path: str, params: dict[str, int | str]) -> int:
    try:
        response = call(where, "GET", path, params=params)
    except NoAnswer as exc:
        print(f"gpu-credits: no answer from {where.url}: {exc}", file=sys.stderr)
        return EXIT_NO_ANSWER
    return print_answer(response)


def read_all_ledger(where: Target, account_id: str, after: int) -> int:
    """Every page of the ledger from ``after``, printed as one page (``next_after`` null)."""
    entries: list[Any] = []
    path = account_path(account_id, "ledger")
    while True:
        try:
            response = call(where, "GET", path, params={"after": after, "limit": LEDGER_PAGE})
        except NoAnswer as exc:
            print(f"gpu-credits: no answer from {where.url}: {exc}", file=sys.stderr)
            return EXIT_NO_ANSWER
        if not response.is_success:
            return print_answer(response)
        page = response.json()
        entries.extend(page["entries"])
        if page["next_after"] is None:
            break
        after = page["next_after"]
    answer = {"account_id": account_id, "entries": entries, "next_after": None}
    print(json.dumps(answer, indent=2, ensure_ascii=False))
    return 0
