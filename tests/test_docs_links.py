"""Every relative link of the documentation reaches a file that exists, and a link to a
heading (``guide.md#a-heading``) reaches a heading of that file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The documents a reader moves between: the README, the guides, the contributors' page, the
#: benchmarks' page, and the pages of the Node.js client and the Kubernetes examples.
DOCUMENTS = sorted(
    [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "SECURITY.md",
        ROOT / "bench" / "README.md",
        ROOT / "clients" / "node" / "README.md",
        ROOT / "deploy" / "kubernetes" / "README.md",
        *(ROOT / "docs").glob("*.md"),
    ]
)

_FENCE = re.compile(r"^(```|~~~).*?^\1", flags=re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\]\(([^()\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", flags=re.MULTILINE)


def _prose(text: str) -> str:
    """``text`` without fenced code blocks (their lines kept, empty)."""
    return _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of ``path``'s headings, the second of a name with ``-1`` appended."""
    seen: dict[str, int] = {}
    found = set()
    for heading in _HEADING.findall(_prose(path.read_text())):
        slug = _slug(heading)
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def links(path: Path) -> list[str]:
    """The targets of ``path``'s Markdown links and images, outside code."""
    prose = _CODE_SPAN.sub("", _prose(path.read_text()))
    return _LINK.findall(prose)


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken(path: Path) -> list[str]:
    """Each relative link of ``path`` whose file, or whose heading, is not there."""
    problems = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{target}: no {_shown(dest)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{target}: no heading #{anchor} in {_shown(dest)}")
    return problems


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_reach_their_files_and_headings(path: Path) -> None:
    assert broken(path) == []


def test_the_check_finds_a_broken_link(tmp_path: Path) -> None:
    """A missing file and a missing heading are both reported; a good link is not."""
    (tmp_path / "guide.md").write_text("# Guide\n\n## A `code` heading, here\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](guide.md#a-code-heading-here) [gone](gone.md) [nowhere](guide.md#nowhere)\n"
        "```\n[in code](not-checked.md)\n```\n"
    )
    assert [problem.split(":")[0] for problem in broken(page)] == [
        "gone.md",
        "guide.md#nowhere",
    ]


def test_the_readme_points_to_every_guide() -> None:
    """The README's table of contents and docs/README.md name every guide under docs/."""
    readme = set(links(ROOT / "README.md"))
    index = set(links(ROOT / "docs" / "README.md"))
    for guide in (ROOT / "docs").glob("*.md"):
        if guide.name == "README.md":
            continue
        assert f"docs/{guide.name}" in {t.partition("#")[0] for t in readme}, guide.name
        assert guide.name in {t.partition("#")[0] for t in index}, guide.name
