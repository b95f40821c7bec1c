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
Everything goes to stderr.
"""

from __future__ import annotations

import contextvars
import json
import logging
import time
from typing import Any, Final, Literal

LogFormat = Literal["json", "text"]

# The request being answered (``app.api.requests.RequestObserver`` sets it for the request's
# task): read by the formatters and by problem documents (``app.api.problems``).
REQUEST_ID: Final[contextvars.ContextVar[str | None]] = contextvars.ContextVar(
    "gpu_credits_request_id", default=None
)
FIELDS_ATTR: Final = "fields"


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


def _one_line(value: object) -> str:
    text = str(value)
    return text if text.isprintable() else ascii(text)[1:-1]


FORMATTERS: Final[dict[LogFormat, str]] = {
    "json": f"{__name__}.JsonFormatter",
    "text": f"{__name__}.TextFormatter",
}


def log_config(level: str, log_format: LogFormat) -> dict[str, Any]:
    """The ``dictConfig`` of the whole process: one stderr handler on the root logger, and
    uvicorn's loggers sent to it (uvicorn's own configuration gives them handlers and
    formats of their own)."""
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": {"()": FORMATTERS[log_format]}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "main",
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {
            name: {"handlers": [], "level": level, "propagate": True}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi")
        },
    }
