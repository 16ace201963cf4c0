"""Errors never carry unbounded input (contract E2): whatever a request held, the status a
caller gets (message and ErrorInfo metadata, both sent as gRPC metadata) stays small."""

from __future__ import annotations

import grpc
import pytest

from checkpointd import validation as v
from checkpointd.errors import (
    ECHO_MAX,
    CheckpointNotFound,
    InvalidField,
    NamespaceNotAllowed,
    NoCheckpoints,
    NoPendingInterrupt,
    RunAlreadyFinished,
    RunEndNotForkable,
    echo,
    status_for,
)

HUGE = "h" * 20_000


def test_e2_echo_keeps_short_values_and_cuts_long_ones_with_an_ellipsis():
    """Short values are shown whole; long ones are cut to ECHO_MAX characters."""
    assert echo("run-1") == "run-1"
    assert echo("x" * ECHO_MAX) == "x" * ECHO_MAX
    cut = echo(HUGE)
    assert len(cut) == ECHO_MAX
    assert cut.endswith("…")
    assert cut.startswith("h" * (ECHO_MAX - 1))


@pytest.mark.parametrize(
    "error",
    [
        CheckpointNotFound(HUGE, HUGE),
        NoCheckpoints(HUGE),
        NoPendingInterrupt(HUGE),
        RunAlreadyFinished(HUGE),
        RunEndNotForkable(HUGE),
        NamespaceNotAllowed(HUGE, "bot"),
        InvalidField("namespace", v.NAMESPACE_RULE, got=HUGE),
        InvalidField(HUGE, HUGE),  # the backstop: no echo, yet the status stays small
    ],
    ids=lambda e: type(e).__name__,
)
def test_e2_no_status_carries_unbounded_input(error):
    """Every error that echoes request input gives a status of bounded size."""
    info = status_for(error)
    assert info is not None
    assert len(info.message) <= 1024
    assert all(len(value) <= 256 for value in info.metadata.values()), info.metadata
    assert HUGE[:2000] not in info.message


def test_e2_echoed_ids_are_cut_in_message_and_metadata():
    """A not-found of a long id names it cut short, in the message and the metadata."""
    info = status_for(CheckpointNotFound("e" * 256, "c" * 128))
    assert info is not None
    assert info.code == grpc.StatusCode.NOT_FOUND
    assert info.metadata["execution_id"] == "e" * (ECHO_MAX - 1) + "…"
    assert info.metadata["checkpoint_id"] == "c" * 128
    assert len(info.message) < 400


def test_n1_invalid_namespace_names_the_field_and_shows_the_input_cut_short():
    """The rule stays the same text for every input; the message shows the input cut."""
    with pytest.raises(InvalidField) as err:
        v.namespace(HUGE)
    assert err.value.metadata == {"field": "namespace", "rule": v.NAMESPACE_RULE}
    assert len(err.value.message) < 300
    assert "…" in err.value.message
    assert "20000 characters" in err.value.message


def test_j2_a_long_json_key_is_not_echoed_whole():
    """iteration_counters names the offending key, cut short."""
    with pytest.raises(InvalidField) as err:
        v.json_int_object("checkpoint.iteration_counters_json", f'{{"{HUGE}": "x"}}')
    assert len(err.value.message) < 300
    assert "must map names to integers" in err.value.metadata["rule"]
