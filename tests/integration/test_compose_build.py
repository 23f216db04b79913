"""The Dockerfile's build steps, run here as far as a machine without Docker allows.

The build context is the repository filtered by .dockerignore; the wheel stage's COPY
instructions are replayed into a scratch /src and its RUN commands make the venv, build the wheel
and install it there (with /dist and /opt/bridge moved under a temporary folder, and pip's cache
kept so a rerun takes seconds); the bridge stage copies that venv. The installed venv must run
what docker-compose.yml runs in that image. tests/e2e/test_compose_docker.py builds the images
for real, offline. The spark stage's JRE package must
exist in Debian bookworm (the base image's release); its Ivy download needs Maven Central,
which this machine cannot reach.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
pytestmark = pytest.mark.slow


def stages() -> dict[str, list[tuple[str, str]]]:
    """``{stage: [(INSTRUCTION, arguments)]}``, continuation lines joined, comments dropped."""
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    result: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        instruction, _, arguments = line.strip().partition(" ")
        if instruction == "FROM":
            current = result.setdefault(arguments.split(" AS ")[-1].strip(), [])
        current.append((instruction, " ".join(arguments.split())))
    return result


def matches(relative: str, pattern: str) -> bool:
    parts = relative.split("/")
    anywhere = pattern.startswith("**/")
    bare = pattern.removeprefix("**/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    if any(fnmatch.fnmatch(p, pattern) for p in prefixes):
        return True
    return anywhere and any(fnmatch.fnmatch(part, bare) for part in parts)


def ignored(relative: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern that matches decides; a leading ! takes a path back in."""
    result = False
    for pattern in patterns:
        negated = pattern.startswith("!")
        if matches(relative, pattern.removeprefix("!")):
            result = not negated
    return result


def pruned(relative: str, patterns: list[str]) -> bool:
    """An ignored folder is not walked unless an exception takes back something inside it."""
    inside = [p[1:] for p in patterns if p.startswith("!") and p[1:].startswith(relative + "/")]
    return ignored(relative, patterns) and not inside


def build_context(target: Path) -> Path:
    """A copy of the repository without what .dockerignore leaves out."""
    patterns = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [p for p in patterns if p and not p.startswith("#")]
    for folder, dirs, files in os.walk(ROOT):
        relative_folder = Path(folder).relative_to(ROOT)
        dirs[:] = [d for d in dirs if not pruned(str(relative_folder / d).removeprefix("./"), patterns)]
        for name in files:
            relative = str(relative_folder / name).removeprefix("./")
            if not ignored(relative, patterns):
                (target / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / relative, target / relative)
    return target


def run_step(command: str, moves: dict[str, Path], cwd: Path) -> None:
    for container, local in moves.items():
        command = command.replace(container, str(local))
    command = command.replace("--no-cache-dir ", "")  # keep pip's cache here: reruns take seconds
    done = subprocess.run(
        ["sh", "-ec", command], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"


def test_the_dockerignore_keeps_what_the_wheel_stage_copies(tmp_path: Path) -> None:
    context = build_context(tmp_path / "context")
    for instruction, arguments in stages()["wheel"]:
        if instruction == "COPY":
            for source in arguments.split()[:-1]:
                assert (context / source).exists(), f"COPY {source}: left out of the build context"
    assert not (context / ".venv").exists() and not (context / "tests").exists()


def test_the_wheel_stage_copies_every_package_pyproject_ships() -> None:
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {name.rstrip("*") for name in include["include"]}
    copied = {a.split()[0] for i, a in stages()["wheel"] if i == "COPY"}
    assert packages <= copied, f"COPY these into the wheel stage too: {sorted(packages - copied)}"


def test_the_wheel_builds_and_installs_into_a_fresh_venv_that_runs_the_compose_commands(
    tmp_path: Path,
) -> None:
    context = build_context(tmp_path / "context")
    src, dist, venv = tmp_path / "src", tmp_path / "dist", tmp_path / "opt-bridge"
    src.mkdir()
    wheel_stage, bridge_stage = stages()["wheel"], stages()["bridge"]
    for instruction, arguments in wheel_stage:
        if instruction == "COPY":
            *sources, destination = arguments.split()
            for source in sources:
                copy = shutil.copytree if (context / source).is_dir() else shutil.copy2
                copy(
                    context / source,
                    src / destination / Path(source).name if destination == "./" else src / destination,
                )
    python = Path(getattr(sys, "_base_executable", sys.executable))
    moves = {"/opt/bridge": venv, "/dist": dist}
    for instruction, command in wheel_stage:
        if instruction == "RUN":
            command = command.replace("pip wheel", f"{sys.executable} -m pip wheel")
            run_step(command.replace("python -m venv", f"{python} -m venv"), moves, src)
    assert [w.name for w in dist.glob("*.whl")] == ["binlog_bridge-0.1.0-py3-none-any.whl"]
    assert ("COPY", "--from=wheel /opt/bridge /opt/bridge") in bridge_stage
    for argv in (
        ["binlog-bridge", "--help"],
        ["binlog-bridge", "ctl", "--help"],
        ["python", "-m", "spark_consumers", "--help"],
    ):
        done = subprocess.run(
            [str(venv / "bin" / argv[0]), *argv[1:]], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{argv}: {done.stderr[-2000:]}"
    assert (venv / "bin" / "spark-class").exists()  # the spark target's master and worker commands


def test_the_spark_stage_installs_a_jre_debian_bookworm_ships() -> None:
    spark = " ".join(a for i, a in stages()["spark"] if i == "RUN")
    assert "openjdk-17-jre-headless" in spark
    base = DOCKERFILE.read_text().split("ARG PYTHON_IMAGE=")[1].split()[0]
    assert base.startswith("python:3.11") and base.endswith("-bookworm")
    if shutil.which("apt-cache") is None:
        pytest.skip("not a Debian machine")
    policy = subprocess.run(
        ["apt-cache", "policy", "openjdk-17-jre-headless"], capture_output=True, text=True
    )
    assert (
        "Candidate:" in policy.stdout and "(none)" not in policy.stdout.split("Candidate:")[1].split("\n")[0]
    )
