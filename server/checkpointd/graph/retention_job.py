"""``--graph-retention``: retention of LangGraph threads per namespace, and the periodic job
that applies it (the rules themselves are :mod:`checkpointd.graph.retention`'s, the
same that ApplyGraphRetention applies on demand).

The setting is a list of policies separated by ``;``, each ``NAMESPACE=RULES``:

* ``RULES`` is ``idle:DURATION`` (delete the threads whose newest checkpoint is older),
  ``keep:N`` (keep the N newest checkpoints of each checkpoint_ns of a thread), both
  separated by ``,``, or ``off`` (no retention for that namespace);
* ``DURATION`` is a whole number with a unit: ``s``, ``m``, ``h``, ``d`` or ``w``
  (``90m``, ``7d``);
* ``NAMESPACE`` is a namespace name, or ``*`` for every namespace without a policy of its
  own.

``*=idle:30d,keep:100;support=idle:7d;audit=off`` keeps 100 checkpoints per thread and
deletes threads idle for 30 days everywhere, except in ``support`` (threads idle for 7 days
go, no cap on checkpoints) and ``audit`` (nothing goes).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final

from checkpointd.graph.retention import RetentionCounts, RetentionRule
from checkpointd.store.base import StoreError
from checkpointd.validation import NAMESPACE_RULE, is_namespace_name

if TYPE_CHECKING:  # the settings import this module; the store's modules import them
    from checkpointd.graph.store import GraphStore

__all__ = [
    "EVERY_NAMESPACE",
    "GraphRetention",
    "apply_graph_retention_forever",
    "apply_graph_retention_once",
    "parse_duration",
    "parse_graph_retention",
]

log = logging.getLogger("checkpointd")

#: Receives the counts of each round (the metrics count them).
RetentionCounter = Callable[[RetentionCounts], None]

EVERY_NAMESPACE: Final = "*"
#: The longest pause between two runs of the job; a short idle time makes it run more often.
MAX_INTERVAL_SECONDS: Final = 600.0
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION_RE: Final = re.compile(r"([0-9]+)([smhdw])")
#: Larger than any count a store holds; keeps a typo such as keep:1e9 from meaning "forever".
_KEEP_MAX: Final = 1_000_000


def parse_duration(text: str) -> timedelta:
    """A positive whole number with a unit (``s``, ``m``, ``h``, ``d``, ``w``)."""
    match = _DURATION_RE.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: a whole number and a unit, s, m, h, d or w (e.g. 7d)"
        )
    seconds = int(match[1]) * _UNITS[match[2]]
    if seconds <= 0:
        raise ValueError(f"{text!r}: the idle time must be positive")
    if seconds > 100 * 365 * 86400:
        raise ValueError(f"{text!r}: the idle time must be at most 100 years")
    return timedelta(seconds=seconds)


def _format_duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    for unit in ("w", "d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds // _UNITS[unit]}{unit}"
    return f"{seconds}s"


def _rule(namespace: str, text: str) -> RetentionRule | None:
    """The rule ``RULES`` says for ``namespace``; None for ``off``."""
    if text.strip() == "off":
        return None
    idle: timedelta | None = None
    keep = 0
    for part in text.split(","):
        name, colon, value = part.strip().partition(":")
        if not colon or not value.strip():
            raise ValueError(
                f"{namespace}: {part.strip()!r} must be idle:DURATION or keep:N (or the "
                "whole policy off)"
            )
        value = value.strip()
        if name == "idle":
            if idle is not None:
                raise ValueError(f"{namespace}: idle is given twice")
            idle = parse_duration(value)
        elif name == "keep":
            if keep:
                raise ValueError(f"{namespace}: keep is given twice")
            if not value.isdigit() or not 1 <= int(value) <= _KEEP_MAX:
                raise ValueError(
                    f"{namespace}: keep:{value} must keep a whole number of checkpoints, "
                    f"1 to {_KEEP_MAX}"
                )
            keep = int(value)
        else:
            raise ValueError(f"{namespace}: unknown rule {name!r}: the rules are idle and keep")
    return RetentionRule(idle_for=idle, keep_newest=keep)


@dataclass(frozen=True, slots=True)
class GraphRetention:
    """The retention policy of every namespace: its own, else ``*``'s, else none."""

    policies: tuple[tuple[str, RetentionRule | None], ...]
    """(namespace or ``*``, rule or None for ``off``), in the order given."""

    def rule_for(self, namespace: str) -> RetentionRule | None:
        """The rule that applies to ``namespace``; None: nothing goes there."""
        named = dict(self.policies)
        if namespace in named:
            return named[namespace]
        return named.get(EVERY_NAMESPACE)

    @property
    def every_namespace(self) -> bool:
        """Whether a ``*`` policy reaches namespaces not named."""
        return dict(self.policies).get(EVERY_NAMESPACE) is not None

    @property
    def interval(self) -> float:
        """Seconds between two runs: a quarter of the shortest idle time, between 1 s and
        10 minutes (the request-id purge's pace)."""
        idle = [
            rule.idle_for.total_seconds()
            for _, rule in self.policies
            if rule is not None and rule.idle_for is not None
        ]
        return max(1.0, min([MAX_INTERVAL_SECONDS, *(s / 4 for s in idle)]))

    def __str__(self) -> str:
        def rules(rule: RetentionRule | None) -> str:
            if rule is None:
                return "off"
            parts = [] if rule.idle_for is None else [f"idle:{_format_duration(rule.idle_for)}"]
            return ",".join(parts + ([f"keep:{rule.keep_newest}"] if rule.keep_newest else []))

        return ";".join(f"{namespace}={rules(rule)}" for namespace, rule in self.policies)


def parse_graph_retention(text: str) -> GraphRetention:
    """``NAMESPACE=RULES[;NAMESPACE=RULES...]`` (see the module's text); ValueError says
    what is wrong."""
    policies: list[tuple[str, RetentionRule | None]] = []
    seen: set[str] = set()
    for item in text.split(";"):
        item = item.strip()
        if not item:
            continue
        namespace, equals, rules = item.partition("=")
        namespace = namespace.strip()
        if not equals:
            raise ValueError(
                f"{item!r} must be NAMESPACE=RULES, e.g. *=idle:30d,keep:100 "
                "(policies are separated by ';')"
            )
        if namespace != EVERY_NAMESPACE and not is_namespace_name(namespace):
            raise ValueError(f"namespace {namespace!r} {NAMESPACE_RULE}, or * for every other")
        if namespace in seen:
            raise ValueError(f"namespace {namespace!r} has two policies")
        seen.add(namespace)
        policies.append((namespace, _rule(namespace, rules)))
    if not policies:
        raise ValueError("no policy: give NAMESPACE=RULES, e.g. *=idle:30d,keep:100")
    return GraphRetention(tuple(policies))


async def apply_graph_retention_once(
    graph: GraphStore, policy: GraphRetention, batch_size: int
) -> RetentionCounts:
    """Apply the policy to every namespace it reaches, once; return the total."""
    if policy.every_namespace:
        namespaces = await graph.retention_namespaces()
    else:
        namespaces = [ns for ns, rule in policy.policies if rule is not None]
    total = RetentionCounts()
    for namespace in namespaces:
        rule = policy.rule_for(namespace)
        if rule is None:
            continue
        counts = await graph.apply_retention(
            namespace, "", rule, datetime.now(tz=UTC), batch_size=batch_size
        )
        if counts.deleted_anything:
            log.info(
                "graph retention in %s: %d threads, %d checkpoints, %d writes and %d channel "
                "values deleted (%d paused threads kept)",
                namespace,
                counts.threads_deleted,
                counts.checkpoints_deleted,
                counts.writes_deleted,
                counts.channel_values_deleted,
                counts.paused_threads_kept,
            )
        total += counts
    return total


async def apply_graph_retention_forever(
    graph: GraphStore,
    policy: GraphRetention,
    batch_size: int,
    *,
    counted: RetentionCounter | None = None,
) -> None:
    """Apply ``--graph-retention`` every :attr:`GraphRetention.interval` seconds; a store
    error skips one round with a warning."""
    while True:
        await asyncio.sleep(policy.interval)
        try:
            counts = await apply_graph_retention_once(graph, policy, batch_size)
        except StoreError as exc:
            log.warning("graph retention skipped: %s", exc)
            continue
        if counted is not None:
            counted(counts)
