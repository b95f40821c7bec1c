"""Log lines: one JSON object per line (the default) or human-readable text, for every logger
of the process, uvicorn's included, and the request id of the request being answered.

- ``GPU_CREDITS_LOG_FORMAT=json`` (default): ``{"time", "level", "logger", "message", ...}``
  on one line, ``exception`` holding a traceback when there is one. A record logged with
  ``extra={"fields": {...}}`` (the request log, ``app.api.requests``) carries those members
  too; any other record logged while a request is being answered carries its
  ``request_id``. JSON escapes every control character, so nothing a caller sends can forge
  a line.
- ``text``: ``time LEVEL logger: message`` and the fields as ``name=value``, for
  development.

``log_config`` is a ``logging.config.dictConfig`` dictionary: ``gpu-credits serve`` applies
it and hands it to uvicorn (``uvicorn.run(log_config=...)``), which applies it again in every
worker process, so uvicorn's own lines (startup, shutdown, errors) are formatted the same.
Everything goes to stderr, through ``BufferedStreamHandler``: lines below WARNING are
written together at most every ``flush_interval_s`` (one ``write()`` for many lines, as
nginx's ``access_log ... buffer= flush=``), a WARNING or worse at once with every line before
it, and all of them at exit and from the start of a shutdown on (``write_through``).
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import threading
import time
import weakref
from typing import Any, Final, Literal

LogFormat = Literal["json", "text"]

# The request being answered (``app.api.requests.RequestObserver`` sets it for the request's
# task): read by the formatters and by problem documents (``app.api.problems``).
REQUEST_ID: Final[contextvars.ContextVar[str | None]] = contextvars.ContextVar(
    "gpu_credits_request_id", default=None
)
FIELDS_ATTR: Final = "fields"
# How long a line below WARNING may wait in memory before it is written (GPU_CREDITS_LOG_FLUSH_MS
# sets it for the service), and how much may wait at most: past this, lines are written at once.
DEFAULT_FLUSH_INTERVAL_S: Final = 0.1
# Counted in characters of the formatted lines: JSON lines are ASCII (escaped), so that is
# bytes; a text-format line with other characters takes a few more bytes than counted.
BUFFER_CAPACITY_BYTES: Final = 64 * 1024


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line. Every request may log one: kept lean (the
    encoder is made once, the time's text is remade once a second)."""

    def __init__(self) -> None:
        super().__init__()
        _lean_records()
        self._encode = json.JSONEncoder(default=str).encode
        self._second = -1
        self._second_text = ""

    def _time(self, created_s: float) -> str:
        """ISO 8601 in UTC with milliseconds: ``2026-05-01T12:00:00.123Z``."""
        second = int(created_s)
        if second != self._second:
            self._second_text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        return f"{self._second_text}.{int((created_s - second) * 1000):03d}Z"

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self._time(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, FIELDS_ATTR, None)
        if isinstance(fields, dict):
            line.update(fields)
        else:
            request_id = REQUEST_ID.get()
            if request_id is not None:
                line["request_id"] = request_id
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return self._encode(line)


def _lean_records() -> None:
    """For the whole process, once its logging is configured with these formatters (by
    ``gpu-credits serve`` and by each uvicorn worker): records without what no line of ours
    shows (the caller's file and line, thread and process names), so ``logging`` skips
    looking them up, a third of a record's cost (Python's logging HOWTO, "Optimization");
    and Python's warnings as log lines (``py.warnings``), not raw text among the JSON."""
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None
    logging.captureWarnings(True)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message name=value ...``: for a person reading a terminal."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        _lean_records()

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = getattr(record, FIELDS_ATTR, None)
        if isinstance(fields, dict):
            # A path is percent-decoded (%0A is a newline): values are shown escaped, so a
            # caller cannot start a line of its own.
            extra = " ".join(f"{k}={_one_line(v)}" for k, v in fields.items() if v is not None)
        else:
            request_id = REQUEST_ID.get()
            extra = f"request_id={request_id}" if request_id is not None else ""
        if not extra:
            return text
        # After the message's first line: a traceback stays below it.
        first, newline, rest = text.partition("\n")
        return f"{first} {extra}{newline}{rest}"


class BufferedStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A ``StreamHandler`` that writes lines below WARNING in batches: kept in memory (at most
    ``capacity_bytes``; past that, written at once) and written with one ``write()`` by a
    background thread at most ``flush_interval_s`` after the first of them. A WARNING or
    worse is written at once, after the lines before it, so order is kept. ``flush()`` (and
    so ``logging.shutdown()``, which runs at a normal exit) writes what is waiting, and the
    app's shutdown makes every handler write through (``write_through()``: uvicorn ends a
    process on SIGTERM by raising it again, past ``logging.shutdown()``). What a process
    killed outright (SIGKILL, the machine failing) loses: the lines of its last
    ``flush_interval_s`` at most. ``flush_interval_s=0``: every line is written as it is
    logged, as ``StreamHandler`` does."""

    def __init__(
        self,
        stream: Any = None,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
        capacity_bytes: int = BUFFER_CAPACITY_BYTES,
    ) -> None:
        super().__init__(stream)
        self.flush_interval_s = flush_interval_s
        self.capacity_bytes = capacity_bytes
        self._waiting: list[str] = []
        self._waiting_chars = 0
        self._pending = threading.Event()  # set while lines wait for the flusher
        self._stopping = threading.Event()
        self._flusher: threading.Thread | None = None
        _BUFFERED.add(self)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        with self.lock:  # type: ignore[union-attr]
            self._waiting.append(line)
            self._waiting_chars += len(line)
            if (
                record.levelno >= logging.WARNING
                or self._waiting_chars >= self.capacity_bytes
                or self.flush_interval_s <= 0
                or self._stopping.is_set()
            ):
                self._write_waiting(record)
            elif not self._pending.is_set():
                self._pending.set()
                if self._flusher is None:
                    self._start_flusher()

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self._write_waiting(None)

    def close(self) -> None:
        self._stopping.set()
        self._pending.set()  # the flusher wakes and ends
        self.flush()
        super().close()

    def write_through(self) -> None:
        """Write what waits, and every line from now on as it is logged."""
        with self.lock:  # type: ignore[union-attr]
            self.flush_interval_s = 0.0
            self._write_waiting(None)

    def _write_waiting(self, record: logging.LogRecord | None) -> None:
        """Write what waits, in one ``write()`` (the caller holds the lock)."""
        self._pending.clear()
        if not self._waiting:
            return
        text = "".join(self._waiting)
        self._waiting.clear()
        self._waiting_chars = 0
        try:
            self.stream.write(text)
            self.stream.flush()
        except Exception:
            if record is None:  # a flush on the timer or at exit: report it as logging does
                record = logging.LogRecord("app.logs", logging.ERROR, "", 0, text, None, None)
            self.handleError(record)

    def _start_flusher(self) -> None:
        self._flusher = threading.Thread(
            target=self._flush_forever, name="log-flusher", daemon=True
        )
        self._flusher.start()

    def _flush_forever(self) -> None:
        while not self._stopping.is_set():
            self._pending.wait()
            # The lines wait this long at most, and more lines join them meanwhile.
            if self._stopping.wait(self.flush_interval_s):
                return  # close() writes what is left
            self.flush()

    def _forked(self) -> None:
        """In a child made by ``fork()``: no flusher thread there yet (and the parent's lines
        are the parent's to write)."""
        self._flusher = None
        self._waiting.clear()
        self._waiting_chars = 0
        self._pending.clear()


_BUFFERED: Final[weakref.WeakSet[BufferedStreamHandler]] = weakref.WeakSet()


def write_through() -> None:
    """Once the service starts shutting down: every ``BufferedStreamHandler`` of the process
    writes what waits and, from then on, every line at once. uvicorn ends a process stopped
    by SIGTERM or SIGINT by raising that signal again once it has shut down, which kills it
    before ``logging.shutdown()`` would run at exit: without this, its last lines (the
    shutdown's) would be lost."""
    for handler in list(_BUFFERED):
        handler.write_through()


def _after_fork_in_child() -> None:
    for handler in list(_BUFFERED):
        handler._forked()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _one_line(value: object) -> str:
    text = str(value)
    return text if text.isprintable() else ascii(text)[1:-1]


FORMATTERS: Final[dict[LogFormat, str]] = {
    "json": f"{__name__}.JsonFormatter",
    "text": f"{__name__}.TextFormatter",
}


def log_config(
    level: str, log_format: LogFormat, flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S
) -> dict[str, Any]:
    """The ``dictConfig`` of the whole process: one stderr handler on the root logger
    (``BufferedStreamHandler``), and uvicorn's loggers sent to it (uvicorn's own
    configuration gives them handlers and formats of their own)."""
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": {"()": FORMATTERS[log_format]}},
        "handlers": {
            "stderr": {
                "class": f"{__name__}.BufferedStreamHandler",
                "formatter": "main",
                "stream": "ext://sys.stderr",
                "flush_interval_s": flush_interval_s,
            }
        },
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {
            name: {"handlers": [], "level": level, "propagate": True}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
        },
    }
