"""OpenAPI examples of the request bodies: SPEC's examples as requests a client can send
(the generated client's tests run them). Kept apart from the endpoints, which only bind
parameters and call the service."""

from __future__ import annotations

from typing import Any

GRANT_EXAMPLES: dict[str, Any] = {
    "example1-first": {
        "summary": "SPEC Example 1: first grant",
        "value": {"amount": 100, "timestamp": 0, "expiry": 10},
    },
    "example1-second": {
        "summary": "SPEC Example 1: a shorter-lived grant",
        "value": {"amount": 50, "timestamp": 2, "expiry": 5},
    },
    "example1-settles-debt": {
        "summary": "SPEC Example 1: a grant that settles 10 of debt",
        "value": {"amount": 30, "timestamp": 12, "expiry": 20},
    },
    "example2": {
        "summary": "SPEC Example 2: a grant that expires at t=5",
        "value": {"amount": 50, "timestamp": 0, "expiry": 5},
    },
    "example3-h100-only": {
        "summary": "SPEC Example 3: 100 credits valid on h100 only",
        "value": {"amount": 100, "timestamp": 0, "expiry": 50, "resources": ["h100"]},
    },
    "example3-a100-only": {
        "summary": "SPEC Example 3: 25 credits valid on a100 only (cannot settle h100 debt)",
        "value": {"amount": 25, "timestamp": 4, "expiry": 60, "resources": ["a100"]},
    },
    "labelled": {
        "summary": "A grant with a name and metadata (shown wherever the grant is)",
        "value": {
            "amount": 1000,
            "timestamp": 0,
            "expiry": 2_592_000,
            "name": "Q3 research allocation",
            "metadata": {"invoice": "INV-2026-0042", "team": "research"},
        },
    },
}
VOID_EXAMPLES: dict[str, Any] = {
    "void": {
        "summary": "Void a grant issued by mistake: what is left of it is removed at t=5",
        "value": {"timestamp": 5},
    },
}
SETTINGS_EXAMPLES: dict[str, Any] = {
    "example4-window": {
        "summary": "SPEC Example 4: accept writes up to 10 timestamp units behind the clock",
        "value": {"lateness_window": 10},
    },
    "service-setting": {
        "summary": "Back to the service's setting (GPU_CREDITS_LATENESS_WINDOW)",
        "value": {"lateness_window": None},
    },
}
CONSUME_EXAMPLES: dict[str, Any] = {
    "example1-draws-from-two-grants": {
        "summary": "SPEC Example 1: 50 from the expiry-5 grant, 20 from expiry-10",
        "value": {"amount": 70, "timestamp": 3},
    },
    "example1-into-debt": {
        "summary": "SPEC Example 1: 80 consumed, 10 become debt",
        "value": {"amount": 90, "timestamp": 8},
    },
    "example2-after-expiry": {
        "summary": "SPEC Example 2: all credits expired, 20 become debt",
        "value": {"amount": 20, "timestamp": 6},
    },
    "example3-on-h100": {
        "summary": "SPEC Example 3: 120 on h100, 10 of it becomes h100 debt",
        "value": {"amount": 120, "timestamp": 2, "resource": "h100"},
    },
}

_EXAMPLE_1_OPERATIONS: list[dict[str, Any]] = [
    {"op": "grant", "account_id": "a1", "amount": 100, "timestamp": 0, "expiry": 10},
    {"op": "grant", "account_id": "a1", "amount": 50, "timestamp": 2, "expiry": 5},
    {"op": "consume", "account_id": "a1", "amount": 70, "timestamp": 3},
    {"op": "balance", "account_id": "a1", "timestamp": 4},
    {"op": "consume", "account_id": "a1", "amount": 90, "timestamp": 8},
    {"op": "balance", "account_id": "a1", "timestamp": 8},
    {"op": "grant", "account_id": "a1", "amount": 30, "timestamp": 12, "expiry": 20},
    {"op": "balance", "account_id": "a1", "timestamp": 12},
]
_A = "a3"
_EXAMPLE_3_OPERATIONS: list[dict[str, Any]] = [
    {"op": "grant", "account_id": _A, "amount": 100, "timestamp": 0, "expiry": 50,
     "resources": ["h100"]},
    {"op": "grant", "account_id": _A, "amount": 40, "timestamp": 0, "expiry": 30},
    {"op": "consume", "account_id": _A, "amount": 30, "timestamp": 1, "resource": "a100"},
    {"op": "consume", "account_id": _A, "amount": 120, "timestamp": 2, "resource": "h100"},
    {"op": "balance", "account_id": _A, "timestamp": 3},
    {"op": "balance", "account_id": _A, "timestamp": 3, "resource": "a100"},
    {"op": "grant", "account_id": _A, "amount": 25, "timestamp": 4, "expiry": 60,
     "resources": ["a100"]},
    {"op": "balance", "account_id": _A, "timestamp": 5},
    {"op": "balance", "account_id": _A, "timestamp": 5, "resource": "h100"},
    {"op": "grant", "account_id": _A, "amount": 15, "timestamp": 6, "expiry": 70},
    {"op": "balance", "account_id": _A, "timestamp": 6, "resource": "h100"},
    {"op": "balance", "account_id": _A, "timestamp": 6, "resource": "a100"},
    {"op": "balance", "account_id": _A, "timestamp": 6},
]  # fmt: skip
BATCH_EXAMPLES: dict[str, Any] = {
    "example1": {
        "summary": "SPEC Example 1 in one request",
        "value": {"atomic": False, "operations": _EXAMPLE_1_OPERATIONS},
    },
    "example3": {
        "summary": "SPEC Example 3 (credits per GPU class) in one request",
        "value": {"atomic": False, "operations": _EXAMPLE_3_OPERATIONS},
    },
    "atomic": {
        "summary": "All or nothing: usage of two jobs reported together",
        "value": {
            "atomic": True,
            "operations": [
                {"op": "consume", "account_id": "team-a:job-1", "amount": 5, "timestamp": 100},
                {"op": "consume", "account_id": "team-a:job-2", "amount": 7, "timestamp": 100},
            ],
        },
    },
}


# A usage stream (POST /v1/events): its body and answer as NDJSON text.
EVENTS_EXAMPLE = (
    '{"id": "grant-2026-06", "op": "grant", "account_id": "team-a:acme", "amount": 1000, '
    '"timestamp": 0, "expiry": 720}\n'
    '{"id": "job-17/0", "op": "consume", "account_id": "team-a:acme", "amount": 40, '
    '"timestamp": 60, "resource": null}\n'
    '{"id": "job-17/0", "op": "consume", "account_id": "team-a:acme", "amount": 40, '
    '"timestamp": 60}\n'
)
EVENTS_ANSWER_EXAMPLE = (
    '{"line":1,"id":"grant-2026-06","status":201,"body":{"account_id":"team-a:acme",'
    '"grant_id":1,"sequence":1,"timestamp":0,"amount":1000,"expiry":720,"balance":1000,'
    '"available":1000,"debt":0,"settled_debt":0,"retained":1000,"name":null,"metadata":null,'
    '"resources":null,"watermark":0,"restated":0}}\n'
    '{"line":2,"id":"job-17/0","status":200,"body":{"account_id":"team-a:acme","sequence":2,'
    '"timestamp":60,"amount":40,"balance":960,"available":960,"debt":0,"consumed":40,'
    '"debt_added":0,"allocation":[{"grant_id":1,"expiry":720,"amount":40,"resources":null}],'
    '"resource":null,"watermark":60,"restated":0}}\n'
    '{"line":3,"id":"job-17/0","status":200,"duplicate":true,'
    '"body":{"account_id":"team-a:acme","sequence":2}}\n'
)
