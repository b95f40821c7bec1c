"""Contract fuzzing (issue 4): schemathesis drives the app from the COMMITTED
``openapi/openapi.json``, in process through ASGI, with memory storage.

Every operation is fuzzed with schema-conforming (positive) and schema-violating (negative)
requests, in three authentication set-ups: no keys configured (authentication off), a valid
key with every scope sent on each request, and a key that the service does not know. Each
response must conform to the file: no 5xx, a documented status, a documented content type,
a body matching the documented schema, documented headers. With keys configured schemathesis
also checks that invalid data is rejected and that authentication is not ignored (it re-sends
successful requests without the key and with a made-up one).

Budget: at most ``MAX_EXAMPLES`` generated requests per operation, generation mode and
set-up, i.e. 3 set-ups x (every /v1 operation x 2 modes + every operation without parameters
or body, the health probes and /version, positive only: nothing in them can be made invalid)
x MAX_EXAMPLES (67 runs today, about 50 s), plus the requests schemathesis sends to check
that authentication is enforced.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from schemathesis import GenerationMode
from schemathesis.checks import CheckContext, CheckFunction, not_a_server_error
from schemathesis.core.result import Ok
from schemathesis.core.transport import Response
from schemathesis.generation.case import Case
from schemathesis.python.asgi import shutdown_lifespans
from schemathesis.schemas import APIOperation, BaseSchema
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.keys import Scope, create_key
from app.main import create_app
from app.settings import Settings
from tests.support.server_process import ROOT

MAX_EXAMPLES = 60
OPENAPI_FILE = ROOT / "openapi" / "openapi.json"
# A usage stream's body (POST /v1/events) is NDJSON, documented as bytes: sent as given.
schemathesis.serializer.alias("application/x-ndjson", "application/octet-stream")
SCHEMA = schemathesis.openapi.from_path(OPENAPI_FILE)
Operation = APIOperation[Any, Any, Any, Any]


def _operations(schema: BaseSchema) -> list[Operation]:
    operations: list[Operation] = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result  # the committed file must load cleanly
        operations.append(result.ok())
    return operations


OPERATIONS = _operations(SCHEMA)
NO_ROUTE_TYPE = "tag:gpu-credits,2026:problem:not-found"
# What the request limits answer before any key is looked at (app/api/limits.py).
BEFORE_AUTH_STATUSES = (413, 414, 431)
UNKNOWN_KEY = "gck_000000000000_" + "A" * 43

CONFORMANCE: list[CheckFunction] = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


class Auth(enum.Enum):
    OFF = "no-keys"
    VALID_KEY = "valid-key"
    UNKNOWN_KEY = "unknown-key"


@dataclass(frozen=True)
class Target:
    schema: BaseSchema  # the committed file, bound to one app instance
    headers: dict[str, str]
    checks: list[CheckFunction]

    def operation(self, like: Operation) -> Operation:
        return self.schema[like.path][like.method.upper()]


def _bound_schema(data_dir: Path, keys_file: Path) -> BaseSchema:
    app = create_app(Settings(storage="memory", data_dir=data_dir, api_keys_file=keys_file))
    schema = schemathesis.openapi.from_path(OPENAPI_FILE)
    schema.app = app  # requests (and schemathesis' own probes) go to the app in process
    return schema


# Refused before routing for its size (URL, headers, body), with the documented problem: a
# rejection as much as a 400 or 422, which schemathesis's default list of statuses omits (a
# negative case can make a URL of more than 8 KiB).
_REFUSED_FOR_SIZE: Final = frozenset({413, 414, 431})


def _negative_data_rejected(ctx: CheckContext, response: Response, case: Case[Any]) -> bool | None:
    if response.status_code in _REFUSED_FOR_SIZE:
        return True
    return negative_data_rejection(ctx, response, case)


@pytest.fixture(scope="module")
def targets(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[Auth, Target]]:
    root = tmp_path_factory.mktemp("fuzz")
    keys_file = root / "keyed" / "api-keys.json"
    key, _ = create_key(keys_file, "fuzzer", tuple(Scope), "")
    keyed_checks = [*CONFORMANCE, _negative_data_rejected, ignored_auth]
    yield {
        Auth.OFF: Target(
            _bound_schema(root / "open", root / "open" / "api-keys.json"), {}, CONFORMANCE
        ),
        Auth.VALID_KEY: Target(
            _bound_schema(root / "keyed", keys_file),
            {"Authorization": f"Bearer {key}"},
            keyed_checks,
        ),
        Auth.UNKNOWN_KEY: Target(
            _bound_schema(root / "keyed2", keys_file),
            {"Authorization": f"Bearer {UNKNOWN_KEY}"},
            keyed_checks,
        ),
    }
    shutdown_lifespans()  # the apps' lifespans were started by schemathesis' ASGI client


def _runs() -> Iterator[Any]:
    for auth in Auth:
        for operation in OPERATIONS:
            modes = [GenerationMode.POSITIVE]
            raw = operation.definition.raw
            if raw.get("parameters") or raw.get("requestBody"):  # else nothing can be invalid
                modes.append(GenerationMode.NEGATIVE)
            for mode in modes:
                name = operation.definition.raw.get("operationId") or operation.label
                label = f"{auth.value}-{name}-{mode.value}"
                yield pytest.param(auth, operation, mode, id=label)


def _problem_type(body: bytes) -> str | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    value = doc.get("type") if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


@pytest.mark.parametrize(("auth", "operation", "mode"), list(_runs()))
def test_responses_conform_to_the_committed_openapi_file(
    targets: dict[Auth, Target], auth: Auth, operation: Operation, mode: GenerationMode
) -> None:
    target = targets[auth]
    bound = target.operation(operation)
    statuses: list[int] = []

    @hypothesis.settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        phases=[Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis.given(case=bound.as_strategy(generation_mode=mode))
    def fuzz(case: schemathesis.Case[Operation]) -> None:
        headers = dict(target.headers)
        if target.schema.is_security_param_negated(case):
            # Sent as generated, without the key or with the mangled one: adding the set-up's
            # key back would undo the negation, and the checks would judge a request that was
            # not sent (its other negations may vanish on the wire, such as an undeclared
            # query parameter whose value is an empty list; listAccounts, which needs no
            # parameter, then rightly answers 200).
            headers = {}
        response = case.call(headers=headers)
        statuses.append(response.status_code)
        case.validate_response(
            response,
            checks=target.checks,
            headers=headers,
            transport_kwargs={"headers": headers},
        )
        is_v1 = operation.path.startswith("/v1/")
        if auth is Auth.UNKNOWN_KEY and is_v1:
            # nothing gets past an unknown key, except a path that matches no route at all;
            # the request limits come before authentication (an over-long URL or head: 414,
            # 431; a body past the cap: 413), so a case that breaks one gets that instead
            no_route = _problem_type(response.content) == NO_ROUTE_TYPE
            refused_first = response.status_code in (401, *BEFORE_AUTH_STATUSES)
            assert refused_first or no_route, (response.status_code, response.text)
        if auth is Auth.VALID_KEY and not target.schema.is_security_param_negated(case):
            # the key holds every scope for every account; only a negative case that drops
            # or mangles the Authorization header may be refused
            assert response.status_code not in (401, 403), response.text

    fuzz()
    assert statuses, "nothing was generated"
    assert all(s < 500 for s in statuses)
    if mode is GenerationMode.POSITIVE and auth is not Auth.UNKNOWN_KEY:
        # the budget reached the service's logic, not only its validation
        assert any(s not in (400, 422) for s in statuses), sorted(set(statuses))


def _integer_schemas(schema: Any) -> Iterator[dict[str, Any]]:
    if isinstance(schema, dict):
        if schema.get("type") == "integer":
            yield schema
        for key in ("anyOf", "oneOf", "allOf"):
            for alternative in schema.get(key, []):
                yield from _integer_schemas({**schema, **alternative, key: []})


def test_parameter_bounds_are_json_schema_keywords() -> None:
    doc = json.loads(OPENAPI_FILE.read_text())
    offenders: list[str] = []
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []):
                for schema in _integer_schemas(parameter["schema"]):
                    where = f"{method.upper()} {path} {parameter['name']}"
                    if {"ge", "le", "gt", "lt"} & set(schema):
                        offenders.append(f"{where}: non-standard bound keywords")
                    elif "minimum" not in schema:
                        offenders.append(f"{where}: no minimum")
    assert not offenders, offenders
