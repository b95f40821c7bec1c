"""Usage streams: ``POST /v1/events``, one operation per NDJSON line, answered line by line.

How a stream travels (see README, Usage streams):

- A reader task takes the body from the connection as it arrives, cuts it into lines, checks
  the limits (body bytes, line bytes, lines per request, time between two parts of the body)
  and validates each line with the batch operations' rules plus its ``id``. It keeps at
  most ``MAX_QUEUED_LINES`` parsed lines ahead of the writer, so memory stays bounded
  however fast the client sends.
- The writer takes whatever lines are queued (up to ``CHUNK_LINES``, and never the same
  account and id twice in one chunk), authorizes each for its own account and scope,
  applies them in order with one commit (``Ledger.events``), and only then writes their
  result lines. While a chunk commits the reader goes on, so chunks grow with the load (one
  commit for many lines) and shrink to a line when the client pauses (no waiting for more).
- Every line that is not blank gets exactly one result line, in order. A line that is
  invalid or refused gets its error and the stream goes on (a non-atomic batch); a limit,
  a timeout or a storage failure stops the stream with an error at that line, and what was
  answered before stays committed. A client resumes by sending again from the first line
  without a result (or everything: an id the account already applied answers
  ``duplicate`` and changes nothing).
- No account is locked while the stream waits for the client: a chunk is applied only once
  its lines are in memory.

Errors before the stream starts are problem documents like everywhere else (401, 403, 413
for a Content-Length over the cap, 415, 503); once it has started the status is 200 and
every error is a result line.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from pydantic import TypeAdapter, ValidationError
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.api import render
from app.api.auth import Forbidden, authorize
from app.api.problems import (
    FORBIDDEN,
    INTERNAL,
    MALFORMED_JSON,
    VALIDATION,
    Described,
    ProblemType,
    describe,
    validation_summary,
)
from app.api.schemas import (
    EVENT_ID_PATTERN,
    ConsumeEvent,
    EventLine,
    GrantEvent,
    VoidEvent,
)
from app.api.strict_json import loads_strict
from app.collector import COLLECTOR
from app.keys import KeyRecord
from app.keys import Scope as KeyScope
from app.service.commands import ConsumeOp, EventOp, GrantOp, VoidOp
from app.service.errors import OutcomeUnknown, ServiceUnavailable
from app.service.ledger import Ledger
from app.service.results import (
    ConsumptionReceipt,
    Duplicate,
    EventResult,
    GrantReceipt,
    VoidReceipt,
)

EVENTS_PATH: Final = "/v1/events"
NDJSON: Final = "application/x-ndjson"
# Lines applied with one commit at most (a batch's bound), and parsed lines held ahead of
# the writer: the reader waits while that many are queued.
CHUNK_LINES: Final = 2_000
MAX_QUEUED_LINES: Final = 2 * CHUNK_LINES
# Provisional writes the late lines of one chunk may replay, about (``ReplayCost``, in
# app/service/replay.py, says what counts: the writes replayed and the copy each late line
# starts from). A chunk is applied on the event loop without a pause, and a late line
# replays the writes from its replay base on, 3 to 10 us each (more with more live grants):
# 2,000 late lines over 7,000 provisional writes held the loop about 20 s. This bounds a
# chunk to about 0.06 to 0.2 s (up to 0.35 s measured on a noisy machine). The stream cuts
# by an estimate read without locks; the ledger counts again under them (``Ledger.events``)
# and the lines it leaves are sent again (``_put_back``).
CHUNK_REPLAYED_WRITES: Final = 20_000
# After an idle timeout, how long the socket is polled once more (see _next_message).
_POLL_S: Final = 0.01
# The error results of invalid lines, rendered when the line is read: one chunk holds at
# most about this many bytes of them, and the reader waits while twice as many are queued.
# An error result lists at most 100 issues (``problems.MAX_LISTED_ISSUES``), up to about
# 8 KiB for a short line (before that cap it could be ten times its line): bounding lines
# alone would still let a chunk of CHUNK_LINES such results, or many chunks queued, go far
# past what their lines took.
CHUNK_ERROR_BYTES: Final = 4 * 2**20
MAX_QUEUED_ERROR_BYTES: Final = 2 * CHUNK_ERROR_BYTES

log = logging.getLogger("app.events")

STREAM_TOO_LARGE = ProblemType("stream-too-large", "Stream body larger than the limit", 413)
LINE_TOO_LONG = ProblemType("line-too-long", "Stream line longer than the limit", 413)
TOO_MANY_LINES = ProblemType("too-many-lines", "More lines than one stream may carry", 413)
STREAM_TIMEOUT = ProblemType("stream-timeout", "Stream body paused too long", 408)
RESULTS_UNREAD = ProblemType("results-unread", "Too many stream results waiting to be read", 503)
# Result lines waiting for their clients, over every stream of this process. A client that
# sends its whole body before it reads (most HTTP/1.1 clients) leaves its results here, and
# an error result can be a hundred times the size of the line it answers: past this bound a
# stream stops before its next chunk (503, at that chunk's first line) rather than hold
# more. What one stream adds past it is at most one chunk's results.
MAX_UNSENT_RESULT_BYTES: Final = 256 * 2**20

_ID_RE: Final = re.compile(EVENT_ID_PATTERN)
_LINE: TypeAdapter[GrantEvent | ConsumeEvent | VoidEvent] = TypeAdapter(EventLine)
_SCOPE_OF: Final = {"grant": KeyScope.GRANT, "consume": KeyScope.CONSUME, "void": KeyScope.GRANT}
_WRITE_SCOPES: Final = frozenset({KeyScope.GRANT, KeyScope.CONSUME})


@dataclass(frozen=True, slots=True)
class StreamLimits:
    max_body_bytes: int
    max_line_bytes: int
    max_lines: int
    idle_timeout_s: float  # longest wait for the next part of the body


def may_stream(key: KeyRecord | None) -> bool:
    """Whether the key could apply any line at all (a key that could not is 403 up front)."""
    return key is None or any(scope in _WRITE_SCOPES for scope in key.scopes)


def is_ndjson_media_type(content_type: str | None) -> bool:
    if not content_type:
        return False
    media_type, _, params = content_type.partition(";")
    if media_type.strip().lower() != NDJSON:
        return False
    charset = params.strip().lower()
    return not charset or charset.replace(" ", "") in ("charset=utf-8", 'charset="utf-8"')


# -- what the reader hands the writer ----------------------------------------------------


@dataclass(slots=True)
class _Line:
    """A valid line."""

    number: int
    event_id: str
    fingerprint: str
    op: GrantOp | ConsumeOp | VoidOp
    scope: KeyScope


@dataclass(slots=True)
class _Bad:
    """A line answered with an error without reaching the ledger; the stream goes on. Its
    result line is rendered at once (the problem's objects are several times its bytes)."""

    number: int
    event_id: str | None
    answer: bytes

    @classmethod
    def of(cls, number: int, event_id: str | None, problem: dict[str, Any], status: int) -> _Bad:
        return cls(number, event_id, _error_line(number, event_id, status, problem))


@dataclass(slots=True)
class _Stop:
    """The stream ends here: with ``problem`` at line ``number``, or (None) because the body
    ended, or because the client is gone (``gone``) and nobody is left to answer."""

    number: int
    problem: dict[str, Any] | None = None
    status: int = 0
    gone: bool = False


_Item = _Line | _Bad | _Stop


def _problem(kind: ProblemType, detail: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind.uri, "title": kind.title, "status": kind.status, "detail": detail, **extra}


def _fingerprint(op: GrantOp | ConsumeOp | VoidOp) -> str:
    """What the line asks, without its id: a hash of its operation's members in a fixed
    order (absent and null alike; metadata by key). Stored with the id, so this form is
    part of the storage format: change it only with a new prefix."""
    if isinstance(op, GrantOp):
        metadata = None if op.metadata is None else sorted(op.metadata.items())
        asked: tuple[object, ...] = (
            "grant",
            op.account_id,
            op.amount,
            op.timestamp,
            op.expiry,
            op.resources,
            op.name,
            metadata,
        )
    elif isinstance(op, ConsumeOp):
        asked = ("consume", op.account_id, op.amount, op.timestamp, op.resource)
    else:
        asked = ("void", op.account_id, op.grant_id, op.timestamp)
    return "1:" + hashlib.blake2b(repr(asked).encode(), digest_size=15).hexdigest()


def _operation(line: GrantEvent | ConsumeEvent | VoidEvent) -> GrantOp | ConsumeOp | VoidOp:
    if isinstance(line, GrantEvent):
        return GrantOp(
            line.account_id,
            line.amount,
            line.timestamp,
            line.expiry,
            line.name,
            line.metadata,
            line.resources,
        )
    if isinstance(line, ConsumeEvent):
        return ConsumeOp(line.account_id, line.amount, line.timestamp, line.resource)
    return VoidOp(line.account_id, line.grant_id, line.timestamp)


def parse_line(number: int, raw: bytes) -> _Line | _Bad:
    """One line, judged as a batch operation with an ``id`` would be: malformed JSON 400,
    anything else invalid 422 naming the fields (``loc`` starts with ``line``)."""
    try:
        value = loads_strict(raw)
    except json.JSONDecodeError as exc:
        detail = f"line {number} could not be parsed as JSON: {exc.msg}"
        return _Bad.of(number, None, _problem(MALFORMED_JSON, detail), MALFORMED_JSON.status)
    claimed = value.get("id") if isinstance(value, dict) else None
    event_id = claimed if isinstance(claimed, str) and _ID_RE.fullmatch(claimed) else None
    try:
        line = _LINE.validate_python(value)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        fields, listed = validation_summary(errors, prefix=("line",), whole="line")
        detail = f"line {number} is invalid: {fields}"
        return _Bad.of(number, event_id, _problem(VALIDATION, detail, **listed), 422)
    op = _operation(line)
    return _Line(number, line.id, _fingerprint(op), op, _SCOPE_OF[line.op])


# -- the response ---------------------------------------------------------------------------


class EventStream(Response):
    """The answer to ``POST /v1/events``: an ASGI response that reads the request body
    itself while it writes the result lines (see the module docstring)."""

    media_type = NDJSON

    def __init__(self, ledger: Ledger, key: KeyRecord | None, limits: StreamLimits) -> None:
        # Not Response.__init__: it would declare a Content-Length of 0. The body is sent in
        # parts as chunks commit (chunked transfer coding).
        self.status_code = 200
        self.background = None
        self.body = b""
        self.raw_headers = [(b"content-type", NDJSON.encode()), (b"cache-control", b"no-store")]
        self._ledger = ledger
        self._key = key
        self._limits = limits
        self._queue: deque[_Item] = deque()
        self._queued_error_bytes = 0  # of the _Bad answers in the queue
        self._queued = asyncio.Event()  # for the writer: something to take
        self._room = asyncio.Event()  # for the reader: the queue has room
        self._stopped = False  # the writer has answered its last line: read no more lines

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
        reader = asyncio.create_task(self._read(receive))
        sender = _Sender(send)
        try:
            await self._write(sender)
            # The reader, if still reading (the writer stopped the stream), drops the rest
            # of the body from here on: see _drain.
            self._stopped = True
            self._room.set()
            await sender.close()  # every result line sent, then the end of the body
        finally:
            for task in (reader, sender.task):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            sender.abandon()  # whatever was not sent leaves the count of unsent bytes

    # -- the reader ------------------------------------------------------------------------

    def _put(self, item: _Item) -> None:
        self._queue.append(item)
        if isinstance(item, _Bad):
            self._queued_error_bytes += len(item.answer)
        self._queued.set()

    def _queue_full(self) -> bool:
        return (
            len(self._queue) >= MAX_QUEUED_LINES
            or self._queued_error_bytes >= MAX_QUEUED_ERROR_BYTES
        )

    async def _read(self, receive: Receive) -> None:
        try:
            await self._read_lines(receive)
        except Exception as exc:  # a bug: end the stream with an error rather than hang
            log.error("reading a usage stream failed", exc_info=exc)
            detail = "the server could not read the stream"
            self._put(_Stop(1, _problem(INTERNAL, detail), 500))

    async def _read_lines(self, receive: Receive) -> None:
        limits = self._limits
        tail = bytearray()  # the line being received
        number = 0  # lines ended so far (blank ones too)
        counted = 0  # lines that are not blank
        size = 0  # body bytes so far, up to the line being read
        received = 0  # body bytes received, the rest of the current part included
        while True:
            message = await self._next_message(receive)
            if message is None:
                detail = f"no part of the body arrived for {limits.idle_timeout_s:g} s"
                self._put(_Stop(number + 1, _problem(STREAM_TIMEOUT, detail), 408))
                return
            if message["type"] == "http.disconnect":
                self._put(_Stop(number + 1, gone=True))
                return
            data: bytes = message.get("body", b"")
            received += len(data)
            more = bool(message.get("more_body", False))
            pieces = data.split(b"\n")
            for index, piece in enumerate(pieces):
                last = index == len(pieces) - 1
                size += len(piece) + (0 if last else 1)
                if size > limits.max_body_bytes:
                    detail = (
                        f"the body passed {limits.max_body_bytes} bytes in line {number + 1}; "
                        "the lines before it were applied"
                    )
                    self._put(_Stop(number + 1, _problem(STREAM_TOO_LARGE, detail), 413))
                    return
                tail += piece
                if len(tail) > limits.max_line_bytes:
                    detail = (
                        f"line {number + 1} is longer than {limits.max_line_bytes} bytes; the "
                        "lines before it were applied"
                    )
                    self._put(_Stop(number + 1, _problem(LINE_TOO_LONG, detail), 413))
                    if more:
                        await self._drain(receive, received)
                    return
                if last and more:
                    break  # the line goes on in the next part of the body
                if last and not tail.strip():
                    break  # the body ended with a newline (or blank space)
                number += 1
                raw = bytes(tail)
                tail.clear()
                if not raw.strip():
                    continue  # blank: no result, not counted
                counted += 1
                if counted > limits.max_lines:
                    detail = (
                        f"line {number} is past the {limits.max_lines} lines one stream may "
                        "carry; send the rest in another request"
                    )
                    self._put(_Stop(number, _problem(TOO_MANY_LINES, detail), 413))
                    if more:
                        await self._drain(receive, received)
                    return
                while self._queue_full() and not self._stopped:  # a part may hold many lines
                    self._room.clear()
                    await self._room.wait()
                if self._stopped:  # no line after the writer's last is applied or answered
                    if more:
                        await self._drain(receive, received)
                    return
                self._put(parse_line(number, raw))
            if not more:
                self._put(_Stop(number + 1))
                return

    async def _drain(self, receive: Receive, received: int) -> None:
        """Read the rest of a stopped stream's body and drop it: a client that sends its
        whole body before it reads (as many HTTP clients do) can then finish sending and read
        the results and the stop line, where it would otherwise wait on a server that waits
        for it to read. Bounded as the body is: it stops once the body passes its limit
        (``received``: the bytes received so far), after an idle timeout, or when the client
        is gone."""
        limits = self._limits
        while received <= limits.max_body_bytes:
            message = await self._next_message(receive)
            if message is None or message["type"] == "http.disconnect":
                return
            received += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    async def _next_message(self, receive: Receive) -> Message | None:
        """The next part of the body; None when none came within the idle timeout.

        The timeout is the client's pause, not the server's: while a chunk is applied the
        loop is busy, and its timer can then run late, before the loop has polled the
        socket, with the client's next part waiting there. So after a timeout the socket is
        polled once more, briefly, and again for as long as that poll's timer runs late (the
        loop busy again): the client has paused only once a poll ran on time and found
        nothing. The receive is not cancelled in between (an ASGI server need not allow a
        receive again after a cancelled one); only when the client has paused."""
        loop = asyncio.get_running_loop()
        received = asyncio.ensure_future(receive())
        wait_s = self._limits.idle_timeout_s
        try:
            while True:
                deadline = loop.time() + wait_s
                done, _ = await asyncio.wait((received,), timeout=wait_s)
                if done:
                    return received.result()
                if wait_s == _POLL_S and loop.time() - deadline < _POLL_S:
                    return None
                wait_s = _POLL_S
        finally:
            if not received.done():
                received.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await received

    # -- the writer ------------------------------------------------------------------------

    async def _write(self, sent: _Sender) -> None:
        """Apply and answer until the stream stops, one chunk at a time: a chunk is applied
        only once the one before it is durable, and its result lines are sent then, in
        order. (Overlapping them, the next applied while the one before is made durable,
        was faster, but when the earlier one then failed the later one could still commit,
        and the client's resend of the earlier lines would arrive behind it: refused as
        too late on its accounts. The resume protocol needs the stop line to be the first
        line not applied.)"""
        while True:
            head = self._queue[0] if self._queue else None
            if head is None:
                self._queued.clear()
                await self._queued.wait()
                continue
            if not isinstance(head, _Stop):
                if _Sender.unsent_bytes_total > MAX_UNSENT_RESULT_BYTES:
                    detail = (
                        f"more than {MAX_UNSENT_RESULT_BYTES} bytes of results wait to be read "
                        f"(this stream's and others'); line {head.number} and after were not "
                        "applied: read results while sending, then resend from this line"
                    )
                    sent.add(_error_line(head.number, None, 503, _problem(RESULTS_UNREAD, detail)))
                    return
                chunk = self._take_chunk()
                with COLLECTOR.batch_in_flight(len(chunk)):
                    flight = await self._start(chunk)
                    stop = await self._finish(flight, sent)
                if stop is not None:
                    sent.add(stop)
                    return
                sent.flush()
                continue
            item = self._queue.popleft()
            assert isinstance(item, _Stop)
            if item.gone:
                sent.abandon()
            elif item.problem is not None:
                sent.add(_error_line(item.number, None, item.status, item.problem))
            return

    def _take_chunk(self) -> list[_Line | _Bad]:
        """The queued lines up to the next stop, at most CHUNK_LINES, about
        CHUNK_ERROR_BYTES of error results and CHUNK_REPLAYED_WRITES of late lines' replays
        (at least one line), cut before a line that names an account and id the chunk has
        already."""
        chunk: list[_Line | _Bad] = []
        seen: set[tuple[str, str]] = set()
        queue = self._queue
        error_bytes = 0
        replayed = self._ledger.replay_cost()
        while queue and len(chunk) < CHUNK_LINES and error_bytes < CHUNK_ERROR_BYTES:
            item = queue[0]
            if isinstance(item, _Stop):
                break
            if isinstance(item, _Line):
                key = (item.op.account_id, item.event_id)
                if key in seen:
                    break
                op = item.op
                cost = replayed.add(op.account_id, op.timestamp, grant=isinstance(op, GrantOp))
                if chunk and cost > CHUNK_REPLAYED_WRITES:
                    break
                seen.add(key)
            else:
                error_bytes += len(item.answer)
            chunk.append(item)
            queue.popleft()
        self._queued_error_bytes -= error_bytes
        self._room.set()
        return chunk

    async def _start(self, chunk: list[_Line | _Bad]) -> _InFlight:
        """Answer what needs no ledger, and start applying the rest (``_finish`` waits for
        it to be durable)."""
        answers: list[bytes | None] = []
        lines: list[_Line] = []
        for item in chunk:
            if isinstance(item, _Bad):
                answers.append(item.answer)
                continue
            try:
                authorize(self._key, item.scope, item.op.account_id, where=f"line {item.number}: ")
            except Forbidden as exc:
                problem = _problem(FORBIDDEN, str(exc))
                answers.append(_error_line(item.number, item.event_id, 403, problem))
                continue
            answers.append(None)
            lines.append(item)
        flight = _InFlight(chunk, answers, lines)
        if lines:
            flight.task = asyncio.create_task(
                self._ledger.events(
                    [EventOp(line.event_id, line.fingerprint, line.op) for line in lines],
                    CHUNK_REPLAYED_WRITES,
                )
            )
        return flight

    async def _finish(self, flight: _InFlight, sent: _Sender) -> bytes | None:
        """Wait until the chunk is durable and queue its result lines on ``sent``; the stop
        line if the stream must end here (the chunk was not applied, or its outcome is
        unknown)."""
        answers = flight.answers
        if flight.task is not None:
            try:
                results = await flight.task
            except Exception as exc:
                # Nothing of this chunk is acknowledged: the stream stops at its first line.
                # On PostgreSQL an unknown outcome is resolved by sending the lines again: the
                # ids that were applied answer duplicate.
                if isinstance(exc, ServiceUnavailable | OutcomeUnknown):
                    described = describe(exc)
                    problem, status = described.body(), described.kind.status
                else:  # a bug, or a failure the service did not map
                    log.error("applying a usage stream chunk failed", exc_info=exc)
                    problem = _problem(INTERNAL, "the server could not apply the lines")
                    status = 500
                first = flight.chunk[0]
                return _error_line(first.number, first.event_id, status, problem)
            if len(results) < len(flight.lines):
                # The ledger applied the first lines only (its count of what they replay,
                # from the accounts it held, passed the bound): the chunk ends before the
                # first line not applied, and that line and all after it go back to the
                # front of the queue, to be taken by the next chunks in order.
                stop = flight.lines[len(results)]
                cut = next(i for i, item in enumerate(flight.chunk) if item is stop)
                self._put_back(flight.chunk[cut:])
                answers = answers[:cut]
            made = iter(zip(flight.lines[: len(results)], results, strict=True))
            for index, answer in enumerate(answers):
                if answer is None:
                    line, result = next(made)
                    answers[index] = _result_line(line, result)
        for answer in answers:
            assert answer is not None
            sent.add(answer)
        return None

    def _put_back(self, items: list[_Line | _Bad]) -> None:
        """Queue again, in front and in order, lines a chunk took but did not apply."""
        self._queue.extendleft(reversed(items))
        self._queued_error_bytes += sum(len(i.answer) for i in items if isinstance(i, _Bad))


@dataclass(slots=True)
class _InFlight:
    """A chunk being applied: its answers so far (None: the ledger's to give), the lines
    sent to the ledger, and the task applying them."""

    chunk: list[_Line | _Bad]
    answers: list[bytes | None]
    lines: list[_Line]
    task: asyncio.Task[list[EventResult]] | None = None


class _Sender:
    """Result lines on their way to the client, sent by a task of their own: the writer
    never waits for a client that does not read while it sends (most HTTP/1.1 clients send
    the whole body first), so such a client cannot stall the stream. What waits here is
    bounded by the lines one stream may carry."""

    unsent_bytes_total: ClassVar[int] = 0  # every stream's (see MAX_UNSENT_RESULT_BYTES)

    def __init__(self, send: Send) -> None:
        self._send = send
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._ready = asyncio.Event()
        self._closing = False
        self._gone = False
        self.task = asyncio.create_task(self._run())

    def add(self, line: bytes) -> None:
        self._pending.append(line)
        self._pending_bytes += len(line)
        _Sender.unsent_bytes_total += len(line)

    def _forget_pending(self) -> None:
        _Sender.unsent_bytes_total -= self._pending_bytes
        self._pending = []
        self._pending_bytes = 0

    def flush(self) -> None:
        """Send what was added (a chunk's lines: they are committed)."""
        if self._pending:
            self._ready.set()

    def abandon(self) -> None:
        """The client is gone: nothing more is sent."""
        self._gone = True
        self._forget_pending()

    async def close(self) -> None:
        """Send what is left, then end the body."""
        self._closing = True
        self._ready.set()
        await self.task

    async def _run(self) -> None:
        while True:
            if self._pending and not self._gone:
                body = b"".join(self._pending)
                size = self._pending_bytes
                self._pending, self._pending_bytes = [], 0
                try:  # counted until sent: a client that does not read holds it here
                    await self._send_part(body, more=True)
                finally:
                    _Sender.unsent_bytes_total -= size
            elif self._closing:
                if not self._gone:
                    await self._send_part(b"", more=False)
                return
            else:
                await self._ready.wait()
                self._ready.clear()

    async def _send_part(self, body: bytes, more: bool) -> None:
        try:
            await self._send({"type": "http.response.body", "body": body, "more_body": more})
        except OSError:  # the client is gone: what was committed stays committed
            self.abandon()


_RENDER: Final[dict[type, Callable[[Any], bytes]]] = {
    GrantReceipt: render.grant,
    ConsumptionReceipt: render.consumption,
    VoidReceipt: render.void,
}
_STATUS: Final[dict[type, int]] = {
    GrantReceipt: render.GRANT_STATUS,
    ConsumptionReceipt: render.CONSUME_STATUS,
    VoidReceipt: render.VOID_STATUS,
}


def _head(number: int, event_id: str | None, status: int) -> bytes:
    shown = "null" if event_id is None else json.dumps(event_id)
    return f'{{"line":{number},"id":{shown},"status":{status},'.encode()


def _error_line(number: int, event_id: str | None, status: int, problem: dict[str, Any]) -> bytes:
    body = json.dumps(problem, separators=(",", ":"), ensure_ascii=True)
    return _head(number, event_id, status) + b'"body":' + body.encode() + b"}\n"


def _result_line(line: _Line, result: EventResult) -> bytes:
    if isinstance(result, Exception):
        described: Described = describe(result)
        return _error_line(line.number, line.event_id, described.kind.status, described.body())
    if isinstance(result, Duplicate):
        body = {"account_id": result.account_id, "sequence": result.sequence}
        if result.grant_id is not None:
            body["grant_id"] = result.grant_id
        shown = json.dumps(body, separators=(",", ":"))
        return (
            _head(line.number, line.event_id, 200)
            + b'"duplicate":true,"body":'
            + shown.encode()
            + b"}\n"
        )
    kind = type(result)
    return (
        _head(line.number, line.event_id, _STATUS[kind])
        + b'"body":'
        + _RENDER[kind](result)
        + b"}\n"
    )
