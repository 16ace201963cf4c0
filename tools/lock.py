"""Refresh the locks under requirements/ from their .in files: ``make lock``.

The libraries declare ranges (pyproject.toml, pyclient/pyproject.toml); what this project's
own environments install is fixed here, with every file's hash, so a fresh machine builds what
the last ``make lock`` resolved. Nothing else resolves: ``make install``, ``make run``,
``make test-compat``, CI and the Dockerfile install these files with ``--require-hashes``.

Each lock is a ``uv pip compile`` of its .in file. ``serve``, ``dev``, ``gen`` and ``tools`` are
universal (any platform, Python 3.11 and newer, as the image and a developer's machine differ);
the compatibility environments are resolved for this Python alone, ``compat-floor`` with
``--resolution lowest-direct``: every range at its floor.

    python tools/lock.py             # all of them, newest versions within the ranges
    python tools/lock.py serve dev   # just these
    python tools/lock.py --check     # exit 1 when a .in file changed after its lock
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements"
PYTHON_VERSION = "3.11"
# The project's own packages are installed from the tree (editable), never from a lock.
OWN_PACKAGES = ("checkpointd", "checkpointd-client")
# Written into each lock: the hash of the .in file it was made from (--check compares).
_SOURCE_MARK = "# source sha256: "


@dataclass(frozen=True)
class Lock:
    name: str
    universal: bool = True
    resolution: str = "highest"

    @property
    def source(self) -> Path:
        return REQUIREMENTS / f"{self.name}.in"

    @property
    def output(self) -> Path:
        return REQUIREMENTS / f"{self.name}.txt"


# In order: dev.in is constrained by serve.txt and build.txt, so they come first.
LOCKS = (
    Lock("tools"),
    Lock("serve"),
    Lock("build"),
    Lock("dev"),
    Lock("gen"),
    Lock("compat-floor", universal=False, resolution="lowest-direct"),
    Lock("compat-langgraph-api", universal=False),
)


def _inputs_digest(lock: Lock) -> str:
    """The hash of what the lock was made from: its .in file, the files it includes (``-r``)
    or is constrained by (``-c``), and the pyproject.toml of each package it installs
    from the tree (``-e``), whose ranges the resolution kept to."""
    digest = hashlib.sha256()
    pending = [lock.source]
    while pending:
        path = pending.pop()
        text = path.read_text()
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + text.encode())
        if path.suffix != ".in":
            continue
        for line in text.splitlines():
            option, _, value = line.partition(" ")
            if option in ("-r", "-c"):  # relative to the file, as uv reads them
                pending.append(path.parent / value.strip())
            elif option == "-e":
                pending.append(ROOT / value.strip().partition("[")[0] / "pyproject.toml")
    return digest.hexdigest()


def _uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        raise SystemExit("uv is not installed: make install puts it in .venv")
    return found


def compile_lock(lock: Lock) -> None:
    """``uv pip compile`` the lock's .in file into its .txt file, run from the project root:
    an .in file's ``-e`` paths are relative to it, its ``-r`` and ``-c`` to the file."""
    args = [
        _uv(),
        "pip",
        "compile",
        str(lock.source.relative_to(ROOT)),
        "--output-file",
        str(lock.output.relative_to(ROOT)),
        "--python-version",
        PYTHON_VERSION,
        "--generate-hashes",
        "--resolution",
        lock.resolution,
        "--custom-compile-command",
        f"make lock LOCKS={lock.name}",
        "--quiet",
        *(arg for name in OWN_PACKAGES for arg in ("--no-emit-package", name)),
    ]
    if lock.universal:
        args.append("--universal")
    subprocess.run(args, cwd=ROOT, check=True)
    text = lock.output.read_text()
    lock.output.write_text(f"{_SOURCE_MARK}{_inputs_digest(lock)}\n{text}")


def stale(lock: Lock) -> bool:
    """Whether the lock was made from other .in files than today's."""
    if not lock.output.is_file():
        return True
    first = lock.output.read_text().partition("\n")[0]
    return first != f"{_SOURCE_MARK}{_inputs_digest(lock)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="the locks to refresh (default: all)")
    parser.add_argument("--check", action="store_true", help="fail when a lock is stale")
    args = parser.parse_args()
    by_name = {lock.name: lock for lock in LOCKS}
    unknown = [name for name in args.names if name not in by_name]
    if unknown:
        parser.error(f"unknown lock(s) {', '.join(unknown)}; the locks: {', '.join(by_name)}")
    chosen = [by_name[name] for name in args.names] if args.names else list(LOCKS)
    if args.check:
        found = [lock.output.name for lock in chosen if stale(lock)]
        if found:
            print(
                "a lock is older than its .in file; run `make lock`:",
                *found,
                sep="\n  ",
                file=sys.stderr,
            )
            return 1
        return 0
    for lock in chosen:
        print(f"locking {lock.output.relative_to(ROOT)}", flush=True)
        compile_lock(lock)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
