"""The pending filters of ListPendingInterrupts and WatchPendingInterrupts, in one place: the
SQL conditions both backends build from them, and the test the watch hub applies to events.

A set ``chain_name`` and ``reason`` match exactly; ``agent_path_prefix`` matches a prefix
(an empty prefix matches every row). Conditions are on the pending table aliased ``p`` and
use ``?`` placeholders, in the order of their parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checkpointd.domain import PendingFilter, PendingRecord

__all__ = ["PrefixMatch", "conditions", "matches", "set_conditions", "shape"]


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """How a backend tests ``p.agent_path`` for a prefix without wildcards: its condition
    (with ``?`` placeholders) and how many times it takes the prefix."""

    sql: str
    uses: int


def shape(filters: PendingFilter) -> tuple[bool, bool, bool]:
    """Which filters are set: chain name, reason, agent path prefix."""
    return (
        filters.chain_name is not None,
        filters.reason is not None,
        bool(filters.agent_path_prefix),
    )


def set_conditions(*tests: tuple[str, object]) -> tuple[str, list[Any]]:
    """`` AND condition`` for each ``(condition, value)`` whose value is set (not None), with
    one ``?`` each, and their values in order: the filters of a listing."""
    chosen = [(condition, value) for condition, value in tests if value is not None]
    return "".join(f" AND {condition}" for condition, _ in chosen), [v for _, v in chosen]


def conditions(filters: PendingFilter, prefix: PrefixMatch) -> tuple[str, list[Any]]:
    """The ``AND ...`` conditions of the set filters, and their parameters."""
    sql, params = set_conditions(
        ("p.chain_name = ?", filters.chain_name), ("p.reason = ?", filters.reason)
    )
    if filters.agent_path_prefix:
        sql += f" AND {prefix.sql}"
        params += [filters.agent_path_prefix] * prefix.uses
    return sql, params


def matches(filters: PendingFilter, pending: PendingRecord) -> bool:
    """Whether a pending row passes the filters, as :func:`conditions` selects rows."""
    if filters.chain_name is not None and pending.chain_name != filters.chain_name:
        return False
    if filters.reason is not None and pending.reason != filters.reason:
        return False
    prefix = filters.agent_path_prefix
    return not prefix or (pending.agent_path is not None and pending.agent_path.startswith(prefix))
