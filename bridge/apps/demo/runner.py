"""``binlog-bridge demo``: a whole cluster, a workload, catch-up and a diff, in one command.

1. A data dir (a fresh temporary one unless given; a given one must be empty).
2. The cluster (:mod:`bridge.apps.demo.cluster`): meta, ``pumps`` pumps, a
   drainer with the sqlite and file sinks, each waited for by its ready line.
   They run with a cluster token (:mod:`bridge.auth`): the one in
   ``BINLOG_BRIDGE_CLUSTER_TOKEN`` when set, else a random one made for the run. It
   is written into every config (mode 0600) and set in this process's environment, so
   the load, the catch-up and every child present it; a stranger's ghost pump or
   ``ctl`` call without it is refused (docs/security.md).
3. ``binlog-bridge load`` for ``seconds`` against the upstream (a SQLite file
   in the data dir by default), with one live progress line: the load's
   txn/s and rows/s, the drainer's lag (now minus its checkpoint's time).
4. When the load has stopped, a fresh TSO timestamp is the target: every
   transaction committed before it has a lower commit_ts. The demo waits
   until the drainer's checkpoint reaches it.
5. ``bridge.apps.diff.diff`` between the upstream and the sqlite sink.
6. The summary; the children are stopped (also on errors and signals), a
   temporary data dir is removed after a successful run unless ``keep``.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from bridge.apps.demo.cluster import Cluster, ClusterSpec, resolver_for
from bridge.apps.demo.errors import DataDirInUse, DemoError
from bridge.apps.demo.progress import LagSamples, LiveLine, catch_up_line, load_line
from bridge.apps.demo.signals import deferred, interruptible
from bridge.apps.demo.summary import DemoSummary
from bridge.apps.demo.workload import LoadProcess
from bridge.apps.diff import diff
from bridge.auth import TOKEN_ENV, resolve_token

log = logging.getLogger(__name__)

POLL_INTERVAL = 0.5
LOAD_GRACE = 120.0  # beyond --seconds: creating tables, finishing transactions in flight


@dataclass
class DemoOptions:
    seconds: float = 30.0
    data_dir: Path | None = None
    pumps: int = 3
    keep: bool = False
    upstream: str = ""  # default: sqlite:///<data dir>/upstream.db
    concurrency: int = 4
    catch_up_timeout: float = 300.0


def prepare_data_dir(given: Path | None) -> tuple[Path, bool]:
    """(the data dir, whether the demo made it as a temporary dir)."""
    if given is None:
        return Path(tempfile.mkdtemp(prefix="binlog-bridge-demo-")), True
    if given.exists() and (not given.is_dir() or any(given.iterdir())):
        raise DataDirInUse(f"--data-dir: {given} exists and is not an empty directory; give a new one")
    given.mkdir(parents=True, exist_ok=True)
    return given.resolve(), False


class DemoRun:
    """One run; :meth:`run` returns the summary or raises :class:`DemoError`."""

    def __init__(self, options: DemoOptions, data_dir: Path, out: TextIO, err: TextIO) -> None:
        self.options = options
        self.data_dir = data_dir
        self.out = out
        self.live = LiveLine(err)
        self.upstream = options.upstream or f"sqlite://{data_dir / 'upstream.db'}"
        token = demo_token()
        spec = ClusterSpec(
            data_dir, pumps=options.pumps, resolver=resolver_for(self.upstream), cluster_token=token
        )
        self.cluster = Cluster(spec)
        flags = ["--concurrency", str(options.concurrency)]
        meta = self.cluster.meta_addr
        self.load = LoadProcess(data_dir / "logs", meta, self.upstream, options.seconds, flags)
        self.lags = LagSamples()
        self.summary = DemoSummary(str(data_dir), self.upstream, self.cluster.downstream_dsn)
        self.summary.files = [
            "configs: *.toml (with the cluster token)",
            "logs: logs/",
            *(["upstream: upstream.db"] if not options.upstream else []),
            "downstream: drainer/sqlite/",
            "binlog files: drainer/binlog-files/",
        ]

    def run(self) -> DemoSummary:
        try:
            with interruptible():
                self._start_cluster()
                self._run_load()
                self._catch_up()
                self._diff()
        finally:
            with deferred():
                self.live.finish()
                self._stop_everything()
        return self.summary

    def _start_cluster(self) -> None:
        pumps = self.options.pumps
        self.live.message(f"starting meta, {pumps} pumps and a drainer under {self.data_dir}")
        self.cluster.start(on_ready=lambda name, line: self.live.message(f"  {name:8} {line}"))

    def _run_load(self) -> None:
        self.live.message(f"running binlog-bridge load for {self.options.seconds:g}s against {self.upstream}")
        started = time.monotonic()
        self.load.start()
        deadline = started + self.options.seconds + LOAD_GRACE
        while self.load.running:
            self.cluster.check()
            status = self.cluster.drainer_status()
            self.lags.add(status.get("lag_seconds") if status else None)
            self.live.update(load_line(time.monotonic() - started, self.load.progress(), self.lags.last))
            if time.monotonic() > deadline:
                raise self.load.process.failure(f"was still running {LOAD_GRACE:g}s after --seconds")
            time.sleep(POLL_INTERVAL)
        self.live.update(load_line(time.monotonic() - started, self.load.progress(), self.lags.last), True)
        self.live.finish()
        self._check_load_result()

    def _check_load_result(self) -> None:
        status = self.load.wait(timeout=10)
        result = self.load.result()
        self.summary.load = result
        self.summary.max_lag, self.summary.avg_lag = self.lags.max, self.lags.avg
        # Status 1 with given-up transactions is the load's own verdict on conflicts
        # (rolled back upstream, so nothing to replicate); anything else is a crash.
        if status != 0 and not (status == 1 and result.get("errors")):
            raise self.load.process.failure(f"exited with status {status}")

    def _catch_up(self) -> None:
        target = self.cluster.timestamp()
        self.summary.target_ts = target
        self.live.message(f"producers stopped; waiting for the drainer's checkpoint to reach {target}")
        started = time.monotonic()

        def show(status: dict[str, object] | None) -> None:
            if status is not None:
                checkpoint = int(str(status.get("checkpoint_ts") or 0))
                lag = status.get("lag_seconds")
                lag_value = float(lag) if isinstance(lag, int | float) else None
                self.live.update(catch_up_line(time.monotonic() - started, checkpoint, target, lag_value))

        final = self.cluster.wait_caught_up(target, self.options.catch_up_timeout, show)
        self.summary.catch_up_seconds = time.monotonic() - started
        self.summary.checkpoint_ts = int(final.get("checkpoint_ts") or 0)
        self.live.finish()

    def _diff(self) -> None:
        self.live.message(f"comparing {self.upstream} with {self.cluster.downstream_dsn}")
        report = diff(self.upstream, self.cluster.downstream_dsn)
        self.summary.tables = len(report.tables)
        self.summary.diff_rows = report.rows
        self.summary.diff_lines = [line for table in report.tables for line in table.lines()]
        self.summary.diff_seconds = report.seconds
        self.summary.equal = report.equal and bool(report.tables)

    def _stop_everything(self) -> None:
        if self.load.running:
            self.live.message("stopping the load (it finishes the transactions in flight)")
            self.load.stop()
        statuses = self.cluster.stop()
        for name, status in statuses.items():
            if status not in (0, None):
                log_path = self.cluster.log_path(name)
                log.warning("%s exited with status %s while stopping; see %s", name, status, log_path)


def demo_token() -> str:
    """The demo cluster's token: ``BINLOG_BRIDGE_CLUSTER_TOKEN`` when set, else a new random one,
    which is then set there for this process and its children (never printed)."""
    token = resolve_token()
    if not token:
        token = secrets.token_urlsafe(32)
        os.environ[TOKEN_ENV] = token
        log.info("the demo cluster runs with a generated cluster token (in its configs)")
    return token


def run_demo(options: DemoOptions, out: TextIO, err: TextIO) -> DemoSummary:
    """Run the demo; print progress on ``err`` and the summary on ``out``. See the module docstring.

    Raises :class:`DemoError` (after stopping everything) when a child fails,
    the drainer does not catch up or a signal interrupts the run.
    """
    data_dir, temporary = prepare_data_dir(options.data_dir)
    demo = DemoRun(options, data_dir, out, err)
    try:
        summary = demo.run()
    except DemoError as exc:
        exc.data_dir = data_dir
        raise
    summary.kept = options.keep or not temporary or not summary.equal
    (data_dir / "summary.json").write_text(summary.to_json() + "\n", encoding="utf-8")
    out.write("\n".join(summary.lines()) + "\n")
    out.flush()
    if not summary.kept:
        shutil.rmtree(data_dir, ignore_errors=True)
    return summary
