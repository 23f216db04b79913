"""The shell commands of README.md's tour and of docs pages' sections, run in order as a new user
and an operator would (issue 18).

The fenced ``sh`` blocks of each section in :data:`SECTIONS` (README.md's
tour, then docs/operations.md's "When a drainer halts" and "Removing a node
for good", which go on with the tour's cluster) are run in a temporary copy
of the tree (its top-level entries linked, a fresh ``var/``), with
``.venv/bin`` off the PATH so that the README's own way onto it is what
makes ``binlog-bridge`` work. The first command that fails, or does not
print what the text says it does (:data:`EXPECT`, per page
:data:`PAGE_EXPECT`), fails the test naming its page and line. The markers
the test reads from the markdown (docs/development.md describes them).
README's "Into MySQL or Kafka" (into the MariaDB and the broker
``scripts/services`` starts) and its Spark index/search/stats run too:

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

import pymysql
import pytest

from tests.support.process import ChildProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = (  # (page, section heading): run in this order, on one cluster
    ("README.md", "## A five-minute tour"),
    ("docs/operations.md", "## When a drainer halts"),
    ("docs/operations.md", "## Removing a node for good"),
)
MARKER = re.compile(r"<!--\s*docs-test:\s*(\w+)")
PORTS = (
    8247,
    8248,
    8249,
    8250,
    8251,
    8252,
    8254,
    8255,
    8256,
    8257,
    8259,
    8260,
)  # the example configs' (meta, pump, drainer, drainer-mysql, drainer-kafka), drainer-2's
# The README's MySQL drainer writes database `main` into the MariaDB scripts/services starts: a
# previous run's rows there would make its diff differ, so the test drops it first (its checkpoint
# and progress rows in `bridge` are per cluster id, new on every run).
DOWNSTREAM_MAIN = "main"
COMMAND_TIMEOUT = 300.0  # scripts/run --seconds 10 starts, loads, catches up and diffs: well below
READY_TIMEOUT = 90.0

# What the README says a command prints, beyond exiting 0 (the longest matching prefix applies).
EXPECT = {
    "scripts/run --seconds": "EQUAL: the downstream equals the upstream",
    "binlog-bridge load": '"errors": 0',
    "binlog-bridge ctl --meta 127.0.0.1:8248 wait-drainers": "every online drainer is past",
    "binlog-bridge diff": ": equal (",
    "binlog-bridge consume --bootstrap-servers 127.0.0.1:19092 --prefix bridge": '"topic":"bridge.',
    "python -m spark_consumers stats": "main.load_orders",
    "binlog-bridge ctl --meta 127.0.0.1:8248 nodes": "drainer-1",
    "binlog-bridge ctl --meta 127.0.0.1:8248 drainers": "drainer-1",
    "binlog-bridge ctl --meta 127.0.0.1:8248 pause pump-1": "state now paused",
    "binlog-bridge ctl --meta 127.0.0.1:8248 resume pump-1": "state now online",
    "curl http://127.0.0.1:8251/status": '"node_id": "pump-1"',
}
EXAMPLE = "python docs/examples/pump_client_example.py --meta 127.0.0.1:8248"
# What a page's commands print where the same command means something else on another page.
PAGE_EXPECT = {
    "docs/operations.md": {
        f"{EXAMPLE} --txns 20": "wrote 20 transactions",
        f"{EXAMPLE} --txns 3 --without-create": "no CREATE TABLE written",
        "binlog-bridge ctl --meta 127.0.0.1:8248 drainers ": "drainer drainer-1 failed at",
        "binlog-bridge ctl --meta 127.0.0.1:8248 drainers --output json": '"state": "failed"',
        "binlog-bridge ctl --meta 127.0.0.1:8248 nodes ": "drainer-2",
        "binlog-bridge ctl --meta 127.0.0.1:8248 offline drainer-2 --yes": "drainer-2: registered offline",
        "binlog-bridge ctl --meta 127.0.0.1:8248 remove drainer-2 --yes": "drainer-2: record deleted",
        "binlog-bridge ctl --meta 127.0.0.1:8248 prune --older-than 7d": "",
    },
}


@dataclass
class Block:
    line: int  # of the opening fence in its page
    kind: str  # run | background | skip
    commands: list[tuple[int, str]] = field(default_factory=list)  # (page line, command)


def section_blocks(text: str, heading: str) -> list[Block]:
    """The ``sh`` blocks of the section under ``heading``, with their markers and commands
    (continuations joined)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == heading)
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


def expectation(page: str, command: str) -> str:
    for table in (PAGE_EXPECT.get(page, {}), EXPECT):
        matches = [prefix for prefix in table if command.startswith(prefix)]
        if matches:
            return table[max(matches, key=len)]
    return ""


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


def test_the_readme_tour_and_the_operations_pages_run_as_written(
    clone: Path, servers: list[ChildProcess]
) -> None:
    busy = [port for port in PORTS if _listening(port)]
    assert not busy, f"the example configs' ports {busy} are taken; the tour needs them free"
    drop_downstream_main()
    env, prelude, ran = clean_env(), [f"cd {clone}"], {}
    for page, heading in SECTIONS:
        blocks = section_blocks((ROOT / page).read_text(), heading)
        assert any(b.kind == "run" for b in blocks), f"{page} {heading}: no command block"
        ran[heading] = run_blocks(page, blocks, env, prelude, clone, servers)
    tour = [b.kind for b in section_blocks((ROOT / "README.md").read_text(), SECTIONS[0][1])]
    assert "background" in tour and tour.count("run") >= 3, tour  # the markers are still there
    # demo, 3 servers, load, wait, diff, MySQL and Kafka drainers, wait, diff, consume, 5 ctl, curl, Spark
    assert ran["## A five-minute tour"] >= 20
    assert ran["## When a drainer halts"] >= 9  # two examples, the failed state, the skip, a restart
    assert ran["## Removing a node for good"] >= 7  # a drainer gone, offline, remove, prune


def run_blocks(
    page: str, blocks: list[Block], env: dict[str, str], prelude: list[str], clone: Path,
    servers: list[ChildProcess],
) -> int:  # fmt: skip
    """Run ``blocks`` in order (``prelude`` gains their ``source``/``export`` lines); how many ran."""
    ran = 0
    for block in blocks:
        if block.kind == "skip":
            continue
        for line, command in block.commands:
            where = f"{page}:{line}: {command}"
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
                said = expectation(page, command)
                assert said in result.stdout, f"{where}\ndoes not print {said!r}\n{output[-4000:]}"
            ran += 1
    return ran


def drop_downstream_main() -> None:
    conn = pymysql.connect(host="127.0.0.1", port=3306, user="root", autocommit=True)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS `{DOWNSTREAM_MAIN}`")
    finally:
        conn.close()


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0
