"""The packaged schema migrations of both backends (``migrations/<backend>_NNNN_name.sql``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import Final, Literal

from checkpointd.store.base import StoreError

__all__ = ["Migration", "load_migrations"]

_FILE_NAME: Final = re.compile(r"(sqlite|postgres)_(\d{4})_([a-z0-9_]+)\.sql")


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration script: its version, file name, short name and SQL text."""

    version: int
    file_name: str
    name: str
    sql: str


def load_migrations(backend: Literal["sqlite", "postgres"]) -> tuple[Migration, ...]:
    """The backend's packaged migrations, by version: distinct, ascending from 1. A version
    may be missing (numbers are handed out ahead of the changes that take them); a store never
    applies one out of order unless such a gap is filled later."""
    folder = resources.files("checkpointd.store").joinpath("migrations")
    found: list[Migration] = []
    for entry in folder.iterdir():
        match = _FILE_NAME.fullmatch(entry.name)
        if match is None or match[1] != backend:
            continue
        text = entry.read_text(encoding="utf-8")
        found.append(Migration(int(match[2]), entry.name, match[3], text))
    found.sort(key=lambda migration: migration.version)
    versions = [m.version for m in found]
    if not versions or versions[0] != 1 or len(set(versions)) != len(versions):
        raise StoreError(
            f"the packaged {backend} migrations must be numbered 1, 2, 3, ... without "
            f"repeats; found {versions}"
        )
    return tuple(found)
