"""What a compose service runs, as simple commands, and which files it reads.

A service's ``command`` is either one program's argv or ``sh -c SCRIPT`` /
``sh -ec SCRIPT``; the script is split into its simple commands (at ``;``,
``&&``, ``||``, ``|``, ``do``, ``then``, ``else``...), so each
``binlog-bridge ...`` or ``python -m spark_consumers ...`` in it can be
checked like a direct command.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from composelocal.compose import ComposeFile, Service

_SEPARATORS = {";", "&&", "||", "|", "do", "done", "then", "else", "fi", "if", "for", "while", "until"}
_SHELLS = {"sh", "bash"}


def simple_commands(argv: list[str]) -> list[list[str]]:
    """The simple commands ``argv`` runs (itself, or those of its ``sh -c`` script)."""
    if len(argv) >= 3 and argv[0] in _SHELLS and argv[1].startswith("-") and "c" in argv[1]:
        return _split_script(argv[2])
    return [argv] if argv else []


def _split_script(script: str) -> list[list[str]]:
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    commands: list[list[str]] = []
    current: list[str] = []
    skip = False
    for token in lexer:
        if skip:  # the file or descriptor a redirection names
            skip = False
        elif set(token) <= set("<>&") and set(token) & set("<>"):
            skip = True
            if current and current[-1].isdigit():  # the descriptor before it: 2>&1
                current.pop()
        elif token in _SEPARATORS:
            if current:
                commands.append(current)
            current = []
        else:
            current.append(token)
    if current:
        commands.append(current)
    return commands


def bridge_invocations(service: Service) -> list[list[str]]:
    """The project commands (``binlog-bridge ...``, ``python -m spark_consumers ...``) of ``service``,
    without the program part: ``["pump", "--config", ...]`` or ``["spark_consumers", "index", ...]``."""
    found = []
    for command in simple_commands(service.command):
        if command[0] == "binlog-bridge":
            found.append(command[1:])
        elif command[:3] == ["python", "-m", "spark_consumers"]:
            found.append(command[2:])
    return found


def container_file(compose: ComposeFile, service: Service, path: str, scratch: Path) -> Path:
    """The repository file (or, for an inline config, a file written under ``scratch``) that
    ``service`` sees at the container path ``path``."""
    for mount in service.mounts:
        if mount.target != path:
            continue
        if mount.kind == "bind":
            return compose.root / mount.source
        if mount.kind == "config":
            content = compose.config_content(mount.source)
            if content is None:
                file = compose.config_file(mount.source)
                if file is None:
                    raise FileNotFoundError(f"config {mount.source} has neither content nor file")
                return file
            written = scratch / service.name / Path(path).name
            written.parent.mkdir(parents=True, exist_ok=True)
            written.write_text(content)
            return written
    raise FileNotFoundError(f"{service.name}: nothing is mounted at {path}")
