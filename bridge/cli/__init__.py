"""The ``binlog-bridge`` command: one entry point, one sub-command per task.

Each sub-command lives in its own module and exposes
``add_parser(subparsers) -> argparse.ArgumentParser``; the parser's ``func``
default is called with the parsed arguments and returns the exit status.
User errors (:class:`bridge.errors.UserError`) print one line, no traceback.
The global flags (``--log-level``) are accepted before the sub-command and
after it, at any depth (``binlog-bridge ctl nodes --log-level debug``).

Every command, the kernel's own (``meta``, ``ctl``...) and those of the layers above it
(``pump``, ``drainer``, ``replay``), is registered in the entry-point group
``binlog_bridge.commands`` of pyproject.toml (``pump = "pump.cli:add_parser"``), the one way
plug-ins (sinks, checkpoints, commands, benchmarks) are registered; each is imported when the
parser is built, and ``bridge`` never names the layers above it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from bridge import __version__
from bridge.cli.text import plain_help, sub_parsers
from bridge.errors import BridgeError, UserError
from bridge.startup import LOG_LEVELS, configure_logging

COMMANDS_GROUP = "binlog_bridge.commands"  # entry points: name = "module:add_parser"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="binlog-bridge",
        description="Change-stream system: pumps store binlog, a drainer merges it into sinks.",
    )
    parser.add_argument("--version", action="version", version=f"binlog-bridge {__version__}")
    parser.add_argument("--log-level", default="info", choices=LOG_LEVELS, help="default: info")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for entry in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        entry.load()(sub)
    _accept_global_flags(parser)
    plain_help(parser)  # the modules' docstrings are the descriptions; --help shows no reST markup
    return parser


def _accept_global_flags(parser: argparse.ArgumentParser) -> None:
    """Let every sub-command (and theirs) take ``--log-level`` too; given there, it wins.

    The default is suppressed below the top, so a sub-command without the
    flag leaves the top-level value (or its default) in place.
    """
    for child in sub_parsers(parser):
        if not any("--log-level" in a.option_strings for a in child._actions):
            child.add_argument(
                "--log-level", choices=LOG_LEVELS, default=argparse.SUPPRESS, help="as before the command"
            )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        status: int = args.func(args)
    except UserError as exc:
        print(f"binlog-bridge {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except BridgeError as exc:
        print(f"binlog-bridge {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return status


if __name__ == "__main__":
    sys.exit(main())
