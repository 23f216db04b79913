"""scripts/lib/venv.sh (behind scripts/run, scripts/test, scripts/compose-local) says what it is
doing before the slow steps, so a first `scripts/run` is not half a minute of silence."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_making_the_venv_and_installing_say_so_before_they_start(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text("[project\n")  # pip fails on it at once: no long install
    script = (
        f"ROOT={project}; BRIDGE_VENV={tmp_path / 'venv'}; source {ROOT / 'scripts/lib/venv.sh'}; "
        "bridge_venv >/dev/null && bridge_install"
    )
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=600)
    assert result.returncode != 0, result.stdout
    said = result.stderr
    assert "creating " in said and "installing binlog-bridge and its dependencies" in said, said
    assert said.index("creating ") < said.index("installing binlog-bridge") < said.index("pip install failed")
