"""Contract N2: ListNamespaces lists the namespaces that hold a run (a fastaiagent
checkpoint, a pending interrupt or a LangGraph thread), in name order, paged; a token sees
only the namespaces it is granted. A fresh store per test (the listing reads the whole
store), on every backend."""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import grpc
import pytest
from langgraph.graph import END, START, StateGraph

from checkpointd_client import CheckpointdClient, InvalidArgumentError
from checkpointd_client.langgraph import CheckpointdSaver
from checkpointd_client.v1 import checkpoint_service_pb2 as svc
from checkpointd_client.v1 import checkpoint_service_pb2_grpc
from tests.contract.conftest import NO_RETRY
from tests.contract.helpers import checkpoint, interrupted
from tests.support.grpc_errors import error_details
from tests.support.sidecar import Sidecar

pytestmark = pytest.mark.own_server


class State(TypedDict):
    n: int


def _thread(target: str, namespace: str, token: str | None = None) -> None:
    """One LangGraph thread of one step in ``namespace``."""
    graph = StateGraph(State)
    graph.add_node("a", lambda state: {"n": state["n"] + 1})
    graph.add_edge(START, "a")
    graph.add_edge("a", END)
    with CheckpointdSaver(target, namespace=namespace, token=token) as saver:
        config: Any = {"configurable": {"thread_id": f"thread-{uuid.uuid4().hex[:8]}"}}
        graph.compile(checkpointer=saver).invoke({"n": 0}, config)


def _client(server: Sidecar, namespace: str = "default", token: str | None = None) -> Any:
    return CheckpointdClient(server.target, namespace=namespace, token=token, retry=NO_RETRY)


def _populate(server: Sidecar, token: str | None = None) -> None:
    """a-run: a fastaiagent run; b-pause: a paused run; c-graph: a LangGraph thread; d-both:
    a run and a thread; e-gone: a run since deleted."""
    for namespace in ("a-run", "d-both", "e-gone"):
        with _client(server, namespace, token) as client:
            client.put_checkpoint(checkpoint(f"run-{uuid.uuid4().hex[:8]}"))
    with _client(server, "b-pause", token) as client:
        client.record_interrupt(*interrupted(f"run-{uuid.uuid4().hex[:8]}"))
    _thread(server.target, "c-graph", token)
    _thread(server.target, "d-both", token)
    with _client(server, "e-gone", token) as client:
        (gone,) = client.list_executions().executions
        client.delete_execution(gone.execution_id)


def _all_pages(client: CheckpointdClient, page_size: int) -> list[list[str]]:
    pages: list[list[str]] = []
    token = ""
    while True:
        page = client.list_namespaces(page_size=page_size, page_token=token)
        pages.append(page.namespaces)
        token = page.next_page_token
        if not token:
            return pages


def test_n2_namespaces_holding_a_run_a_pause_or_a_thread_are_listed_in_name_order(
    sidecar: Sidecar,
):
    """An empty store lists none; then each namespace with a fastaiagent run, a pending
    interrupt or a LangGraph thread is listed once, in name order, and one whose only run was
    deleted is not; pages of two follow each other without a gap or a repeat, and the client's
    own namespace plays no part."""
    with _client(sidecar) as client:
        empty = client.list_namespaces()
        assert (empty.namespaces, empty.next_page_token) == ([], "")
        _populate(sidecar)
        expected = ["a-run", "b-pause", "c-graph", "d-both"]
        assert client.list_namespaces().namespaces == expected
        assert _all_pages(client, 2) == [["a-run", "b-pause"], ["c-graph", "d-both"]]
        assert _all_pages(client, 3) == [["a-run", "b-pause", "c-graph"], ["d-both"]]
    with _client(sidecar, "elsewhere") as other:
        assert other.list_namespaces(page_size=1000).namespaces == expected


def test_n2_bad_page_size_and_page_token_are_invalid_argument_and_change_nothing(
    sidecar: Sidecar,
):
    """A negative page size is INVALID_FIELD; a token that is not one ListNamespaces wrote
    (mangled, another listing's, naming no namespace) is INVALID_PAGE_TOKEN."""
    with _client(sidecar, "a-run") as client:
        client.put_checkpoint(checkpoint("run-1"))
        client.put_checkpoint(checkpoint("run-2"))
        with grpc.insecure_channel(sidecar.target) as channel:
            stub = checkpoint_service_pb2_grpc.CheckpointServiceStub(channel)
            with pytest.raises(grpc.RpcError) as negative:
                stub.ListNamespaces(svc.ListNamespacesRequest(page_size=-1), timeout=10)
        assert negative.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert error_details(negative.value).reason == "INVALID_FIELD"
        executions_token = client.list_executions(page_size=1).next_page_token
        assert executions_token
        for token in ("not a token", executions_token, "W10", "x" * 300):
            with pytest.raises(InvalidArgumentError) as bad:
                client.list_namespaces(page_token=token)
            assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert bad.value.reason == "INVALID_PAGE_TOKEN", token
        assert client.list_namespaces().namespaces == ["a-run"]


def _tokens_file(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    tokens = {name: f"tok-{secrets.token_urlsafe(24)}" for name in ("admin", "team", "none")}
    document = {
        "tokens": [
            {"name": "admin", "token": tokens["admin"], "namespaces": ["*"], "role": "read-write"},
            {
                "name": "team",
                "token": tokens["team"],
                "namespaces": ["d-both", "b-pause", "e-gone", "z-empty"],
                "role": "read-only",
            },
            {"name": "none", "token": tokens["none"], "namespaces": ["q"], "role": "read-only"},
        ]
    }
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps(document))
    path.chmod(0o600)
    return path, tokens


def test_n2_a_token_lists_only_the_namespaces_it_is_granted(
    sidecar_factory: Callable[..., Sidecar], tmp_path: Path
):
    """With tokens on, a token granted "*" lists every namespace that holds a run; a token
    granted some lists those of them that hold a run (not one that is empty or emptied), in
    name order and paged; a token granted none that hold a run lists nothing. A page token
    of one grant's listing is refused in another's."""
    path, tokens = _tokens_file(tmp_path)
    server = sidecar_factory("--auth-tokens-file", str(path))
    _populate(server, tokens["admin"])
    with (
        _client(server, token=tokens["admin"]) as admin,
        _client(server, token=tokens["team"]) as team,
        _client(server, token=tokens["none"]) as none,
    ):
        assert admin.list_namespaces().namespaces == ["a-run", "b-pause", "c-graph", "d-both"]
        assert team.list_namespaces().namespaces == ["b-pause", "d-both"]
        assert _all_pages(team, 1) == [["b-pause"], ["d-both"]]
        assert none.list_namespaces().namespaces == []
        team_token = team.list_namespaces(page_size=1).next_page_token
        with pytest.raises(InvalidArgumentError) as foreign:
            admin.list_namespaces(page_token=team_token)
        assert foreign.value.reason == "INVALID_PAGE_TOKEN"
