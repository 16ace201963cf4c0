"""A checkpoint's state as the run view shows it (contract W3): what changed from its parent
channel by channel, what a list appended, its pending writes, and what the limits cut."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from checkpointd.graph.state_view import MAX_WRITES, state_view
from checkpointd_client.v1 import graph_service_pb2 as g

SERDE = JsonPlusSerializer()


def typed(value: Any) -> g.TypedValue:
    kind, data = SERDE.dumps_typed(value)
    return g.TypedValue(type=kind, data=data)


def checkpoint(
    values: dict[str, tuple[str, Any]],
    writes: Sequence[tuple[str, Any]] = (),
) -> g.GraphCheckpointTuple:
    """A tuple with ``values`` (channel -> (version, value)) and pending ``writes``."""
    return g.GraphCheckpointTuple(
        checkpoint=g.GraphCheckpoint(thread_id="t", checkpoint_id="c"),
        channel_values=[
            g.GraphChannelValue(channel=channel, version=version, value=typed(value))
            for channel, (version, value) in values.items()
        ],
        pending_writes=[
            g.GraphWrite(
                task_id="task", task_path="~__pregel_pull, review", idx=i, channel=c, value=typed(v)
            )
            for i, (c, v) in enumerate(writes)
        ],
    )


def test_w3_state_changes_name_each_channel_added_removed_changed_or_appended() -> None:
    """Against its parent: a new channel is added, a gone one removed, a new version
    changed with before and after; a list that grew at its end says what it appended, one
    rewritten does not; a channel at the same version is not a change."""
    parent = checkpoint(
        {
            "log": ("1", ["a"]),
            "order": ("1", {"amount": 40}),
            "gone": ("1", 1),
            "same": ("1", "x"),
            "rewritten": ("1", [1, 2]),
        }
    )
    child = checkpoint(
        {
            "log": ("2", ["a", "b", "c"]),
            "order": ("2", {"amount": 25}),
            "new": ("1", True),
            "same": ("1", "x"),
            "rewritten": ("2", [2, 1, 3]),
        }
    )
    changes = {c["channel"]: c for c in state_view(child, parent).changes}
    assert set(changes) == {"gone", "log", "new", "order", "rewritten"}
    assert changes["gone"] == {"channel": "gone", "change": "removed", "before": 1}
    assert changes["new"] == {"channel": "new", "change": "added", "after": True}
    assert changes["log"]["appended"] == ["b", "c"]
    assert (changes["order"]["before"], changes["order"]["after"]) == (
        {"amount": 40},
        {"amount": 25},
    )
    assert "appended" not in changes["rewritten"]
    assert {c["change"] for c in state_view(child, None).changes} == {"added"}


def test_w3_state_shows_pending_writes_with_their_node_and_caps_them() -> None:
    """Pending writes are shown with the node their task path names, at most MAX_WRITES of
    them; the rest is named in ``cut``, as a value's cut strings are."""
    shown = state_view(checkpoint({"note": ("1", "x" * 5000)}, [("__interrupt__", "ask")]), None)
    [write] = shown.pending_writes
    assert (write["node"], write["channel"], write["value"]) == ("review", "__interrupt__", "ask")
    assert shown.cut == {"values.note": ["strings longer than 4000 characters"]}
    many = state_view(checkpoint({}, [("log", i) for i in range(MAX_WRITES + 5)]), None)
    assert len(many.pending_writes) == MAX_WRITES
    assert many.cut == {"pending_writes": [f"5 writes beyond the first {MAX_WRITES}"]}
