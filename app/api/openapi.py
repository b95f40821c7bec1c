"""The published OpenAPI document, post-processed so that it tells the truth about errors.

FastAPI documents error models under ``application/json``; we answer them as
``application/problem+json``. It also adds its own 422 schema, which we never send. Rewriting
the generated document here keeps routes free of OpenAPI plumbing, and the committed
``openapi/openapi.json`` is exactly this function's output (a test checks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import TypeAdapter
from starlette.routing import BaseRoute

from app.api.auth import SECURITY_SCHEME, SECURITY_SCHEME_NAME
from app.api.problems import PROBLEM_MEDIA_TYPE
from app.api.requests import MAX_REQUEST_ID_CHARS
from app.api.routing import is_public
from app.api.schemas import EventLine, EventResultLine

_UNUSED_SCHEMAS = ("HTTPValidationError", "ValidationError")
# What the server layers in front of every route can answer, whatever the route: documented
# on every operation, so a generated client parses them and a contract test accepts them.
_EVERYWHERE = {
    "400": "Malformed HTTP or JSON.",
    "408": "Request headers or body not received in time.",
    "413": "Request body larger than the limit.",
    "414": "URL longer than the limit.",
    "431": "Request headers larger than the limit.",
    "503": "Overloaded, storage failed, or the database is unreachable; retry later.",
}


REQUEST_ID_NAME = "RequestId"
_REQUEST_ID_SCHEMA = {
    "type": "string",
    "minLength": 1,
    "maxLength": MAX_REQUEST_ID_CHARS,
    "pattern": f"^[\\x21-\\x7e]{{1,{MAX_REQUEST_ID_CHARS}}}$",
}
# Documented on every response. A request may send X-Request-ID too, but it is not declared
# as a parameter of every operation: a value that does not fit is replaced, never refused,
# so it is no input a client must get right (the header's description says so).
REQUEST_ID_HEADER = {
    "description": "The request's id: the `X-Request-ID` the request was sent with if it was "
    "one value of 1 to 128 visible ASCII characters (`!` to `~`), otherwise one the service "
    "made (32 hexadecimal digits). Also a problem document's `request_id` and the request's "
    "log line.",
    "schema": _REQUEST_ID_SCHEMA,
}


def build_openapi(app: FastAPI, api_routes: Sequence[BaseRoute]) -> dict[str, Any]:
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
    )
    for path_item in doc.get("paths", {}).values():
        for operation in path_item.values():
            for status, response in operation.get("responses", {}).items():
                content = response.get("content")
                if int(status) >= 400 and content and "application/json" in content:
                    content[PROBLEM_MEDIA_TYPE] = content.pop("application/json")
    # Security: every operation but the public ones takes the bearer API key, so generated
    # clients (AuthenticatedClient) send it.
    components = doc.setdefault("components", {})
    components.setdefault("securitySchemes", {})[SECURITY_SCHEME_NAME] = SECURITY_SCHEME
    for route in api_routes:
        if isinstance(route, APIRoute) and not is_public(route):
            for method in route.methods or ():
                operation = doc["paths"][route.path_format][method.lower()]
                operation["security"] = [{SECURITY_SCHEME_NAME: []}]
    problem = {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    # X-Request-ID on every response (app.api.requests).
    components.setdefault("headers", {})[REQUEST_ID_NAME] = REQUEST_ID_HEADER
    request_id_header = {"$ref": f"#/components/headers/{REQUEST_ID_NAME}"}
    for path_item in doc.get("paths", {}).values():
        for operation in path_item.values():
            responses = operation.setdefault("responses", {})
            for status, description in _EVERYWHERE.items():
                responses.setdefault(status, {"description": description, "content": problem})
            for response in responses.values():
                response.setdefault("headers", {})["X-Request-ID"] = request_id_header
            operation["responses"] = dict(sorted(responses.items()))
    schemas = components.get("schemas", {})
    for name in _UNUSED_SCHEMAS:
        schemas.pop(name, None)
    # Schemas the routes name by hand: the lines of a usage stream (its body and answer are
    # NDJSON, which FastAPI does not describe).
    _add_schema(schemas, "EventLine", TypeAdapter(EventLine), "validation")
    _add_schema(schemas, "EventResultLine", TypeAdapter(EventResultLine), "serialization")
    components["schemas"] = dict(sorted(schemas.items()))
    app.openapi_schema = doc
    return doc


def _add_schema(
    schemas: dict[str, Any],
    name: str,
    adapter: TypeAdapter[Any],
    mode: Literal["validation", "serialization"],
) -> None:
    schema = adapter.json_schema(ref_template="#/components/schemas/{model}", mode=mode)
    # A model the routes use already is FastAPI's (the same model: only number formats
    # differ); the others are added as pydantic describes them.
    for def_name, definition in schema.pop("$defs", {}).items():
        schemas.setdefault(def_name, definition)
    schemas[name] = schema
