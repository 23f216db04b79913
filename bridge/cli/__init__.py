"""The ``binlog-bridge`` command: one entry point, one sub-command per task.

Each sub-command lives in its own module and exposes
``add_parser(subparsers) -> argparse.ArgumentParser``; the parser's ``func``
default is called with the parsed arguments and returns the exit status.
Every command follows one exit-status convention (docs/operations.md, "Exit
status and error lines"): 0 success, 1 the work failed or found a difference
(any other :class:`bridge.errors.BridgeError`), 2 usage or configuration
error (:class:`bridge.errors.UserError`, argparse), 3 a dependency could not be
reached (:class:`bridge.errors.Unreachable`), 130 interrupted, 141 standard
output closed by its reader (``| head``). An error prints one line,
``binlog-bridge COMMAND: error: MESSAGE``, no traceback (the log gets it at
debug level).
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
import logging
import os
import select
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from bridge import __version__
from bridge.cli.text import plain_help, sub_parsers
from bridge.errors import BridgeError, Unreachable, UserError
from bridge.startup import LOG_LEVELS, configure_logging

log = logging.getLogger(__name__)

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130
EXIT_STDOUT_CLOSED = 141  # 128 + SIGPIPE: what a shell reports for a C tool whose reader went away

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
    try:
        status = _run(argv)
        sys.stdout.flush()  # what is still buffered meets a closed pipe here, not at exit
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # a socket's, not ours to hide
        _discard_stdout()
        return EXIT_STDOUT_CLOSED
    return status


def _run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.log_level)
    try:
        status: int = args.func(args)
    except BridgeError as exc:
        log.debug("%s failed", args.command, exc_info=True)
        print(f"binlog-bridge {args.command}: error: {exc}", file=sys.stderr)
        return exit_status(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return status


def exit_status(exc: BridgeError) -> int:
    """The exit status for an error that ended a command: 3 unreachable, 2 the user's to fix, else 1."""
    if isinstance(exc, Unreachable):
        return EXIT_UNREACHABLE
    if isinstance(exc, UserError):
        return EXIT_USAGE
    return EXIT_FAILED


def _stdout_closed() -> bool:
    """True when standard output is a pipe or socket whose reader has gone (POLLERR)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
