"""Read a Dockerfile (stages, instructions) and its .dockerignore, for tests that check what
the image is made of without a Docker engine."""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Instruction", "Stage", "dockerignore_filter", "key_values", "parse_dockerfile"]


@dataclass
class Instruction:
    """One Dockerfile instruction: its keyword and its arguments, continuations joined."""

    keyword: str
    args: str


@dataclass
class Stage:
    """One FROM ... section."""

    base: str
    name: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        """The arguments of every instruction with this keyword, in order."""
        return [i.args for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Split a Dockerfile into stages of instructions (comments dropped, lines joined)."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    assert not current, "the Dockerfile ends inside a continued line"
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else ""
            stages.append(Stage(base=words[0], name=name))
        else:
            assert stages, f"{keyword} before the first FROM"
            stages[-1].instructions.append(Instruction(keyword, " ".join(args.split())))
    return stages


def key_values(args: str) -> dict[str, str]:
    """The pairs of an ``ENV a=1 b=2`` / ``ARG a=1`` instruction."""
    pairs: dict[str, str] = {}
    for word in shlex.split(args):
        key, _, value = word.partition("=")
        pairs[key] = value
    return pairs


def dockerignore_filter(context: Path) -> Callable[[str, list[str]], set[str]]:
    """A ``shutil.copytree`` ignore function for the patterns in .dockerignore."""
    patterns = [
        line.strip()
        for line in (context / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(directory: str, names: list[str]) -> set[str]:
        rel_dir = Path(directory).relative_to(context)
        out: set[str] = set()
        for name in names:
            rel = (rel_dir / name).as_posix()
            for pattern in patterns:
                bare = pattern.removeprefix("**/")
                if fnmatch.fnmatch(rel, pattern) or (
                    pattern.startswith("**/") and fnmatch.fnmatch(name, bare)
                ):
                    out.add(name)
        return out

    return ignored
