"""The server log: one line per notable event, as text for people or JSON for collectors.

Call :func:`event` for anything an operator may look for (start, store connected, lost and
recovered, shutdown): it logs one line whose ``event`` name and fields a JSON collector can
index. Values are never secrets: store URLs pass through
:func:`checkpointd.config.redact_dsn` before they get here.

Other libraries (the database drivers, gRPC) are held to ``WARNING`` and above whatever the
level: their debug lines carry every SQL statement with its parameters, that is stored data
and claim tokens. Their warnings come out as one line, without a traceback, and a message
that repeats (asyncpg retrying its pool during a database outage, say) at most once a minute
with a count of the lines left out; the outage itself is checkpointd's own ``store_lost`` and
``store_recovered`` events.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any

__all__ = ["LOG_FORMATS", "JsonFormatter", "LibraryLogFilter", "configure_logging", "event"]

LOG_FORMATS = ("text", "json")

# Loggers held to WARNING up front, so their debug records are not even built; the filter on
# the handler catches any other library.
_LIBRARY_LOGGERS = ("aiosqlite", "asyncpg", "grpc", "asyncio", "uvloop", "urllib3")
_OWN_LOGGERS = ("checkpointd",)
# A library message that repeats is shown again at most this often.
_REPEAT_WINDOW_S = 60.0
_MAX_DETAIL_CHARS = 300

_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, event and its fields."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as a single line of JSON."""
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        name = getattr(record, "event", None)
        if name:
            line["event"] = name
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def _is_own(name: str) -> bool:
    return any(name == own or name.startswith(f"{own}.") for own in _OWN_LOGGERS)


class LibraryLogFilter(logging.Filter):
    """Holds other libraries' records to WARNING and above, warnings on one line (the
    exception summarised, no traceback), and shows a repeating message at most once per
    ``window`` seconds, saying how many were left out. checkpointd's own records pass
    untouched."""

    def __init__(self, window: float = _REPEAT_WINDOW_S) -> None:
        super().__init__()
        self._window = window
        self._lock = threading.Lock()
        # (logger, message template) -> (when last shown, how many left out since)
        self._shown: dict[tuple[str, str], tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether to emit ``record`` (rewritten in place to one line)."""
        if _is_own(record.name):
            return True
        if record.levelno < logging.WARNING:
            return False
        key = (record.name, str(record.msg))
        now = time.monotonic()
        with self._lock:
            shown = self._shown.get(key)
            if shown is not None and now - shown[0] < self._window:
                self._shown[key] = (shown[0], shown[1] + 1)
                return False
            left_out = shown[1] if shown is not None else 0
            self._shown[key] = (now, 0)
        if record.levelno >= logging.ERROR and not left_out:
            return True  # an error in a library is rare and its traceback worth keeping
        message = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            message = f"{message} ({_summary(record.exc_info[1])})"
        if left_out:
            message = f"{message} [{left_out} more like this in the last {self._window:g}s]"
        record.msg, record.args = message, None
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return True


def _summary(exc: BaseException) -> str:
    """``Type: first line of the message``, short."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if len(text) > _MAX_DETAIL_CHARS:
        text = text[: _MAX_DETAIL_CHARS - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def configure_logging(level: str, fmt: str) -> None:
    """Send every log line to stderr at ``level`` (debug..error) in ``fmt`` (text or json);
    other libraries log at WARNING and above, one line each (see the module doc)."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT_FORMAT))
    handler.addFilter(LibraryLogFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    library_level = max(logging.WARNING, logging.getLevelName(level.upper()))
    for name in _LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(library_level)


def event(logger: logging.Logger, level: int, name: str, message: str, **fields: object) -> None:
    """Log one notable event: ``message`` for people, ``name`` and ``fields`` for machines."""
    logger.log(level, message, extra={"event": name, "fields": fields})
