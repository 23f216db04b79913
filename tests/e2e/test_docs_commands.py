"""The shell commands of README.md's tour, run in order as a new user would (issue 18).

The tour's fenced ``sh`` blocks are run in a temporary copy of the tree (its
top-level entries linked, a fresh ``var/``), with ``.venv/bin`` off the PATH
so that the README's own way onto it is what makes ``binlog-bridge`` work.
The first command that fails, or does not print what the text says it does
(:data:`EXPECT`), fails the test naming its README line. The markers the
test reads from the markdown (docs/development.md describes them):

- ``<!-- docs-test: background -->`` before a block: each line is a server,
  started in the background in order; each must print a ``ready`` line
  before the next starts; all are stopped when the test ends;
- ``<!-- docs-test: skip (why) -->`` before a block: not run (the reason says
  what it needs that the test does not start);
- ``source``/``export`` lines apply to every later command, as in a shell.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.process import ChildProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
TOUR = "## A five-minute tour"
MARKER = re.compile(r"<!--\s*docs-test:\s*(\w+)")
PORTS = (8247, 8248, 8249, 8250, 8251, 8252)  # the example configs' (meta, pump, drainer)
COMMAND_TIMEOUT = 300.0  # scripts/run --seconds 10 starts, loads, catches up and diffs: well below
READY_TIMEOUT = 90.0

# What the README says a command prints, beyond exiting 0 (the longest matching prefix applies).
EXPECT = {
    "scripts/run --seconds": "EQUAL: the downstream equals the upstream",
    "binlog-bridge load": '"errors": 0',
    "binlog-bridge ctl --meta 127.0.0.1:8248 wait-drainers": "every online drainer is past",
    "binlog-bridge diff": ": equal (",
    "binlog-bridge ctl --meta 127.0.0.1:8248 nodes": "drainer-1",
    "binlog-bridge ctl --meta 127.0.0.1:8248 drainers": "drainer-1",
    "binlog-bridge ctl --meta 127.0.0.1:8248 pause pump-1": "state now paused",
    "binlog-bridge ctl --meta 127.0.0.1:8248 resume pump-1": "state now online",
    "curl http://127.0.0.1:8251/status": '"node_id": "pump-1"',
}


@dataclass
class Block:
    line: int  # of the opening fence in README.md
    kind: str  # run | background | skip
    commands: list[tuple[int, str]] = field(default_factory=list)  # (README line, command)


def tour_blocks(text: str) -> list[Block]:
    """The ``sh`` blocks of the tour section, with their markers and commands (continuations joined)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == TOUR)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    blocks: list[Block] = []
    marker, block, pending, first = "run", None, "", 0
    for number in range(start + 1, end):
        line = lines[number]
        if block is None:
            if found := MARKER.search(line):
                marker = found.group(1)
            elif line.strip() == "```sh":
                block = Block(number + 1, marker)
            elif line.strip():
                marker = "run"
            continue
        if line.strip() == "```":
            blocks.append(block)
            block, marker = None, "run"
            continue
        first = first if pending else number + 1
        text_line = pending + line.strip()
        if text_line.endswith("\\"):
            pending = text_line[:-1] + " "
            continue
        pending = ""
        if text_line and not text_line.startswith("#"):
            block.commands.append((first, text_line))
    return blocks


def expectation(command: str) -> str:
    matches = [prefix for prefix in EXPECT if command.startswith(prefix)]
    return EXPECT[max(matches, key=len)] if matches else ""


def clean_env() -> dict[str, str]:
    """The environment of a new shell: no venv active, .venv/bin not on the PATH."""
    venv_bin = str(ROOT / ".venv" / "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
    env["BRIDGE_RUN_NO_INSTALL"] = "1"  # scripts/run must not make the copy the venv's editable install
    return env


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A copy of the tree as a fresh clone has it: every top-level entry linked, no var/."""
    target = tmp_path / "clone"
    target.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("var", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache"):
            (target / entry.name).symlink_to(entry)
    return target


@pytest.fixture
def servers() -> Iterator[list[ChildProcess]]:
    started: list[ChildProcess] = []
    yield started
    for child in reversed(started):
        child.stop(timeout=30)


def test_the_readme_tour_runs_as_written(clone: Path, servers: list[ChildProcess]) -> None:
    busy = [port for port in PORTS if _listening(port)]
    assert not busy, f"the example configs' ports {busy} are taken; the tour needs them free"
    blocks = tour_blocks((ROOT / "README.md").read_text())
    kinds = [b.kind for b in blocks]
    assert "background" in kinds and kinds.count("run") >= 3, kinds  # the markers are still there
    env, prelude, ran = clean_env(), [f"cd {clone}"], 0
    for block in blocks:
        if block.kind == "skip":
            continue
        for line, command in block.commands:
            where = f"README.md:{line}: {command}"
            if command.startswith(("source ", "export ")):
                prelude.append(command)
                continue
            script = " && ".join([*prelude, command])
            if block.kind == "background":
                log = clone.parent / f"server-{len(servers)}.log"
                argv = ["bash", "-c", f"{' && '.join(prelude)} && exec {command}"]
                servers.append(ChildProcess(argv, log, env))
                servers[-1].wait_for_line(r"\bready\b", timeout=READY_TIMEOUT)
            else:
                result = subprocess.run(
                    ["bash", "-c", script], capture_output=True, text=True, env=env, timeout=COMMAND_TIMEOUT
                )
                output = result.stdout + result.stderr
                assert result.returncode == 0, f"{where}\nexit {result.returncode}\n{output[-4000:]}"
                said = expectation(command)
                assert said in result.stdout, f"{where}\ndoes not print {said!r}\n{output[-4000:]}"
            ran += 1
    assert ran >= 12  # demo, 3 servers, load, wait, diff, 5 ctl, curl


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
