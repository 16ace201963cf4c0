"""One checkpoint's state as the run view shows it: its channel values decoded (by
:mod:`.value_view`, never executed), what changed from its parent checkpoint, and its pending
writes (a pause's request is the ``__interrupt__`` write of the task that paused)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from checkpointd.graph.value_view import Decoded, Limits, view
from checkpointd_client.v1 import graph_service_pb2 as g

__all__ = ["LIMITS", "MAX_WRITES", "StateView", "state_view"]

#: How much of each value is shown (the rest is cut, and the reply says so).
LIMITS: Final = Limits(max_bytes=1024 * 1024, max_items=200, max_string=4000, max_nodes=5000)
#: Pending writes shown of one checkpoint.
MAX_WRITES: Final = 200
#: The type tag of a channel version without a value (the savers' "empty").
_EMPTY: Final = "empty"


@dataclass(slots=True)
class StateView:
    """What the run view shows of one checkpoint; ``cut`` names what its limits cut."""

    values: dict[str, Any]
    changes: list[dict[str, Any]]
    pending_writes: list[dict[str, Any]]
    cut: dict[str, list[str]] = field(default_factory=dict)


def _values(found: g.GraphCheckpointTuple, cut: dict[str, list[str]] | None) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    for value in sorted(found.channel_values, key=lambda v: v.channel):
        if value.value.type == _EMPTY:
            continue
        decoded = view(value.value.type, value.value.data, LIMITS)
        shown[value.channel] = decoded.view
        if cut is not None:
            _note(cut, f"values.{value.channel}", decoded)
    return shown


def _note(cut: dict[str, list[str]], where: str, decoded: Decoded) -> None:
    if decoded.cut:
        cut[where] = list(decoded.cut)


def _versions(found: g.GraphCheckpointTuple) -> dict[str, str]:
    return {v.channel: v.version for v in found.channel_values if v.value.type != _EMPTY}


def _changes(
    found: g.GraphCheckpointTuple, after: dict[str, Any], parent: g.GraphCheckpointTuple | None
) -> list[dict[str, Any]]:
    """The channels whose value differs from the parent's: added, removed or changed (a new
    version), with the values before and after, and for a list that grew at its end what
    was appended. Without a parent every value is added."""
    before = {} if parent is None else _values(parent, None)
    old_versions = {} if parent is None else _versions(parent)
    new_versions = _versions(found)
    changes: list[dict[str, Any]] = []
    for channel in sorted(set(before) | set(after)):
        if channel not in before:
            changes.append({"channel": channel, "change": "added", "after": after[channel]})
        elif channel not in after:
            changes.append({"channel": channel, "change": "removed", "before": before[channel]})
        elif old_versions.get(channel) != new_versions.get(channel) or (
            before[channel] != after[channel]
        ):
            change = {
                "channel": channel,
                "change": "changed",
                "before": before[channel],
                "after": after[channel],
            }
            old, new = before[channel], after[channel]
            grew = isinstance(old, list) and isinstance(new, list) and len(new) > len(old)
            if grew and new[: len(old)] == old:
                change["appended"] = new[len(old) :]
            changes.append(change)
    return changes


def _writes(found: g.GraphCheckpointTuple, cut: dict[str, list[str]]) -> list[dict[str, Any]]:
    shown = []
    for index, write in enumerate(found.pending_writes[:MAX_WRITES]):
        decoded = view(write.value.type, write.value.data, LIMITS)
        _note(cut, f"pending_writes.{index}", decoded)
        shown.append(
            {
                "task_id": write.task_id,
                "node": write.task_path.rsplit(", ", 1)[-1] if write.task_path else "",
                "task_path": write.task_path,
                "idx": write.idx,
                "channel": write.channel,
                "value": decoded.view,
            }
        )
    if len(found.pending_writes) > MAX_WRITES:
        left = len(found.pending_writes) - MAX_WRITES
        cut["pending_writes"] = [f"{left} writes beyond the first {MAX_WRITES}"]
    return shown


def state_view(found: g.GraphCheckpointTuple, parent: g.GraphCheckpointTuple | None) -> StateView:
    """``found``'s state, and what changed from ``parent`` (its parent checkpoint, None when
    it has none or it is gone)."""
    cut: dict[str, list[str]] = {}
    values = _values(found, cut)
    return StateView(
        values=values,
        changes=_changes(found, values, parent),
        pending_writes=_writes(found, cut),
        cut=cut,
    )
