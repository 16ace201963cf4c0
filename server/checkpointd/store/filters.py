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

__all__ = ["PrefixMatch", "conditions", "matches", "shape"]


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


def conditions(filters: PendingFilter, prefix: PrefixMatch) -> tuple[str, list[Any]]:
    """The ``AND ...`` conditions of the set filters, and their parameters."""
    sql = ""
    params: list[Any] = []
    if filters.chain_name is not None:
        sql += " AND p.chain_name = ?"
        params.append(filters.chain_name)
    if filters.reason is not None:
        sql += " AND p.reason = ?"
        params.append(filters.reason)
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
