"""``scripts/compose-local [--profile spark] [--seconds N] [--keep] [--scrape FILE]``.

Reads docker-compose.yml, starts the local stand-ins of its servers and every
project service's own command as a local process in depends_on order, and
exits with the status of the file's own ``verify`` command (0: the downstream
equals the upstream). ``--scrape FILE`` writes, before stopping, the
``/metrics`` text of every Prometheus target that runs here, and what the
local Prometheus says of its targets and of every query of the dashboards.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from composelocal.compose import ComposeError, load
from composelocal.infra import LocalServices
from composelocal.run import LOCAL_ENV, LocalRun

ROOT = Path(__file__).resolve().parents[2]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/compose-local",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--file", type=Path, default=ROOT / "docker-compose.yml", help="the compose file")
    parser.add_argument("--profile", action="append", default=[], help="enable a profile (repeatable)")
    parser.add_argument("--seconds", type=int, default=10, help="the workload's length (BRIDGE_LOAD_SECONDS)")
    parser.add_argument(
        "--rate", type=int, default=100, help="the workload's transactions/s (BRIDGE_LOAD_RATE)"
    )
    parser.add_argument(
        "--run-dir", type=Path, default=None, help="logs, configs, volumes (default: a temp dir)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the run folder")
    parser.add_argument(
        "--scrape",
        type=Path,
        default=None,
        help="write metrics, targets and dashboard query results here (JSON)",
    )
    parser.add_argument("--timeout", type=float, default=240.0, help="longest wait for one service")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    env = {
        **os.environ,
        **LOCAL_ENV,
        "BRIDGE_LOAD_SECONDS": str(args.seconds),
        "BRIDGE_LOAD_RATE": str(args.rate),
    }
    try:
        compose = load(args.file, env, frozenset(args.profile))
    except ComposeError as exc:
        print(f"compose-local: {args.file}: {exc}", file=sys.stderr)
        return 2
    run_dir = args.run_dir or Path(tempfile.mkdtemp(prefix="compose-local-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    run = LocalRun(compose, run_dir, timeout=args.timeout)
    infra = LocalServices(ROOT, run_dir / "services", run.say)
    started = time.monotonic()
    status = 1
    try:
        status = run.execute(infra)
        if args.scrape:
            args.scrape.write_text(json.dumps(run.report(), indent=1))
    except RuntimeError as exc:
        run.say(f"failed: {exc}")
    finally:
        run.stop()
        infra.stop()
    remove = not args.keep and status == 0 and args.run_dir is None
    if remove:
        shutil.rmtree(run_dir, ignore_errors=True)
    run.say(closing_line(status, time.monotonic() - started, run_dir, remove))
    return status


def closing_line(status: int, seconds: float, run_dir: Path, removed: bool) -> str:
    """The last line: verify's status and the run folder as it now is (kept, or removed: how to keep it)."""
    folder = f"run folder {run_dir} removed (--keep keeps it)" if removed else f"run folder {run_dir} kept"
    return f"verify exited {status} after {seconds:.0f}s; {folder}"


if __name__ == "__main__":
    sys.exit(main())
