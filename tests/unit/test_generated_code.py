"""bridge/proto must be exactly what scripts/gen_protos.py builds from schemas/*.proto."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path("scripts") / "gen_protos.py"


def run_check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], cwd=root, capture_output=True, text=True, timeout=120
    )


def test_generated_code_is_up_to_date() -> None:
    result = run_check(ROOT)
    assert result.returncode == 0, (
        "bridge/proto is stale: run `python scripts/gen_protos.py` and commit the result\n" + result.stderr
    )


def test_the_check_notices_a_schema_change(tmp_path: Path) -> None:
    """The check above would pass vacuously if it compared nothing; prove it detects a change."""
    shutil.copytree(ROOT / "schemas", tmp_path / "schemas")
    shutil.copytree(ROOT / "bridge" / "proto", tmp_path / "bridge" / "proto")
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / SCRIPT, tmp_path / SCRIPT)
    assert run_check(tmp_path).returncode == 0
    row_proto = tmp_path / "schemas" / "row.proto"
    row_proto.write_text(row_proto.read_text() + "\nmessage StalenessProbe { int64 x = 1; }\n")
    result = run_check(tmp_path)
    assert result.returncode == 1
    assert "row_pb2.py" in result.stderr and "run: python scripts/gen_protos.py" in result.stderr
