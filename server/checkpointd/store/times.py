"""The one timestamp codec of the store layer.

SQLite keeps a time as INTEGER microseconds since the Unix epoch (exact, no floats); Postgres
keeps a ``timestamptz``. Either way a time given to the store must be timezone-aware, and a
time read back is an aware UTC datetime.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

__all__ = ["EPOCH", "from_us", "now_us", "to_us", "utc_in", "utc_out"]

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICROSECOND: Final = timedelta(microseconds=1)


def _require_aware(value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("datetimes given to the store must be timezone-aware")


def to_us(value: datetime) -> int:
    """Microseconds since the epoch of an aware datetime, by exact integer arithmetic."""
    _require_aware(value)
    return (value - EPOCH) // _ONE_MICROSECOND


def from_us(value: int) -> datetime:
    """The aware UTC datetime of a number of microseconds since the epoch."""
    return EPOCH + timedelta(microseconds=value)


def now_us() -> int:
    """The current time in microseconds since the epoch."""
    return to_us(datetime.now(UTC))


def utc_in(value: datetime) -> datetime:
    """Check a datetime going into the database is timezone-aware; return it in UTC."""
    _require_aware(value)
    return _as_utc(value)


def utc_out(value: datetime) -> datetime:
    """Return a timestamptz read from the database as an aware UTC datetime."""
    if value.tzinfo is None:
        # asyncpg stores the aware datetime.min/max as -infinity/infinity and reads those
        # back as the naive datetime.min/max; they stand for exactly those instants in UTC.
        return value.replace(tzinfo=UTC)
    return _as_utc(value)


def _as_utc(value: datetime) -> datetime:
    # astimezone() shifts through local arithmetic that overflows at the edges of the
    # datetime range (0001-01-01 in UTC fails with "year 0 is out of range"); a value that
    # is already at offset zero only needs its tzinfo normalised.
    if value.utcoffset() == timedelta(0):
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)
