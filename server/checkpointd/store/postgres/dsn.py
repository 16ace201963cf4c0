"""What the Postgres store reads from a connection URL without ever showing its secrets."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, unquote, urlsplit

__all__ = ["describe_target", "has_application_name"]


def describe_target(dsn: str) -> str:
    """Return ``host:port/database`` of a DSN, without user or password."""
    try:
        parts = urlsplit(dsn)
        hosts = parts.netloc.rpartition("@")[2]
        if not hosts:
            hosts = ",".join(parse_qs(parts.query).get("host", [])) or "localhost"
        if "," not in hosts and not re.search(r":\d+$", hosts):
            hosts += ":5432"
        database = unquote(parts.path.lstrip("/"))
    except ValueError:
        return "the configured server"
    return f"{hosts}/{database}" if database else hosts


def has_application_name(dsn: str) -> bool:
    """Whether the DSN names the application itself (then the store leaves it be)."""
    try:
        return "application_name" in parse_qs(urlsplit(dsn).query)
    except ValueError:
        return False
