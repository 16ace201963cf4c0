"""The tokens file, the bearer check, the read/write table and the client's credentials, without
a server."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from checkpointd.auth import (
    RPC_ACCESS,
    Access,
    Authenticator,
    Role,
    TokenFileError,
    env_grant,
    load_tokens_file,
)
from checkpointd.errors import InvalidToken, MissingToken, status_for
from checkpointd_client import TlsConfig
from checkpointd_client.credentials import auth_metadata, resolve_tls
from checkpointd_client.v1 import (
    checkpoint_service_pb2,
    graph_service_pb2,
    idempotency_service_pb2,
    interrupt_service_pb2,
    replication_service_pb2,
)

SECRET = "plain-token-0123456789abcdef"
OTHER = "other-token-0123456789abcdef"


def _file(tmp_path: Path, *entries: object, mode: int = 0o600) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({"tokens": list(entries)}))
    path.chmod(mode)
    return path


def _entry(**fields: object) -> dict[str, object]:
    entry: dict[str, object] = {
        "name": "bot",
        "token": SECRET,
        "namespaces": ["team-a"],
        "role": "read-write",
    }
    entry.update(fields)
    return {key: value for key, value in entry.items() if value is not None}


def test_every_rpc_is_classified_as_read_or_write_and_names_its_namespace():
    """The access table names every method of the five services, no other, and each request
    carries the namespace the interceptor checks, but ListNamespaces', which names none and
    lists only the token's namespaces (N2)."""
    methods: dict[str, object] = {}
    for module in (
        checkpoint_service_pb2,
        interrupt_service_pb2,
        idempotency_service_pb2,
        replication_service_pb2,
        graph_service_pb2,
    ):
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                methods[f"/{service.full_name}/{method.name}"] = method
                named = "namespace" in method.input_type.fields_by_name
                assert named != (method.name == "ListNamespaces"), method.full_name
    assert set(RPC_ACCESS) == set(methods)
    reads = {m.rsplit("/", 1)[1] for m, a in RPC_ACCESS.items() if a is Access.READ}
    assert reads == {
        "GetCheckpoint",
        "GetLatestCheckpoint",
        "ListCheckpoints",
        "GetResumePoint",
        "GetForkPoint",
        "ListExecutions",
        "GetExecution",
        "ListNamespaces",
        "ListPendingInterrupts",
        "WatchInterrupts",
        "ListDecisions",
        "GetIdempotencyResult",
        "ListUnsyncedCheckpoints",
        "GetGraphCheckpoint",
        "ListGraphCheckpoints",
        "GetGraphDeltaHistory",
    }


def test_tokens_file_keeps_only_digests_and_grants(tmp_path: Path):
    """Plaintext and hashed entries load into grants holding the SHA-256 only; "*" grants
    every namespace; the bearer check finds the right grant and refuses the rest."""
    hashed = hashlib.sha256(OTHER.encode()).hexdigest()
    path = _file(
        tmp_path,
        _entry(),
        _entry(name="viewer", token=None, token_sha256=hashed.upper(), namespaces=["*"]),
    )
    grants = load_tokens_file(path)
    assert [g.name for g in grants] == ["bot", "viewer"]
    assert grants[0].digest == hashlib.sha256(SECRET.encode()).digest()
    assert SECRET not in repr(grants)
    assert hashed not in repr(grants).lower()
    assert grants[0].allows_namespace("team-a")
    assert not grants[0].allows_namespace("team-b")
    assert grants[1].allows_namespace("anything")

    auth = Authenticator([*grants, env_grant("env-token-0123456789")])
    assert auth.authenticate([("authorization", f"Bearer {SECRET}")]).name == "bot"
    assert auth.authenticate([("authorization", f"bearer {OTHER}")]).name == "viewer"
    assert auth.authenticate([("authorization", "Bearer env-token-0123456789")]).role is (
        Role.READ_WRITE
    )
    with pytest.raises(MissingToken):
        auth.authenticate([("x-other", "1")])
    for bad in (
        [("authorization", "Bearer nope-0123456789abcdef")],
        [("authorization", SECRET)],
        [("authorization", f"Bearer {SECRET}"), ("authorization", f"Bearer {SECRET}")],
    ):
        with pytest.raises(InvalidToken) as refused:
            auth.authenticate(bad)
        info = status_for(refused.value)
        assert info is not None
        assert info.reason == "INVALID_TOKEN"
        assert SECRET not in info.message


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (_entry(role=None), "role must be"),
        (_entry(role="admin"), "role must be"),
        (_entry(token_sha256="ab" * 32), "exactly one of token_sha256"),
        (_entry(token=None), "exactly one of token_sha256"),
        (_entry(token=None, token_sha256="xyz"), "64 hex digits"),
        (_entry(token="short"), "at least 16 characters"),
        (_entry(token="has a space in it 0123"), "printable ASCII without spaces"),
        (_entry(namespaces=[]), "non-empty list"),
        (_entry(namespaces="team-a"), "non-empty list"),
        (_entry(namespaces=["Team A!"]), "is not a namespace name"),
        (_entry(name=""), "name must be"),
        (_entry(namespace=["a"]), "unknown key(s) namespace"),
        ("not an object", "must be an object"),
    ],
)
def test_tokens_file_entry_mistakes_name_the_entry_and_never_the_token(
    tmp_path: Path, entry: object, message: str
):
    """Each kind of mistake in an entry is refused with a message naming the entry and the
    rule, never the token's text."""
    with pytest.raises(TokenFileError) as refused:
        load_tokens_file(_file(tmp_path, entry))
    text = str(refused.value)
    assert message in text
    assert "tokens[0]" in text
    assert SECRET not in text


def test_tokens_file_level_mistakes(tmp_path: Path):
    """Repeated names or tokens, an empty list, another shape, broken JSON and a missing file
    are refused, without quoting the file's text."""
    cases: list[tuple[str, str]] = [
        (json.dumps({"tokens": [_entry(), _entry(token=OTHER)]}), "name 'bot' repeats"),
        (json.dumps({"tokens": [_entry(), _entry(name="b")]}), "has the same token as 'bot'"),
        (json.dumps({"tokens": []}), "non-empty list"),
        (json.dumps([_entry()]), 'must be an object {"tokens": [...]}'),
        ('{"tokens": [{"token": "' + SECRET + '",]}', "not valid JSON (line 1"),
    ]
    path = tmp_path / "tokens.json"
    for text, message in cases:
        path.write_text(text)
        with pytest.raises(TokenFileError) as refused:
            load_tokens_file(path)
        assert message in str(refused.value)
        assert SECRET not in str(refused.value)
    with pytest.raises(TokenFileError, match="cannot read the tokens file"):
        load_tokens_file(tmp_path / "missing.json")


def test_plaintext_tokens_in_a_readable_file_are_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """A file holding plaintext tokens that other users can read loads, with a warning to
    chmod it or store hashes; a private file, or one with hashes only, loads quietly."""
    caplog.set_level(logging.WARNING, logger="checkpointd")
    load_tokens_file(_file(tmp_path, _entry(), mode=0o644))
    assert "chmod 0600" in caplog.text
    caplog.clear()
    load_tokens_file(_file(tmp_path, _entry(), mode=0o600))
    hashed = hashlib.sha256(SECRET.encode()).hexdigest()
    load_tokens_file(_file(tmp_path, _entry(token=None, token_sha256=hashed), mode=0o644))
    assert caplog.text == ""


def test_client_token_and_tls_settings(monkeypatch: pytest.MonkeyPatch):
    """The client's token comes from the argument, else CHECKPOINTD_TOKEN, as a bearer
    header; a bad token is refused without echoing it; TLS is refused for a Unix socket."""
    monkeypatch.delenv("CHECKPOINTD_TOKEN", raising=False)
    assert auth_metadata(None) == ()
    monkeypatch.setenv("CHECKPOINTD_TOKEN", f"{OTHER}\n")
    assert auth_metadata(None) == (("authorization", f"Bearer {OTHER}"),)
    assert auth_metadata(SECRET) == (("authorization", f"Bearer {SECRET}"),)
    with pytest.raises(ValueError, match="printable ASCII") as refused:
        auth_metadata("two words-0123456789")
    assert "words" not in str(refused.value)

    assert resolve_tls(None, "127.0.0.1:1") is None
    assert resolve_tls(True, "127.0.0.1:1") == TlsConfig()
    with pytest.raises(ValueError, match="TCP targets"):
        resolve_tls(True, "unix:///tmp/x.sock")
    with pytest.raises(ValueError, match="private key"):
        TlsConfig(certificate_chain=b"cert")
