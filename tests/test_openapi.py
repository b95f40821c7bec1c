"""The published OpenAPI document (SPEC section 3): the committed ``openapi/openapi.json`` is
exactly what the service serves, operation ids are stable, and every error is documented as a
problem document, so a client generated from the file works unmodified."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.main import create_app
from app.settings import Settings
from tests.support.app_runner import running

REPO_ROOT = Path(__file__).resolve().parents[1]
COMMITTED = REPO_ROOT / "openapi" / "openapi.json"
PROBLEM_JSON = "application/problem+json"
PROBLEM_REF = "#/components/schemas/Problem"
HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}

OPERATION_IDS = {
    "grantCredits",
    "consumeCredits",
    "getBalance",
    "listGrants",
    "getGrant",
    "listLedgerEntries",
    "listAccounts",
    "getHealth",
    "getLiveness",
    "getReadiness",
    "getVersion",
    "applyBatch",
    "voidGrant",
    "putAccountSettings",
    "getAccountSettings",
    "getForecast",
    "streamEvents",
    "getMetrics",
}
# getBalance is not here: reads are safe (SPEC section 3), a read before the clock is as-of.
WITH_409 = {"grantCredits", "consumeCredits", "applyBatch", "voidGrant", "listLedgerEntries"}


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    """The document the running app serves at /openapi.json."""
    app = create_app(Settings(storage="memory", data_dir=tmp_path / "data"))
    async with running(app) as c:
        r = await c.get("/openapi.json")
        assert r.status_code == 200, r.text
        assert r.headers["content-type"].startswith("application/json")
        doc = r.json()
        assert isinstance(doc, dict)
        yield doc


@pytest.fixture
def committed() -> dict[str, Any]:
    doc = json.loads(COMMITTED.read_text(encoding="utf-8"))
    assert isinstance(doc, dict)
    return doc


def operations(doc: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(method, path, operation) for every operation in ``doc``."""
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            if method in HTTP_METHODS:
                yield method, path, operation


def by_id(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {op["operationId"]: op for _, _, op in operations(doc)}


def test_committed_document_is_what_the_app_serves(
    served: dict[str, Any], committed: dict[str, Any]
) -> None:
    assert committed == served, (
        "openapi/openapi.json is out of date with the app: run "
        "`python scripts/export_openapi.py` and commit the result"
    )


def test_committed_document_is_canonically_formatted(committed: dict[str, Any]) -> None:
    rendered = json.dumps(committed, indent=2, ensure_ascii=False) + "\n"
    assert COMMITTED.read_text(encoding="utf-8") == rendered, (
        "openapi/openapi.json is not in the exporter's format: run "
        "`python scripts/export_openapi.py`"
    )


def test_document_basics(served: dict[str, Any]) -> None:
    assert served["openapi"].startswith("3.")
    assert served["info"]["title"] == "gpu-credits"
    assert served["info"]["version"]


def test_operation_ids_are_exactly_the_stable_names(served: dict[str, Any]) -> None:
    ids = [op.get("operationId") for _, _, op in operations(served)]
    assert len(ids) == len(set(ids)), f"duplicate operation ids: {ids}"
    assert set(ids) == OPERATION_IDS


def test_operations_are_at_their_paths(served: dict[str, Any]) -> None:
    where = {op["operationId"]: (method, path) for method, path, op in operations(served)}
    assert where == {
        "grantCredits": ("post", "/v1/accounts/{account_id}/grants"),
        "consumeCredits": ("post", "/v1/accounts/{account_id}/consumptions"),
        "getBalance": ("get", "/v1/accounts/{account_id}/balance"),
        "listGrants": ("get", "/v1/accounts/{account_id}/grants"),
        "getGrant": ("get", "/v1/accounts/{account_id}/grants/{grant_id}"),
        "listLedgerEntries": ("get", "/v1/accounts/{account_id}/ledger"),
        "listAccounts": ("get", "/v1/accounts"),
        "getHealth": ("get", "/healthz"),
        "getLiveness": ("get", "/livez"),
        "getReadiness": ("get", "/readyz"),
        "getVersion": ("get", "/version"),
        "applyBatch": ("post", "/v1/batch"),
        "voidGrant": ("post", "/v1/accounts/{account_id}/grants/{grant_id}/void"),
        "putAccountSettings": ("put", "/v1/accounts/{account_id}/settings"),
        "getAccountSettings": ("get", "/v1/accounts/{account_id}/settings"),
        "getForecast": ("get", "/v1/accounts/{account_id}/forecast"),
        "streamEvents": ("post", "/v1/events"),
        "getMetrics": ("get", "/metrics"),
    }


def test_every_error_response_is_a_problem_document(served: dict[str, Any]) -> None:
    assert "Problem" in served["components"]["schemas"]
    for method, path, op in operations(served):
        errors = {s: r for s, r in op["responses"].items() if s != "default" and int(s) >= 400}
        assert errors, f"{method} {path} documents no error response"
        for status, response in errors.items():
            where = f"{method} {path} {status}"
            assert response.get("description"), where
            content = response.get("content", {})
            assert set(content) == {PROBLEM_JSON}, f"{where}: {sorted(content)}"
            assert content[PROBLEM_JSON]["schema"] == {"$ref": PROBLEM_REF}, where


def test_problem_schema_has_the_rfc_9457_members(served: dict[str, Any]) -> None:
    schema = served["components"]["schemas"]["Problem"]
    assert {"type", "title", "status", "detail"} <= set(schema["required"])
    for member in ("type", "title", "status", "detail", "errors", "account_timestamp"):
        assert member in schema["properties"], member


def test_success_responses_are_json_with_a_schema(served: dict[str, Any]) -> None:
    expected_status = {"grantCredits": "201"}
    for _, _, op in operations(served):
        success = {s for s in op["responses"] if s.startswith("2")}
        assert success == {expected_status.get(op["operationId"], "200")}, op["operationId"]
        (status,) = success
        content = op["responses"][status]["content"]
        if op["operationId"] == "streamEvents":  # NDJSON: bytes, each line a schema
            assert content["application/x-ndjson"]["x-ndjson-line"] == {
                "$ref": "#/components/schemas/EventResultLine"
            }
            continue
        if op["operationId"] == "getMetrics":  # Prometheus' text formats
            assert set(content) == {
                "text/plain; version=0.0.4; charset=utf-8",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            }
            continue
        assert "$ref" in content["application/json"]["schema"], op["operationId"]


def test_request_bodies_have_examples(served: dict[str, Any]) -> None:
    with_body = {op["operationId"]: op for _, _, op in operations(served) if "requestBody" in op}
    assert set(with_body) == {
        "grantCredits",
        "consumeCredits",
        "applyBatch",
        "voidGrant",
        "putAccountSettings",
        "streamEvents",
    }
    for operation_id, op in with_body.items():
        assert op["requestBody"]["required"] is True, operation_id
        if operation_id == "streamEvents":
            media = op["requestBody"]["content"]["application/x-ndjson"]
            assert media["x-ndjson-line"] == {"$ref": "#/components/schemas/EventLine"}
            lines = media["example"].splitlines()
            assert lines
            assert all(isinstance(json.loads(line), dict) for line in lines)
            continue
        media = op["requestBody"]["content"]["application/json"]
        examples = media.get("examples") or {}
        assert examples or "example" in media, f"{operation_id} has no request examples"
        for name, example in examples.items():
            assert isinstance(example.get("value"), dict), (operation_id, name)


def test_request_examples_are_valid_requests(served: dict[str, Any]) -> None:
    ops = by_id(served)
    labels = {"name", "metadata", "resources", "resource"}  # optional, not integers
    for operation_id, members in (
        ("grantCredits", {"amount", "timestamp", "expiry"}),
        ("consumeCredits", {"amount", "timestamp"}),
        ("voidGrant", {"timestamp"}),
    ):
        examples = ops[operation_id]["requestBody"]["content"]["application/json"]["examples"]
        for name, example in examples.items():
            value = example["value"]
            assert members <= set(value) <= members | labels, (operation_id, name)
            figures = [v for k, v in value.items() if k in members]
            assert all(type(v) is int and v >= 0 for v in figures), (operation_id, name)
            assert value.get("amount", 1) >= 1, (operation_id, name)
            if "expiry" in value:
                assert value["expiry"] > value["timestamp"], (operation_id, name)


def test_409_is_documented_on_the_timed_operations(served: dict[str, Any]) -> None:
    for operation_id, op in by_id(served).items():
        documented = "409" in op["responses"]
        assert documented == (operation_id in WITH_409), operation_id


def test_422_is_documented_wherever_there_is_input(served: dict[str, Any]) -> None:
    for operation_id, op in by_id(served).items():
        has_input = bool(op.get("parameters")) or "requestBody" in op
        if has_input:
            assert "422" in op["responses"], operation_id


def test_other_documented_errors(served: dict[str, Any]) -> None:
    for operation_id, op in by_id(served).items():
        statuses = set(op["responses"])
        if "requestBody" in op:
            assert "400" in statuses, f"{operation_id}: malformed JSON is 400"
        reads_account = operation_id in {
            "getBalance",
            "listGrants",
            "getGrant",
            "listLedgerEntries",
            "applyBatch",  # an atomic batch aborted by a read of an unknown account
            "voidGrant",
            "putAccountSettings",  # settings do not create accounts
            "getAccountSettings",
            "getForecast",
        }
        metrics_off = operation_id == "getMetrics"  # GPU_CREDITS_METRICS=false
        assert ("404" in statuses) == (reads_account or metrics_off), operation_id
        assert "503" in statuses, operation_id


def test_parameters_are_bounded(served: dict[str, Any]) -> None:
    ops = by_id(served)
    for operation_id, op in ops.items():
        for param in op.get("parameters", []):
            if param["name"] == "account_id":
                assert param["in"] == "path"
                assert param["required"] is True
                schema = param["schema"]
                assert schema["maxLength"] == 128, operation_id
                assert schema["minLength"] == 1, operation_id
                assert schema["pattern"] == "^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$", operation_id
    (timestamp,) = [p for p in ops["getBalance"]["parameters"] if p["name"] == "timestamp"]
    assert timestamp["in"] == "query"
    assert timestamp["required"] is False
    listing = {p["name"]: p for p in ops["listAccounts"]["parameters"]}
    assert set(listing) == {"prefix", "after", "limit"}
    for name in ("prefix", "after"):
        assert listing[name]["in"] == "query"
        assert listing[name]["required"] is False
        schema = listing[name]["schema"]
        assert schema["maxLength"] == 128, name
        assert schema["pattern"] == "^([A-Za-z0-9][A-Za-z0-9._:-]{0,127})?$", name
    assert listing["limit"]["schema"]["minimum"] == 1
    assert listing["limit"]["schema"]["maximum"] == 1000
    forecast = {p["name"]: p for p in ops["getForecast"]["parameters"]}
    assert set(forecast) == {"account_id", "burn_rate", "resource"}
    assert forecast["burn_rate"]["required"] is True
    assert forecast["burn_rate"]["schema"]["minimum"] == 1
    assert forecast["burn_rate"]["schema"]["maximum"] == 2**53 - 1
    (dry_run,) = [p for p in ops["consumeCredits"]["parameters"] if p["name"] == "dry_run"]
    assert dry_run["in"] == "query"
    assert dry_run["required"] is False
    assert dry_run["schema"]["type"] == "boolean"


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def test_every_reference_resolves(served: dict[str, Any]) -> None:
    components = served["components"]
    refs = set(_refs(served))
    assert refs
    for ref in refs:
        # Schemas, and the X-Request-ID header every response carries.
        assert ref.startswith(("#/components/schemas/", "#/components/headers/")), ref
        kind, name = ref.split("/")[2:]
        assert name in components[kind], f"dangling reference {ref}"
