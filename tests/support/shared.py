"""A directory built once per test run, however many pytest-xdist workers ask for it.

Each worker is a process with session fixtures of its own; something costly and fixed (a
download, an unpacked archive) is built by the first worker that needs it, under an
exclusive ``flock``, in the run's base temporary directory that all workers share, and the
others find it there. A run without xdist builds it in its own base temporary directory.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

__all__ = ["built_once"]

_DONE = ".built"


def _run_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The base temporary directory of the whole run: a worker's own base is a child of it
    (``pytest-N/popen-gw0``); without xdist the parent would be shared across runs."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]
) -> Path:
    """The directory ``name``, filled by ``build`` (given the empty directory) the first time
    any worker of this run asks. A build that raises (a skip too) leaves nothing behind, so
    the next caller builds again."""
    root = _run_root(tmp_path_factory)
    target = root / name
    with (root / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not (target / _DONE).exists():
                shutil.rmtree(target, ignore_errors=True)
                target.mkdir()
                try:
                    build(target)
                except BaseException:
                    shutil.rmtree(target, ignore_errors=True)
                    raise
                (target / _DONE).touch()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return target
