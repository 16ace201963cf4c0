"""How a command joins the command line. Each command's module is a :class:`CommandModule`:
``main`` makes the command's parser from its ``HELP`` and ``DESCRIPTION`` and hands it to its
``register``, which adds the arguments and the handler (:func:`add_command` for each action of
a command of several, such as ``runs list``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Protocol, TypeAlias

__all__ = ["CommandModule", "Commands", "Handler", "add_actions", "add_command"]

# A string: argparse's class cannot be subscripted at run time.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
#: What ``main`` calls with the parsed arguments; its result is the exit status.
Handler = Callable[[argparse.Namespace, argparse.ArgumentParser], int]


class CommandModule(Protocol):
    """A command's module: the line ``checkpointd --help`` lists it with, the text atop its
    own ``--help``, and what fills its parser."""

    HELP: str
    DESCRIPTION: str

    def register(self, parser: argparse.ArgumentParser) -> None: ...


def add_command(
    commands: Commands, name: str, handler: Handler, *, help: str, description: str | None = None
) -> argparse.ArgumentParser:
    """Add the command (or action) ``name``, run by ``handler``; its parser, for its
    arguments."""
    parser = commands.add_parser(name, help=help, description=description)
    parser.set_defaults(handler=handler)
    return parser


def add_actions(parser: argparse.ArgumentParser) -> Commands:
    """Make ``parser``'s first argument one of its actions; what the actions are added to."""
    return parser.add_subparsers(dest="action", required=True, metavar="ACTION")
