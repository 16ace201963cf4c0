"""C9: one setting says how long request ids are remembered. --request-retention
(CHECKPOINTD_REQUEST_RETENTION); the former --claim-retention and CHECKPOINTD_CLAIM_RETENTION
still set it."""

from __future__ import annotations

import pytest

from checkpointd.cli import build_parser, serve
from checkpointd.config import DEFAULT_REQUEST_RETENTION_SECONDS


def _retention(monkeypatch: pytest.MonkeyPatch, *argv: str, **env: str) -> int:
    for name in ("CHECKPOINTD_REQUEST_RETENTION", "CHECKPOINTD_CLAIM_RETENTION"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser = build_parser("serve")  # reads the environment, as at start
    args = parser.parse_args(["serve", "--store", "sqlite:///tmp/unused.db", *argv])
    return serve._settings(args, parser).request_retention_seconds


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        ((), {}, DEFAULT_REQUEST_RETENTION_SECONDS),
        (("--request-retention", "60"), {}, 60),
        (("--claim-retention", "61"), {}, 61),
        ((), {"CHECKPOINTD_REQUEST_RETENTION": "62"}, 62),
        ((), {"CHECKPOINTD_CLAIM_RETENTION": "63"}, 63),
        (
            (),
            {"CHECKPOINTD_REQUEST_RETENTION": "64", "CHECKPOINTD_CLAIM_RETENTION": "1"},
            64,
        ),
        (("--request-retention", "65"), {"CHECKPOINTD_REQUEST_RETENTION": "1"}, 65),
    ],
)
def test_c9_request_retention_flag_env_and_deprecated_names(
    monkeypatch: pytest.MonkeyPatch, argv: tuple[str, ...], env: dict[str, str], expected: int
) -> None:
    """The flag wins over the environment; the new variable wins over the old one."""
    assert _retention(monkeypatch, *argv, **env) == expected
