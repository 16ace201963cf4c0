"""The progress line of long commands: drawn on a terminal, silent otherwise."""

from __future__ import annotations

import io

from checkpointd.cli.progress import ProgressLine, format_duration


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_line_draws_done_total_rate_and_time_left_on_a_terminal():
    """On a terminal: what, done/total, percent, rate and time left, redrawn in place, and a
    newline at the end so the summary starts on its own line."""
    stream = _Terminal()
    line = ProgressLine("rows", stream=stream)
    line.update("checkpoints", 0, 10)
    line.update("checkpoints", 10, 10)
    line.close()
    text = stream.getvalue()
    assert text.startswith("\rcheckpoints: 0/10 rows  0%")
    assert "\rcheckpoints: 10/10 rows  100%" in text
    assert text.endswith("\n")


def test_progress_line_is_silent_when_piped_or_quiet():
    """Not a terminal, or --quiet: nothing at all."""
    for stream, quiet in ((io.StringIO(), False), (_Terminal(), True)):
        line = ProgressLine("pages", quiet=quiet, stream=stream)
        line.update("backup", 5, 10)
        line.close()
        assert stream.getvalue() == ""


def test_durations_read_as_people_write_them():
    """42s, 3m05s, 2h01m."""
    assert [format_duration(s) for s in (42, 185, 7260)] == ["42s", "3m05s", "2h01m"]
