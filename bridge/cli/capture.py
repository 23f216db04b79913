"""``binlog-bridge capture --config FILE``: the source's row binlog -> the pumps (docs/capture.md).

The file holds ``[capture]`` (and optionally ``[pump-client]``); flags
override single keys. The source password comes from
``BRIDGE_UPSTREAM_PASSWORD`` when the DSN has none, and is never logged.
SIGTERM/SIGINT stop after the transaction being written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bridge import config as bridge_config
from bridge.startup import signal_handlers


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "capture",
        help="capture an existing MySQL/MariaDB's row binlog (with an initial snapshot) into the pumps",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, type=Path, metavar="FILE", help="TOML with [capture]")
    parser.add_argument("--data-dir", default=None, metavar="DIR", help="overrides capture.data-dir")
    parser.add_argument("--meta", default=None, metavar="ADDR", help="overrides capture.meta")
    parser.add_argument(
        "--status-addr", default=None, metavar="HOST:PORT", help="overrides capture.status-addr"
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from bridge.apps.capture import CaptureApp, CaptureFile

    overrides = {
        "capture.data-dir": args.data_dir,
        "capture.meta": args.meta,
        "capture.status-addr": args.status_addr,
    }
    app = CaptureApp(bridge_config.load(CaptureFile, args.config, overrides))

    with signal_handlers(lambda _signum, _frame: app.stop()):
        return app.run()
