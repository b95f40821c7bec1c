"""Security against real ``gpu-credits`` processes, the way a user runs them (issue 4).

- ``gpu-credits keys create`` prints a key once and stores only its SHA-256 hash, owner-only.
- With keys configured: 401 for a missing, unknown or malformed key (problem document with
  ``WWW-Authenticate``), 403 for a wrong scope or an account outside the key's prefix, success
  otherwise; ``/healthz``, ``/openapi.json`` and the documentation (``/docs``, ``/redoc``,
  ``/docs/assets/*``) stay public. Keys created or revoked while the
  service runs take effect once the key file is re-read.
- Secure by default: no keys and a non-loopback address is refused unless
  ``--insecure-no-auth``, which warns loudly; with keys, any address is fine.
- No key, nor its secret part, ever appears in the server's output (access log, debug level).
- The committed OpenAPI file declares the bearer scheme on every ``/v1`` operation.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.keys import load_records
from tests.support.api import assert_problem
from tests.support.server_process import ROOT, ServerProcess, console_script, free_port

KEY_RE = re.compile(r"^gck_(?P<key_id>[0-9a-f]{12})_(?P<secret>[A-Za-z0-9_-]{43})$")
GRANT_BODY = {"amount": 10, "timestamp": 1, "expiry": 1000}
STARTUP_TIMEOUT_S = 60.0
KEY_RELOAD_TIMEOUT_S = 20.0  # the service re-reads the key file every ~2 s


# -- helpers -----------------------------------------------------------------------------


def cli_env(data_dir: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "GPU_CREDITS_DATA_DIR": str(data_dir), **extra}


def run_cli(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [console_script(), *args],
        env=cli_env(data_dir),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@dataclass(frozen=True)
class Key:
    key: str
    key_id: str
    secret: str

    @property
    def bearer(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def create_key(data_dir: Path, name: str, *scopes: str, prefix: str | None = None) -> Key:
    args = ["keys", "create", "--name", name]
    for scope in scopes:
        args += ["--scope", scope]
    if prefix is not None:
        args += ["--account-prefix", prefix]
    done = run_cli(data_dir, *args)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1, f"stdout must be the key alone: {done.stdout!r}"
    match = KEY_RE.fullmatch(lines[0])
    assert match, f"not a key: {lines[0]!r}"
    return Key(lines[0], match["key_id"], match["secret"])


def revoke_key(data_dir: Path, key_id: str) -> None:
    done = run_cli(data_dir, "keys", "revoke", key_id)
    assert done.returncode == 0, done.stderr


def keys_path(data_dir: Path) -> Path:
    return data_dir / "api-keys.json"


def assert_unauthenticated(response: httpx.Response) -> None:
    assert_problem(response, 401)
    challenge = response.headers.get("www-authenticate", "")
    assert challenge.lower().startswith("bearer"), response.headers


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)  # polling interval while waiting for a condition


def nothing_listens(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(2.0)
        return s.connect_ex(("127.0.0.1", port)) != 0


class Serve:
    """``gpu-credits serve`` with arbitrary arguments (``ServerProcess`` always binds to
    127.0.0.1); output captured to a file. Requests only ever go to 127.0.0.1."""

    def __init__(self, data_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.args = [*args, "--port", str(self.port)]
        self.env = env or {}
        self.log_path = data_dir / f"serve-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [console_script(), "serve", *self.args],
                env=cli_env(self.data_dir, **self.env),
                cwd=ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        def healthy() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited {self.proc.returncode}: {self.output()}")
            try:
                return httpx.get(f"{self.base_url}/healthz", timeout=1.0).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(healthy, STARTUP_TIMEOUT_S, "server healthy")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)


@pytest.fixture
def serve_factory() -> Iterator[Callable[..., Serve]]:
    started: list[Serve] = []

    def make(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> Serve:
        s = Serve(data_dir, *args, env=env)
        started.append(s)
        s.start()
        return s

    yield make
    for s in started:
        s.stop()


# -- a service with keys, shared by the module ---------------------------------------------


@dataclass(frozen=True)
class Secured:
    server: ServerProcess
    data_dir: Path
    admin: Key  # every scope, every account
    granter: Key  # credits:grant on team-a:*
    consumer: Key  # credits:consume on team-a:*
    reader: Key  # credits:read, every account

    @property
    def keys(self) -> list[Key]:
        return [self.admin, self.granter, self.consumer, self.reader]

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server.base_url, timeout=10.0)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    data_dir = tmp_path_factory.mktemp("secured") / "data"
    data_dir.mkdir()

    def make(spec: tuple[str, tuple[str, ...], str | None]) -> Key:
        name, scopes, prefix = spec
        return create_key(data_dir, name, *scopes, prefix=prefix)

    with ThreadPoolExecutor(max_workers=4) as pool:  # each is a process: let them overlap
        admin, granter, consumer, reader = pool.map(
            make,
            [
                ("admin", ("credits:grant", "credits:consume", "credits:read"), None),
                ("team-a-granter", ("credits:grant",), "team-a:"),
                ("team-a-scheduler", ("credits:consume",), "team-a:"),
                ("auditor", ("credits:read",), None),
            ],
        )
    server = ServerProcess(
        data_dir, env={"GPU_CREDITS_ACCESS_LOG": "true", "GPU_CREDITS_LOG_LEVEL": "debug"}
    )
    server.start()
    try:
        yield Secured(server, data_dir, admin, granter, consumer, reader)
    finally:
        server.stop()


LOG_WAIT_S = 30.0


def grants_url(account: str) -> str:
    return f"/v1/accounts/{account}/grants"


def consume_url(account: str) -> str:
    return f"/v1/accounts/{account}/consumptions"


def balance_url(account: str) -> str:
    return f"/v1/accounts/{account}/balance"


def ledger_url(account: str) -> str:
    return f"/v1/accounts/{account}/ledger"


# -- keys CLI ------------------------------------------------------------------------------


def test_keys_create_prints_the_key_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = create_key(data_dir, "scheduler", "credits:grant", "credits:read", prefix="team-a:")
    second = create_key(data_dir, "auditor", "credits:read")
    assert first.key != second.key
    assert first.key_id != second.key_id

    path = keys_path(data_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    for k in (first, second):
        assert k.key not in text
        assert k.secret not in text
        assert hashlib.sha256(k.secret.encode()).hexdigest() in text
    records = {r["key_id"]: r for r in json.loads(text)["keys"]}
    assert set(records) == {first.key_id, second.key_id}
    assert records[first.key_id]["scopes"] == ["credits:grant", "credits:read"]
    assert records[first.key_id]["account_prefix"] == "team-a:"
    assert records[second.key_id]["account_prefix"] == ""
    # nothing else in the directory holds the secret (no stray temp file)
    for other in data_dir.iterdir():
        assert first.secret not in other.read_text(errors="replace"), other

    listed = run_cli(data_dir, "keys", "list")
    assert listed.returncode == 0, listed.stderr
    assert first.key_id in listed.stdout
    assert second.key_id in listed.stdout
    for k in (first, second):
        assert k.secret not in listed.stdout + listed.stderr


def test_keys_create_rejects_an_unknown_scope(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    create_key(data_dir, "ok", "credits:read")
    before = keys_path(data_dir).read_bytes()
    done = run_cli(data_dir, "keys", "create", "--name", "x", "--scope", "credits:owner")
    assert done.returncode != 0
    assert not done.stdout.strip()
    assert keys_path(data_dir).read_bytes() == before


def test_keys_revoke_of_an_unknown_id_fails(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    create_key(data_dir, "ok", "credits:read")
    before = keys_path(data_dir).read_bytes()
    done = run_cli(data_dir, "keys", "revoke", "000000000000")
    assert done.returncode != 0
    assert keys_path(data_dir).read_bytes() == before


def test_concurrent_key_commands_lose_nothing(tmp_path: Path) -> None:
    """Concurrent ``keys create`` (each a process of its own) all land in the key file."""
    env = {**os.environ, "GPU_CREDITS_DATA_DIR": str(tmp_path)}

    def create(i: int) -> str:
        done = subprocess.run(
            [console_script(), "keys", "create", "--name", f"n{i}", "--scope", "credits:read"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    with ThreadPoolExecutor(max_workers=12) as pool:
        keys = list(pool.map(create, range(12)))
    records = load_records(tmp_path / "api-keys.json")
    assert len(records) == 12
    assert {k.split("_")[1] for k in keys} == {r.key_id for r in records}


# -- authentication and authorization ------------------------------------------------------


def test_missing_key_is_401_with_a_challenge(secured: Secured) -> None:
    with secured.client() as http:
        assert_unauthenticated(http.post(grants_url("team-a:x"), json=GRANT_BODY))
        assert_unauthenticated(http.get(balance_url("team-a:x")))
        assert_unauthenticated(http.get(ledger_url("team-a:x")))
        assert_unauthenticated(http.get("/v1/accounts"))
        # nothing was created by the refused grant
        assert http.get(balance_url("team-a:x"), headers=secured.admin.bearer).status_code == 404


def _tamper(secret: str) -> str:
    return secret[:-1] + ("A" if secret[-1] != "A" else "B")


BAD_AUTHORIZATION: list[tuple[str, Callable[[Secured], str]]] = [
    ("empty", lambda s: ""),
    ("scheme-only", lambda s: "Bearer"),
    ("basic-scheme", lambda s: "Basic dXNlcjpwYXNzd29yZA=="),
    ("key-without-scheme", lambda s: s.admin.key),
    ("basic-with-real-key", lambda s: f"Basic {s.admin.key}"),
    ("unknown-key-id", lambda s: f"Bearer gck_000000000000_{s.admin.secret}"),
    ("tampered-secret", lambda s: f"Bearer gck_{s.admin.key_id}_{_tamper(s.admin.secret)}"),
    ("secret-of-another-key", lambda s: f"Bearer gck_{s.reader.key_id}_{s.admin.secret}"),
    ("key-id-only", lambda s: f"Bearer gck_{s.admin.key_id}"),
    ("empty-secret", lambda s: f"Bearer gck_{s.admin.key_id}_"),
    ("no-prefix", lambda s: f"Bearer {s.admin.key_id}_{s.admin.secret}"),
    ("trailing-garbage", lambda s: f"Bearer {s.admin.key}x"),
    ("truncated", lambda s: f"Bearer {s.admin.key[:-1]}"),
    ("overlong", lambda s: f"Bearer {s.admin.key}{'x' * 4000}"),
    ("not-a-key", lambda s: "Bearer hunter2"),
    ("two-keys", lambda s: f"Bearer {s.admin.key} {s.reader.key}"),
]


@pytest.mark.parametrize(
    "authorization", [b for _, b in BAD_AUTHORIZATION], ids=[i for i, _ in BAD_AUTHORIZATION]
)
def test_unknown_or_malformed_key_is_401(
    secured: Secured, authorization: Callable[[Secured], str]
) -> None:
    value = authorization(secured)
    with secured.client() as http:
        for response in (
            http.post(grants_url("team-a:bad"), json=GRANT_BODY, headers={"Authorization": value}),
            http.get(balance_url("team-a:bad"), headers={"Authorization": value}),
        ):
            assert_unauthenticated(response)
            for k in secured.keys:
                assert k.secret not in response.text  # the answer never echoes a key
        assert http.get(balance_url("team-a:bad"), headers=secured.admin.bearer).status_code == 404


def test_wrong_scope_is_403(secured: Secured) -> None:
    account = "team-a:scopes"
    with secured.client() as http:
        attempts = [
            http.post(grants_url(account), json=GRANT_BODY, headers=secured.reader.bearer),
            http.post(grants_url(account), json=GRANT_BODY, headers=secured.consumer.bearer),
            http.post(
                consume_url(account),
                json={"amount": 1, "timestamp": 1},
                headers=secured.granter.bearer,
            ),
            http.get(balance_url(account), headers=secured.granter.bearer),
            http.get(ledger_url(account), headers=secured.consumer.bearer),
            http.get(grants_url(account), headers=secured.granter.bearer),
            http.get("/v1/accounts", headers=secured.consumer.bearer),
        ]
        for response in attempts:
            body = assert_problem(response, 403)
            assert "scope" in body["detail"]
        assert http.get(balance_url(account), headers=secured.reader.bearer).status_code == 404


@pytest.mark.parametrize("account", ["team-b:jobs", "team-a", "xteam-a:jobs", "TEAM-A:jobs"])
def test_account_outside_the_key_prefix_is_403(secured: Secured, account: str) -> None:
    with secured.client() as http:
        assert_problem(
            http.post(grants_url(account), json=GRANT_BODY, headers=secured.granter.bearer), 403
        )
        assert_problem(
            http.post(
                consume_url(account),
                json={"amount": 1, "timestamp": 1},
                headers=secured.consumer.bearer,
            ),
            403,
        )
        # nothing was created
        assert http.get(balance_url(account), headers=secured.reader.bearer).status_code == 404


def test_right_scope_and_account_succeed(secured: Secured) -> None:
    account = "team-a:jobs"
    with secured.client() as http:
        granted = http.post(grants_url(account), json=GRANT_BODY, headers=secured.granter.bearer)
        assert granted.status_code == 201, granted.text
        consumed = http.post(
            consume_url(account),
            json={"amount": 4, "timestamp": 2},
            headers=secured.consumer.bearer,
        )
        assert consumed.status_code == 200, consumed.text
        balance = http.get(balance_url(account), headers=secured.reader.bearer)
        assert balance.status_code == 200, balance.text
        assert balance.json()["balance"] == 6
        ledger = http.get(ledger_url(account), headers=secured.admin.bearer)
        assert ledger.status_code == 200, ledger.text
        assert [e["kind"] for e in ledger.json()["entries"]] == ["grant", "consumption"]
        # the scheme name is case-insensitive (RFC 9110)
        lower = http.get(
            balance_url(account), headers={"Authorization": f"bearer {secured.reader.key}"}
        )
        assert lower.status_code == 200, lower.text


@pytest.mark.parametrize("authorization", [None, "Bearer nonsense", "Basic Zm9vOmJhcg=="])
def test_healthz_openapi_and_docs_are_public(secured: Secured, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    with secured.client() as http:
        health = http.get("/healthz", headers=headers)
        assert health.status_code == 200, health.text
        assert health.json() == {"status": "ok"}
        published = http.get("/openapi.json", headers=headers)
        assert published.status_code == 200, published.text
        # the documentation pages and what they load (tests/test_docs_pages.py)
        for path in ("/docs", "/redoc", "/docs/assets/swagger-ui-bundle.js"):
            page = http.get(path, headers=headers)
            assert page.status_code == 200, (path, page.text[:200])
    committed = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    assert published.json() == committed


def test_keys_created_and_revoked_while_running_take_effect(secured: Secured) -> None:
    probe = balance_url("team-a:never-created")  # read-only: 404 when allowed, 401 when not
    with secured.client() as http:

        def status_with(key: Key) -> int:
            return http.get(probe, headers=key.bearer).status_code

        new = create_key(secured.data_dir, "rotated-in", "credits:read")
        wait_until(lambda: status_with(new) != 401, KEY_RELOAD_TIMEOUT_S, "new key accepted")
        assert status_with(new) == 404

        revoke_key(secured.data_dir, new.key_id)
        wait_until(lambda: status_with(new) == 401, KEY_RELOAD_TIMEOUT_S, "revoked key refused")
        assert_unauthenticated(http.get(probe, headers=new.bearer))
        # the others are untouched
        assert status_with(secured.reader) == 404
        assert_unauthenticated(http.get(probe))


def test_revoking_the_last_key_does_not_turn_authentication_off(
    tmp_path: Path, serve_factory: Callable[..., Serve]
) -> None:
    data_dir = tmp_path / "data"
    only = create_key(data_dir, "only", "credits:grant", "credits:read")
    server = serve_factory(data_dir, "--host", "0.0.0.0")
    probe = f"{server.base_url}{balance_url('acct')}"
    with httpx.Client(timeout=10.0) as http:
        assert http.get(probe, headers=only.bearer).status_code == 404
        assert_unauthenticated(http.get(probe))
        revoke_key(data_dir, only.key_id)

        def settled() -> bool:
            # Until the file is re-read the revoked key still works; afterwards it must not.
            # A keyless request that is let through means authentication was switched off.
            keyless = http.get(probe)
            assert keyless.status_code == 401, (
                f"keyless request answered {keyless.status_code} after the last key was revoked"
            )
            return http.get(probe, headers=only.bearer).status_code == 401

        wait_until(settled, KEY_RELOAD_TIMEOUT_S, "revoked key refused")
        granted = http.post(f"{server.base_url}{grants_url('acct')}", json=GRANT_BODY)
        assert_unauthenticated(granted)


# -- secure by default ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--host", "0.0.0.0"], {}),
        (["--host", "::"], {}),
        (["--host", "192.0.2.10"], {}),
        ([], {"GPU_CREDITS_HOST": "0.0.0.0"}),
    ],
    ids=["flag-0.0.0.0", "flag-ipv6-any", "flag-other-address", "env-0.0.0.0"],
)
def test_non_loopback_without_keys_is_refused(
    tmp_path: Path, args: list[str], env: dict[str, str]
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    done = subprocess.run(
        [console_script(), "serve", *args, "--port", str(port)],
        env=cli_env(data_dir, **env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0, done.stdout + done.stderr
    message = done.stderr
    assert "refusing to listen" in message, message
    assert "--insecure-no-auth" in message
    assert "keys create" in message
    assert "Uvicorn running" not in done.stdout + done.stderr
    assert nothing_listens(port)


def test_insecure_flag_starts_and_warns_loudly(
    tmp_path: Path, serve_factory: Callable[..., Serve]
) -> None:
    server = serve_factory(tmp_path / "data", "--host", "0.0.0.0", "--insecure-no-auth")
    assert "INSECURE" in server.output()
    response = httpx.post(
        f"{server.base_url}{grants_url('open')}", json=GRANT_BODY, timeout=10.0
    )  # no authentication: that is what the flag asked for
    assert response.status_code == 201, response.text


def test_non_loopback_with_keys_starts_and_requires_them(
    tmp_path: Path, serve_factory: Callable[..., Serve]
) -> None:
    data_dir = tmp_path / "data"
    key = create_key(data_dir, "scheduler", "credits:grant")
    server = serve_factory(data_dir, "--host", "0.0.0.0")
    url = f"{server.base_url}{grants_url('acct')}"
    with httpx.Client(timeout=10.0) as http:
        assert_unauthenticated(http.post(url, json=GRANT_BODY))
        assert http.post(url, json=GRANT_BODY, headers=key.bearer).status_code == 201
    assert "INSECURE" not in server.output()


def test_loopback_without_keys_starts(tmp_path: Path, serve_factory: Callable[..., Serve]) -> None:
    server = serve_factory(tmp_path / "data", "--host", "127.0.0.1")
    assert "INSECURE" not in server.output()
    assert httpx.get(f"{server.base_url}/healthz", timeout=10.0).status_code == 200


# -- no secrets in logs --------------------------------------------------------------------


def test_no_secrets_in_logs(secured: Secured) -> None:
    account = "team-a:logged"
    tampered = f"gck_{secured.admin.key_id}_{_tamper(secured.admin.secret)}"
    with secured.client() as http:
        ok = http.post(grants_url(account), json=GRANT_BODY, headers=secured.granter.bearer)
        assert ok.status_code == 201, ok.text
        assert http.get(balance_url(account), headers=secured.reader.bearer).status_code == 200
        assert http.get(ledger_url(account), headers=secured.admin.bearer).status_code == 200
        failures = [
            http.post(grants_url(account), json=GRANT_BODY, headers=secured.reader.bearer),
            http.post(grants_url("team-b:x"), json=GRANT_BODY, headers=secured.granter.bearer),
            http.get(balance_url(account), headers={"Authorization": f"Bearer {tampered}"}),
            http.get(balance_url(account), headers={"Authorization": secured.admin.key}),
            http.post(
                grants_url(account),
                content=b'{"amount": true}',
                headers={**secured.admin.bearer, "Content-Type": "application/json"},
            ),
            http.post(
                grants_url(account),
                content=b"{",
                headers={**secured.admin.bearer, "Content-Type": "application/json"},
            ),
        ]
        assert [r.status_code for r in failures] == [403, 403, 401, 401, 422, 400]

    # the check means something only if requests are logged at all: one JSON line each
    # (app.api.requests), with the route and the key id, never the key. Request lines are
    # written in order, within the log flush interval (app.logs): once the last request's
    # line (the 400) is there, every line before it is.
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        log = secured.server.log_path.read_text(errors="replace")
        requests = [json.loads(line) for line in log.splitlines() if '"app.requests"' in line]
        if any(r["status"] == 400 and "logged" in r["path"] for r in requests):
            break
        assert time.monotonic() < deadline, log[-4000:]
        time.sleep(0.02)  # polling interval while waiting for the log flush
    logged = {(r["route"], r["status"], r["key_id"]) for r in requests if "logged" in r["path"]}
    assert ("/v1/accounts/{account_id}/grants", 201, secured.granter.key_id) in logged, logged
    assert ("/v1/accounts/{account_id}/balance", 401, None) in logged, logged
    for k in secured.keys:
        assert k.key not in log
        assert k.secret not in log
    assert tampered not in log
    # The tampered secret itself (not the last "_"-separated piece of the key: a secret is
    # URL-safe base64 and may hold "_", which once left a single letter to look for).
    assert _tamper(secured.admin.secret) not in log


# -- the OpenAPI file tells generated clients to send the key ------------------------------


def test_openapi_file_declares_bearer_security_on_every_v1_operation() -> None:
    doc = json.loads((ROOT / "openapi" / "openapi.json").read_text())
    schemes = doc["components"]["securitySchemes"]
    bearer = {
        name for name, s in schemes.items() if s["type"] == "http" and s["scheme"] == "bearer"
    }
    assert bearer, schemes
    assert not doc.get("security"), "a global requirement would cover /healthz too"
    v1_operations = 0
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            security = operation.get("security")
            if path.startswith("/v1/"):
                v1_operations += 1
                assert security, f"{method} {path} declares no security"
                for requirement in security:
                    assert requirement, f"{method} {path} allows anonymous access"
                    assert set(requirement) <= bearer, (method, path, requirement)
                assert {"401", "403"} <= set(operation["responses"]), (method, path)
            else:
                assert not security or {} in security, f"{method} {path} should be public"
    assert v1_operations >= 3
    assert "/healthz" in doc["paths"]
