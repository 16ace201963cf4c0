"""The ``checkpointd`` command line. Each command lives in its own module with a
``register(commands)`` that adds its parser and sets ``handler(args, parser) -> int``."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from checkpointd import __version__
from checkpointd.cli import import_cmd, interrupts, runs, serve, store_cmd

__all__ = ["main"]


def _version(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    print(f"checkpointd {__version__}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The whole command line, every command registered."""
    parser = argparse.ArgumentParser(
        prog="checkpointd", description="A durability sidecar for AI agents, served over gRPC."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("version", help="print the version and exit").set_defaults(handler=_version)
    serve.register(commands)
    interrupts.register(commands)
    runs.register(commands)
    store_cmd.register(commands)
    import_cmd.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``checkpointd`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.handler(args, parser)
    return code
