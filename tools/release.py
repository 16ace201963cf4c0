"""The release version: one source, and the copies that must say the same.

``pyclient/checkpointd_client/_version.py`` is where the version is chosen. The server package,
its exact pin of the client, the npm package (and its lock), the image's label, the Kubernetes
manifests and the docs that name a built artifact carry copies, since each is read by a tool
that cannot import Python (setuptools' static read, npm, Docker, kubectl) or is shipped alone
(the client's sdist cannot reach a file outside ``pyclient/``).

    python tools/release.py            # print the version
    python tools/release.py --check    # exit 1, naming each copy that differs
    python tools/release.py set 0.2.0  # write the version into the source and every copy

``--check`` also wants a CHANGELOG.md section for the version.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "pyclient" / "checkpointd_client" / "_version.py"
_SOURCE_RE = re.compile(r'^__version__ = "(?P<v>[^"]+)"$', re.MULTILINE)
# X.Y.Z: a PEP 440 release that npm's semver reads the same way (0.2.0rc1 is not semver).
_VERSION_RE = re.compile(r"^\d+\.\d+\.\d+$")
CHANGELOG = ROOT / "CHANGELOG.md"


@dataclass(frozen=True)
class Copy:
    """A file that carries the version: each match of ``pattern`` has it in group ``v``."""

    path: str
    pattern: str
    count: int = 1

    def regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern, re.MULTILINE)


COPIES = (
    Copy("server/checkpointd/__init__.py", r'^__version__ = "(?P<v>[^"]+)"$'),
    Copy("pyproject.toml", r'"checkpointd-client==(?P<v>[^"]+)"'),
    Copy("clients/node/package.json", r'^  "version": "(?P<v>[^"]+)",$'),
    # The lock's own entry, twice: its header and packages[""].
    Copy(
        "clients/node/package-lock.json",
        r'"name": "checkpointd-client",\n {2,6}"version": "(?P<v>[^"]+)"',
        2,
    ),
    Copy("clients/node/README.md", r"checkpointd-client-(?P<v>[0-9][^ ]*)\.tgz"),
    Copy("Dockerfile", r"checkpointd:(?P<v>[0-9][^ \n]*)", 2),
    Copy("Dockerfile", r'org\.opencontainers\.image\.version="(?P<v>[^"]+)"'),
    Copy("deploy/kubernetes/sqlite/deployment.yaml", r"image: checkpointd:(?P<v>\S+)$"),
    Copy("deploy/kubernetes/postgres/deployment.yaml", r"image: checkpointd:(?P<v>\S+)$"),
    Copy("deploy/kubernetes/README.md", r"checkpointd:(?P<v>[0-9][^`\s]*)", 2),
    Copy("docs/operations.md", r"docker build -t checkpointd:(?P<v>\S+) \."),
)


def version(root: Path = ROOT) -> str:
    """The version, as the source under ``root`` says."""
    source = root / SOURCE.relative_to(ROOT)
    match = _SOURCE_RE.search(source.read_text())
    if match is None:
        raise SystemExit(f'{source}: no __version__ = "..." line')
    return match["v"]


def differences(expected: str, root: Path = ROOT) -> list[str]:
    """Each copy under ``root`` that does not say ``expected``, or is not where it is looked
    for, and a CHANGELOG.md without a section for it."""
    found: list[str] = []
    for copy in COPIES:
        text = (root / copy.path).read_text()
        seen = [m["v"] for m in copy.regex().finditer(text)]
        if len(seen) != copy.count:
            found.append(f"{copy.path}: {len(seen)} copies of the version, expected {copy.count}")
        found.extend(f"{copy.path}: says {v}, not {expected}" for v in seen if v != expected)
    changelog = (root / CHANGELOG.relative_to(ROOT)).read_text()
    if not re.search(rf"^## \[{re.escape(expected)}\]", changelog, re.MULTILINE):
        found.append(f"CHANGELOG.md: no '## [{expected}]' section")
    return found


def _replace(text: str, pattern: re.Pattern[str], new: str) -> str:
    def one(match: re.Match[str]) -> str:
        start, end = match.span("v")
        whole_start = match.start()
        return match.group(0)[: start - whole_start] + new + match.group(0)[end - whole_start :]

    return pattern.sub(one, text)


def set_version(new: str, root: Path = ROOT) -> None:
    """Write ``new`` into the source and every copy under ``root`` (CHANGELOG.md is written by
    hand)."""
    if not _VERSION_RE.match(new):
        raise SystemExit(f"{new!r} is not a release version (X.Y.Z)")
    source = root / SOURCE.relative_to(ROOT)
    source.write_text(_replace(source.read_text(), _SOURCE_RE, new))
    for copy in COPIES:
        path = root / copy.path
        path.write_text(_replace(path.read_text(), copy.regex(), new))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when a copy differs")
    sub = parser.add_subparsers(dest="command")
    setter = sub.add_parser("set", help="write a new version everywhere")
    setter.add_argument("version")
    args = parser.parse_args()
    if args.command == "set":
        set_version(args.version)
    current = version()
    if args.check:
        stale = differences(current)
        if stale:
            print(f"the release version is {current}, but:", *stale, sep="\n  ", file=sys.stderr)
            return 1
    print(current)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
