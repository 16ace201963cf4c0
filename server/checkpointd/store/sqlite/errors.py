"""SQLite errors as store errors: which result codes mean "unavailable, retry", and a short
reason that never contains SQL text."""

from __future__ import annotations

import sqlite3
from typing import Final

from checkpointd.store.base import StoreError, StoreUnavailable

__all__ = ["BUSY_CODES", "UNAVAILABLE_CODES", "describe", "primary_code", "translate"]

# Primary SQLite result codes (sqlite.org/rescode.html); extended codes carry them in the low byte.
_SQLITE_PERM: Final = 3
_SQLITE_BUSY: Final = 5
_SQLITE_LOCKED: Final = 6
_SQLITE_NOMEM: Final = 7
_SQLITE_READONLY: Final = 8
_SQLITE_INTERRUPT: Final = 9
_SQLITE_IOERR: Final = 10
_SQLITE_CORRUPT: Final = 11
_SQLITE_FULL: Final = 13
_SQLITE_CANTOPEN: Final = 14
_SQLITE_PROTOCOL: Final = 15
_SQLITE_NOTADB: Final = 26

#: Codes meaning the database cannot be reached, locked, written or grown right now.
UNAVAILABLE_CODES: Final = frozenset(
    {
        _SQLITE_PERM,
        _SQLITE_BUSY,
        _SQLITE_LOCKED,
        _SQLITE_NOMEM,
        _SQLITE_READONLY,
        _SQLITE_INTERRUPT,
        _SQLITE_IOERR,
        _SQLITE_FULL,
        _SQLITE_CANTOPEN,
        _SQLITE_PROTOCOL,
    }
)
#: Codes meaning another connection holds the lock this one needs.
BUSY_CODES: Final = frozenset({_SQLITE_BUSY, _SQLITE_LOCKED})
#: Codes whose SQLite message is fixed text (never SQL nor names from it), safe to show.
_PLAIN_MESSAGE_CODES: Final = UNAVAILABLE_CODES | {_SQLITE_CORRUPT, _SQLITE_NOTADB}


def primary_code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def describe(exc: sqlite3.Error) -> str:
    """A short reason for ``exc`` that never contains SQL text."""
    code = primary_code(exc)
    if code in _PLAIN_MESSAGE_CODES:
        return str(exc)
    name = getattr(exc, "sqlite_errorname", None)
    return name if isinstance(name, str) else type(exc).__name__


def translate(exc: sqlite3.Error, path: str, *, busy_timeout_ms: int, closed: bool) -> StoreError:
    """The store error of an SQLite error on the database at ``path``."""
    code = primary_code(exc)
    if code in BUSY_CODES:
        return StoreUnavailable(
            f"SQLite database {path} stayed locked by another connection for longer "
            f"than busy_timeout ({busy_timeout_ms} ms)"
        )
    if code == _SQLITE_READONLY:
        return StoreUnavailable(f"SQLite database {path} is read-only")
    if code == _SQLITE_FULL:
        return StoreUnavailable(f"SQLite database {path}: disk or database is full")
    if code in UNAVAILABLE_CODES:
        return StoreUnavailable(f"SQLite database {path}: {describe(exc)}")
    if isinstance(exc, sqlite3.ProgrammingError) and closed:
        return StoreUnavailable(f"SQLite store {path} is closed")
    return StoreError(f"SQLite database {path}: {describe(exc)}")
