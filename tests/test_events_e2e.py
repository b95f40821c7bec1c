"""Usage streams against a real ``gpu-credits serve`` process (SQLite): a large body streamed
and its results read as they come, connections dropped mid-stream (after some results, and
in the middle of the upload) and the server SIGKILLed mid-stream, each followed by the resume
protocol of the README. Whatever happened, the account ends exactly as if each line had been
applied once: nothing lost, nothing doubled.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.support.server_process import ServerProcess

NDJSON = "application/x-ndjson"
ACCOUNTS = 4
GRANTED = 10**12
LINES = 20_000
PART_BYTES = 64 * 1024


def _lines(prefix: str) -> list[bytes]:
    """A grant per account, then consumptions spread over the accounts (amounts 1 to 7)."""
    lines = [
        json.dumps(
            {
                "id": "grant",
                "op": "grant",
                "account_id": f"{prefix}-{k}",
                "amount": GRANTED,
                "timestamp": 0,
                "expiry": 2**53 - 1,
            }
        ).encode()
        for k in range(ACCOUNTS)
    ]
    for n in range(LINES - ACCOUNTS):
        line = {
            "id": f"use-{n}",
            "op": "consume",
            "account_id": f"{prefix}-{n % ACCOUNTS}",
            "amount": n % 7 + 1,
            "timestamp": n + 1,
        }
        lines.append(json.dumps(line).encode())
    return lines


def _consumed(prefix: str) -> dict[str, int]:
    totals = {f"{prefix}-{k}": 0 for k in range(ACCOUNTS)}
    for n in range(LINES - ACCOUNTS):
        totals[f"{prefix}-{n % ACCOUNTS}"] += n % 7 + 1
    return totals


def _parts(lines: list[bytes], fail_after_bytes: int | None = None) -> Iterator[bytes]:
    """The body in parts of about PART_BYTES; past ``fail_after_bytes`` the upload breaks
    off (the client fails mid-body)."""
    body = b"".join(line + b"\n" for line in lines)
    for start in range(0, len(body), PART_BYTES):
        if fail_after_bytes is not None and start >= fail_after_bytes:
            raise ConnectionAbortedError("the client fails in the middle of its upload")
        yield body[start : start + PART_BYTES]


def _stream(
    base_url: str,
    parts: Iterator[bytes],
    stop_after: int | None = None,
    at_stop: Any = None,
) -> list[dict[str, Any]]:
    """POST the parts and read result lines as they come; after ``stop_after`` of them call
    ``at_stop`` (or, without one, drop the connection). What was read before any failure."""
    results: list[dict[str, Any]] = []
    try:
        with (
            httpx.Client(base_url=base_url, timeout=60.0) as client,
            client.stream(
                "POST", "/v1/events", content=parts, headers={"content-type": NDJSON}
            ) as response,
        ):
            assert response.status_code == 200, response.read()
            for text in response.iter_lines():
                results.append(json.loads(text))
                if stop_after is not None and len(results) == stop_after:
                    if at_stop is None:
                        break  # leaving the block closes the connection mid-stream
                    at_stop()
    except (httpx.TransportError, ConnectionAbortedError):
        pass  # the connection or the server went away: resume from what was answered
    return results


def _resume(base_url: str, lines: list[bytes], answered: list[dict[str, Any]]) -> list[Any]:
    """The README's protocol: send again from the first line without a result (lines are
    numbered from 1); every result of the whole stream, by line."""
    by_line = {r["line"]: r for r in answered}
    assert sorted(by_line) == list(range(1, len(by_line) + 1)), "results arrive in line order"
    rest = lines[len(by_line) :]
    more = _stream(base_url, _parts(rest)) if rest else []
    assert len(more) == len(rest), "the resumed stream is answered whole"
    offset = len(by_line)
    for r in more:
        r["line"] += offset
        by_line[r["line"]] = r
    return [by_line[n] for n in range(1, len(lines) + 1)]


def _assert_applied_once(base_url: str, prefix: str, results: list[Any]) -> None:
    assert all(r["status"] in (200, 201) for r in results), [
        r for r in results if r["status"] >= 300
    ][:3]
    with httpx.Client(base_url=base_url, timeout=60.0) as client:
        for account_id, consumed in _consumed(prefix).items():
            balance = client.get(f"/v1/accounts/{account_id}/balance").json()
            assert balance["available"] == GRANTED - consumed, account_id
            entries: list[Any] = []
            after = 0
            while True:
                page = client.get(
                    f"/v1/accounts/{account_id}/ledger", params={"after": after, "limit": 1000}
                ).json()
                entries += page["entries"]
                if page["next_after"] is None:
                    break
                after = page["next_after"]
            lines_of_account = 1 + (LINES - ACCOUNTS) // ACCOUNTS
            assert [e["sequence"] for e in entries] == list(range(1, lines_of_account + 1))
    # Each line's effect is one entry, whether its answer was the first or a duplicate.
    effects = {(r["body"]["account_id"], r["body"]["sequence"]) for r in results}
    assert len(effects) == LINES


def test_a_stream_dropped_after_some_results_resumes_exactly(server: ServerProcess) -> None:
    lines = _lines("drop")
    answered = _stream(server.base_url, _parts(lines), stop_after=5_000)
    assert len(answered) == 5_000
    assert [r["line"] for r in answered] == list(range(1, 5_001))
    # The server had the whole body when the client went away and goes on applying it while
    # the resumed stream arrives: each resumed line is applied by one of the two streams and
    # answered duplicate by the other, whichever comes first.
    results = _resume(server.base_url, lines, answered)
    _assert_applied_once(server.base_url, "drop", results)
    # A replay of the whole stream changes nothing either.
    again = _stream(server.base_url, _parts(lines))
    assert len(again) == LINES
    assert all(r.get("duplicate") for r in again)
    _assert_applied_once(server.base_url, "drop", results)


def test_an_upload_broken_off_midway_resumes_exactly(server: ServerProcess) -> None:
    lines = _lines("broken")
    size = sum(len(line) + 1 for line in lines)
    answered = _stream(server.base_url, _parts(lines, fail_after_bytes=size // 2))
    assert answered == []  # this client reads only once its upload is done
    # Nothing was acknowledged: send everything again. The lines the server had received
    # before the connection broke are applied by the first stream (those it had applied when
    # the second one reaches them answer duplicate); no line of the half never sent can be.
    results = _resume(server.base_url, lines, [])
    duplicates = sum(1 for r in results if r.get("duplicate"))
    sent_bytes = -(-(size // 2) // PART_BYTES) * PART_BYTES  # whole parts were sent
    sent_lines = b"".join(line + b"\n" for line in lines)[:sent_bytes].count(b"\n") + 1
    assert 0 < duplicates <= sent_lines, duplicates
    _assert_applied_once(server.base_url, "broken", results)


def test_a_server_killed_mid_stream_resumes_exactly(tmp_path: Path) -> None:
    first = ServerProcess(tmp_path / "data")
    first.start()
    try:
        lines = _lines("crash")
        answered = _stream(first.base_url, _parts(lines), stop_after=1, at_stop=first.kill)
        assert 1 <= len(answered) < LINES
    finally:
        first.kill()
    second = ServerProcess(tmp_path / "data", port=first.port)
    second.start()
    try:
        results = _resume(second.base_url, lines, answered)
        _assert_applied_once(second.base_url, "crash", results)
    finally:
        second.stop()


def test_a_stream_stopped_early_answers_a_client_that_sends_everything_first(
    tmp_path: Path,
) -> None:
    """httpx sends the whole body before it reads (README, Usage streams: such a client
    does not stall the stream). A stream that stops at its line limit with more body to
    come, and more results than the connection's buffers hold, must still end with its
    results and the stop line, not hold the client until its write timeout."""
    limit = 20_000
    server = ServerProcess(tmp_path / "data", env={"GPU_CREDITS_MAX_EVENT_LINES": str(limit)})
    server.start()
    try:
        lines = [
            json.dumps(
                {
                    "id": f"i{n}",
                    "op": "consume",
                    "account_id": f"e2e-stop-{n % 50}",
                    "amount": 1,
                    "timestamp": 0,
                }
            ).encode()
            + b"\n"
            for n in range(300_000)
        ]
        response = httpx.post(
            f"{server.base_url}/v1/events",
            content=b"".join(lines),
            headers={"content-type": "application/x-ndjson"},
            timeout=httpx.Timeout(20.0),
        )
        results = [json.loads(line) for line in response.text.splitlines()]
        assert len(results) == limit + 1
        assert results[-1]["status"] == 413
    finally:
        server.stop()


def test_a_stream_is_not_cut_off_while_the_server_is_busy_applying_it(tmp_path: Path) -> None:
    """The idle timeout (408 ``stream-timeout``) is the client's pause, not the server's.
    Late lines, each replayed over the writes after it, make a chunk take longer to apply
    than the timeout, and the event loop is busy meanwhile: its timer then ran late, before
    the loop polled the socket where the client's next part was waiting, and the stream was
    stopped though the client had sent its whole body at once (line 6969 of 10,000 here)."""
    timeout_s = 0.1
    env = {"GPU_CREDITS_LATENESS_WINDOW": "1000000", "GPU_CREDITS_BODY_TIMEOUT_S": str(timeout_s)}
    server = ServerProcess(tmp_path / "data", env=env)
    server.start()
    try:
        lines = []
        for n in range(10_000):
            # Every other line lands behind the 50 writes before it (a late write).
            if n % 2 == 0:
                line = {"op": "grant", "timestamp": n + 100, "expiry": n + 5_100}
            else:
                line = {"op": "consume", "timestamp": n}
            lines.append({"id": f"busy-{n}", "account_id": "e2e-busy", "amount": 10, **line})
        started = time.monotonic()
        response = httpx.post(
            f"{server.base_url}/v1/events",
            content=b"".join(json.dumps(line).encode() + b"\n" for line in lines),
            headers={"content-type": NDJSON},
            timeout=httpx.Timeout(60.0),
        )
        took_s = time.monotonic() - started
        results = [json.loads(line) for line in response.text.splitlines()]
        stops = [r for r in results if r["status"] >= 300]
        assert not stops, f"{stops[:1]} after {took_s:.1f} s"
        assert len(results) == len(lines)
    finally:
        server.stop()
