"""The ``binlog-bridge`` command: one entry point, one sub-command per task.

Each sub-command lives in its own module here and exposes
``add_parser(subparsers) -> argparse.ArgumentParser``; the parser's ``func``
default is called with the parsed arguments and returns the exit status.
User errors (:class:`bridge.errors.UserError`) print one line, no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from bridge import __version__
from bridge.errors import BridgeError, UserError

# Sub-command name -> module under bridge.cli. Imported lazily so that
# `binlog-bridge ctl` does not pay for what `binlog-bridge meta` needs.
SUBCOMMANDS: dict[str, str] = {
    "meta": "bridge.cli.meta",
    "pump": "bridge.cli.pump",
    "drainer": "bridge.cli.drainer",
    "ctl": "bridge.cli.ctl",
    "bench": "bridge.cli.bench",
    "load": "bridge.cli.load",
    "diff": "bridge.cli.diff",
    "replay": "bridge.cli.replay",
    "demo": "bridge.cli.demo",
    "consume": "bridge.cli.consume",
    "capture": "bridge.cli.capture",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="binlog-bridge",
        description="Change-stream system: pumps store binlog, a drainer merges it into sinks.",
    )
    parser.add_argument("--version", action="version", version=f"binlog-bridge {__version__}")
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"], help="default: info"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in SUBCOMMANDS.values():
        importlib.import_module(module_name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
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
