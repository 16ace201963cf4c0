"""``checkpointd serve``: run the server.

Each flag has a ``CHECKPOINTD_*`` environment equivalent; the flag wins. The flags are made
from :data:`checkpointd.config.OPTIONS`, the one table of settings. Configuration mistakes
end with one line on stderr saying what to fix, and exit status 2 (bad flags) or 1 (cannot
start).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable
from typing import Any, TypeVar

from checkpointd.cli.output import fail
from checkpointd.config import (
    DEFAULT_LISTEN,
    LOG_LEVELS,
    OPTIONS,
    PG_POOLERS,
    PG_SCHEMA_RE,
    Option,
    Settings,
    address_list,
    boolean,
    default_store_url,
    redact_dsn,
)
from checkpointd.logging_setup import LOG_FORMATS, configure_logging

__all__ = ["DESCRIPTION", "HELP", "register"]

HELP = "run the server"
DESCRIPTION = (
    "Run the checkpointd gRPC server. Every flag has a CHECKPOINTD_* environment variable; the "
    "flag wins."
)

T = TypeVar("T")


def _env(name: str, parse: Callable[[str], T], default: T) -> T:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return parse(raw)
    except ValueError as exc:
        raise SystemExit(f"checkpointd: error: {name}={raw!r} is not valid: {exc}") from None


def _help_text(text: str) -> str:
    """``text`` shown as is in a help string (argparse expands ``%`` there)."""
    return text.replace("%", "%%")


def _checked(parse: Callable[[str], T]) -> Callable[[str], T]:
    """Adapt a parser for argparse, whose error message then names the flag."""

    def parse_arg(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None

    parse_arg.__name__ = getattr(parse, "__name__", "value")
    return parse_arg


def _default(option: Option) -> Any:
    """The option's value before any flag: its variables' (the first one preferred), else its
    default. A malformed variable ends the start, naming the variable."""
    if option.repeatable:
        return None  # the variable is read once the flags are known: a flag replaces it
    value = default_store_url() if option.setting == "store" else option.default
    parse: Callable[[str], Any] = option.parse or str
    for name in reversed(option.env):
        value = _env(name, parse, value)
    return value


def _plain(markdown: str) -> str:
    """Table text as ``--help`` shows it: without Markdown's backticks."""
    return markdown.replace("`", "")


def _shown_default(option: Option, value: Any) -> str:
    """The default as ``--help`` shows it (the value a variable set, if any); never the
    password of a URL. Escaped for argparse, except its own placeholder."""
    if option.setting in ("store", "pg_listen_dsn") and value:
        return _help_text(redact_dsn(value))
    if option.shown_default is not None or value is None or isinstance(value, bool):
        return _help_text(_plain(option.default_text()))
    return "%(default)s"


def _add(group: argparse._ActionsContainer, option: Option) -> None:
    value = _default(option)
    where = option.env[0] + (", comma-separated" if option.repeatable else "")
    shown = _plain(option.default_text()) if option.repeatable else _shown_default(option, value)
    help_text = f"{_help_text(_plain(option.help))} [{where}; default: {shown}]"
    kwargs: dict[str, Any] = {"help": help_text, "dest": option.setting}
    if option.repeatable:
        kwargs["action"] = "append"
    elif option.parse is boolean:
        kwargs.update(action="store_true", default=value)
    else:
        kwargs["default"] = value
        if option.choices:
            kwargs["choices"] = option.choices
        elif option.parse is not None:
            kwargs["type"] = _checked(option.parse)
        if not option.choices:
            kwargs["metavar"] = option.metavar or option.flags[0][2:].upper().replace("-", "_")
    group.add_argument(*option.flags, **kwargs)


def register(serve: argparse.ArgumentParser) -> None:
    """Fill ``serve``'s parser: one flag per option of the table that has one."""
    serve.set_defaults(handler=run)
    security = serve.add_argument_group(
        "security",
        "Tokens come from a file or CHECKPOINTD_AUTH_TOKEN, never from the command line. "
        "TLS applies to TCP listeners; Unix sockets are guarded by their file permissions.",
    )
    for option in OPTIONS:
        if option.flags:
            _add(security if option.security else serve, option)


def _settings(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Settings:
    values: dict[str, Any] = {
        option.setting: getattr(args, option.setting)
        for option in OPTIONS
        if option.flags and option.setting is not None
    }
    no_addresses: list[str] = []
    listen: list[str] = args.listen or _env("CHECKPOINTD_LISTEN", address_list, no_addresses)
    store: str = args.store
    if not store.startswith(("sqlite://", "postgresql://", "postgres://")):
        parser.error(f"--store {redact_dsn(store)!r} must start with sqlite:// or postgresql://")
    if store.startswith("sqlite://") and not store.removeprefix("sqlite://"):
        parser.error(
            "--store sqlite:// needs a file path, e.g. sqlite:///var/lib/checkpointd/store.db"
        )
    if not PG_SCHEMA_RE.fullmatch(args.pg_schema):
        parser.error(
            f"--pg-schema {args.pg_schema!r} must be a SQL identifier "
            "(letters, digits, _; not starting with a digit; at most 63 characters)"
        )
    if args.pg_pooler not in PG_POOLERS:
        parser.error(f"CHECKPOINTD_PG_POOLER must be one of {', '.join(PG_POOLERS)}")
    listen_dsn: str | None = args.pg_listen_dsn or None
    if listen_dsn is not None and not listen_dsn.startswith(("postgresql://", "postgres://")):
        parser.error(f"--pg-listen-dsn {redact_dsn(listen_dsn)!r} must start with postgresql://")
    if args.log_level not in LOG_LEVELS:
        parser.error(f"CHECKPOINTD_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}")
    if args.log_format not in LOG_FORMATS:
        parser.error(f"CHECKPOINTD_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}")
    values.update(
        listen=tuple(listen) or (DEFAULT_LISTEN,),
        pg_listen_dsn=listen_dsn,
        auth_token=os.environ.get("CHECKPOINTD_AUTH_TOKEN") or None,
    )
    return Settings(**values)


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (a dependency on Linux): less CPU per call
    on the event loop; None (asyncio's own loop) without it."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Serve until SIGTERM/SIGINT; 1 when the server cannot start."""
    settings = _settings(args, parser)
    configure_logging(settings.log_level, settings.log_format)
    from checkpointd.app import StartupError, serve

    try:
        with asyncio.Runner(loop_factory=_loop_factory()) as runner:
            runner.run(serve(settings))
    except StartupError as exc:
        return fail(exc)
    return 0
