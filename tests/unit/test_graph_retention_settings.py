"""G12: --graph-retention (CHECKPOINTD_GRAPH_RETENTION), its policies per namespace, and the
clear refusal of a bad one at start."""

from __future__ import annotations

from datetime import timedelta

import pytest

from checkpointd.cli import build_parser, serve
from checkpointd.graph.retention import RetentionRule
from checkpointd.graph.retention_job import GraphRetention, parse_duration, parse_graph_retention

DAY = timedelta(days=1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("90m", timedelta(minutes=90)),
        ("12h", timedelta(hours=12)),
        ("7d", 7 * DAY),
        ("2w", 14 * DAY),
        (" 3d ", 3 * DAY),
    ],
)
def test_g12_durations_are_a_whole_number_and_a_unit(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0d", "must be positive"),
        ("-1d", "is not a duration"),
        ("7", "is not a duration"),
        ("1.5d", "is not a duration"),
        ("7days", "is not a duration"),
        ("", "is not a duration"),
        ("99999w", "at most 100 years"),
    ],
)
def test_g12_a_bad_duration_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_duration(text)


def test_g12_policies_per_namespace_with_a_default_and_exemptions() -> None:
    policy = parse_graph_retention("*=idle:30d,keep:100; support=idle:7d ;audit=off")
    assert policy.rule_for("anything") == RetentionRule(idle_for=30 * DAY, keep_newest=100)
    assert policy.rule_for("support") == RetentionRule(idle_for=7 * DAY)
    assert policy.rule_for("audit") is None
    assert policy.every_namespace
    assert str(policy) == "*=idle:30d,keep:100;support=idle:1w;audit=off"
    assert parse_graph_retention(str(policy)) == policy
    assert policy.interval == 600.0  # a quarter of 7 days is longer than the most


def test_g12_without_a_default_only_the_named_namespaces_are_reached() -> None:
    policy = parse_graph_retention("team-a=keep:5;team-b=idle:2m")
    assert policy.rule_for("team-a") == RetentionRule(keep_newest=5)
    assert policy.rule_for("other") is None
    assert not policy.every_namespace
    assert policy.interval == 30.0  # a quarter of the shortest idle time
    assert parse_graph_retention("x=idle:1s").interval == 1.0  # never below a second


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no policy"),
        (" ; ", "no policy"),
        ("idle:7d", "must be NAMESPACE=RULES"),
        ("bad namespace=keep:1", "namespace 'bad namespace' must be 1 to 63 characters"),
        ("-x=keep:1", "namespace '-x' must be"),
        ("a=keep:1;a=idle:1d", "two policies"),
        ("a=", "must be idle:DURATION or keep:N"),
        ("a=keep", "must be idle:DURATION or keep:N"),
        ("a=keep:0", "1 to 1000000"),
        ("a=keep:-3", "1 to 1000000"),
        ("a=keep:many", "1 to 1000000"),
        ("a=keep:1,keep:2", "keep is given twice"),
        ("a=idle:1d,idle:2d", "idle is given twice"),
        ("a=idle:0s", "must be positive"),
        ("a=idle:-1d", "is not a duration"),
        ("a=ttl:1d", "unknown rule 'ttl'"),
    ],
)
def test_g12_a_bad_policy_says_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_graph_retention(text)


def _settings(monkeypatch: pytest.MonkeyPatch, *argv: str, **env: str) -> GraphRetention | None:
    monkeypatch.delenv("CHECKPOINTD_GRAPH_RETENTION", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    parser = build_parser("serve")  # reads the environment, as at start
    args = parser.parse_args(["serve", "--store", "sqlite:///tmp/unused.db", *argv])
    return serve._settings(args, parser).graph_retention


def test_g12_the_flag_wins_over_the_environment_and_the_default_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _settings(monkeypatch) is None
    from_env = _settings(monkeypatch, CHECKPOINTD_GRAPH_RETENTION="*=keep:3")
    assert from_env == parse_graph_retention("*=keep:3")
    flag = _settings(
        monkeypatch, "--graph-retention", "a=keep:1", CHECKPOINTD_GRAPH_RETENTION="*=keep:3"
    )
    assert flag == parse_graph_retention("a=keep:1")


def test_g12_a_bad_setting_stops_the_start_with_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as flag:
        _settings(monkeypatch, "--graph-retention", "*=keep:-1")
    assert flag.value.code == 2
    assert "--graph-retention: '*=keep:-1': *: keep:-1 must keep" in capsys.readouterr().err
    with pytest.raises(SystemExit) as env:
        _settings(monkeypatch, CHECKPOINTD_GRAPH_RETENTION="*=idle:0d")
    assert "CHECKPOINTD_GRAPH_RETENTION='*=idle:0d' is not valid" in str(env.value.code)
