"""The server log: one line per notable event, as text for people or JSON for collectors.

Call :func:`event` for anything an operator may look for (start, store connected, lost and
recovered, shutdown): it logs one line whose ``event`` name and fields a JSON collector can
index. Values are never secrets: store URLs pass through
:func:`checkpointd.config.redact_dsn` before they get here.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

__all__ = ["LOG_FORMATS", "JsonFormatter", "configure_logging", "event"]

LOG_FORMATS = ("text", "json")

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


def configure_logging(level: str, fmt: str) -> None:
    """Send every log line to stderr at ``level`` (debug..error) in ``fmt`` (text or json)."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format must be one of {', '.join(LOG_FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


def event(logger: logging.Logger, level: int, name: str, message: str, **fields: object) -> None:
    """Log one notable event: ``message`` for people, ``name`` and ``fields`` for machines."""
    logger.log(level, message, extra={"event": name, "fields": fields})
