"""The ``checkpointd`` command line. Each command lives in its own module (a
:class:`~checkpointd.cli.parsers.CommandModule`): its ``HELP`` and ``DESCRIPTION``, and a
``register(parser)`` that adds its arguments and sets ``handler(args, parser) -> int``.

A command line that names its command imports that command's module only: ``serve`` runs
in every pod, and the client-side commands' modules (``interrupts``, ``runs``, ``import``...)
would be memory it holds for nothing."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import cast

from checkpointd import __version__
from checkpointd.cli.parsers import CommandModule, add_command

__all__ = ["main"]

#: Each command and the module that registers it, in the order ``--help`` lists them.
_COMMANDS = {
    "serve": "checkpointd.cli.serve",
    "interrupts": "checkpointd.cli.interrupts",
    "runs": "checkpointd.cli.runs",
    "store": "checkpointd.cli.store_cmd",
    "import": "checkpointd.cli.import_cmd",
}


def _version(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    print(f"checkpointd {__version__}")
    return 0


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, every command registered (or only the command ``only``)."""
    parser = argparse.ArgumentParser(
        prog="checkpointd", description="A durability sidecar for AI agents, served over gRPC."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_command(commands, "version", _version, help="print the version and exit")
    for name, module_name in _COMMANDS.items():
        if only is None or name == only:
            module = cast(CommandModule, importlib.import_module(module_name))
            module.register(
                commands.add_parser(name, help=module.HELP, description=module.DESCRIPTION)
            )
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` starts with, if any (``-h serve`` still shows every command)."""
    return argv[0] if argv and argv[0] in _COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``checkpointd`` console script."""
    args_list = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command(args_list))
    args = parser.parse_args(args_list)
    code: int = args.handler(args, parser)
    return code
