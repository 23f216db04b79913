"""`binlog-bridge ctl pause|resume|close NODE_ID` drives a real pump through the
status address it registered, and says clearly what it cannot do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.process import run_cli, wait_until
from tests.support.pump_server import PumpProcess, start_meta

pytestmark = pytest.mark.timeout(180)


def pump_state(meta_addr: str, node_id: str) -> str:
    result = run_cli("ctl", "--meta", meta_addr, "nodes", "--kind", "pump")
    assert result.returncode == 0, result.stderr
    for line in result.stdout.splitlines()[1:]:
        cells = line.split()
        if cells[1] == node_id:
            return cells[3]
    raise AssertionError(f"{node_id} not in:\n{result.stdout}")


def test_pause_resume_close_through_ctl(tmp_path: Path) -> None:
    meta, meta_addr = start_meta(tmp_path)
    pump = PumpProcess(tmp_path, meta_addr)
    try:
        pump.start()
        wait_until(lambda: pump_state(meta_addr, "pump-1") == "online", what="pump online")

        paused = run_cli("ctl", "--meta", meta_addr, "pause", "pump-1")
        assert paused.returncode == 0, paused.stderr
        assert "pump-1: pause accepted; state now paused" in paused.stdout
        wait_until(lambda: pump_state(meta_addr, "pump-1") == "paused", what="pump paused in the registry")

        again = run_cli("ctl", "--meta", meta_addr, "pause", "pump-1")
        assert again.returncode == 0, again.stderr  # pausing a paused pump changes nothing

        resumed = run_cli("ctl", "--meta", meta_addr, "resume", "pump-1")
        assert resumed.returncode == 0, resumed.stderr
        wait_until(lambda: pump_state(meta_addr, "pump-1") == "online", what="pump online again")

        closed = run_cli("ctl", "--meta", meta_addr, "close", "pump-1")
        assert closed.returncode == 0, closed.stderr
        assert pump.child is not None
        assert pump.child.wait(timeout=120) == 0  # a closed pump goes offline and exits
        assert pump_state(meta_addr, "pump-1") == "offline"

        gone = run_cli("ctl", "--meta", meta_addr, "resume", "pump-1")
        assert gone.returncode == 3  # the node did not answer
        assert "cannot reach pump pump-1 at http://" in gone.stderr
        assert "Traceback" not in gone.stderr
    finally:
        pump.kill()
        meta.kill()


def test_unknown_node_is_named(tmp_path: Path) -> None:
    meta, meta_addr = start_meta(tmp_path)
    try:
        result = run_cli("ctl", "--meta", meta_addr, "pause", "pump-nope")
        assert result.returncode == 2
        assert "no node 'pump-nope' in the registry (registered: none)" in result.stderr
    finally:
        meta.kill()
