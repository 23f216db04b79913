"""Every shell command of README.md and docs/*.md, checked without running it (issue 18).

The slow docs test (tests/e2e/test_docs_commands.py) runs the README tour and two
operations.md sections. This one reads every fenced ``sh``/``bash``/``shell``/``console``
block of README.md and docs/*.md (``console``: only ``$ `` lines) and checks each command:

- ``binlog-bridge ...``, ``python -m bridge.cli ...``, ``scripts/run ...`` (flags first: the
  demo's) and ``python -m spark_consumers ...``: parsed by the parser the CLI builds
  (:func:`bridge.cli.build_parser`, entry-point commands included); a ``--config FILE`` that
  lies in the repository must exist and load with its command's config loader, flags on top;
- ``python FILE.py`` / ``python -m tests.x`` (other programs of the repo): the file exists and
  every ``--flag`` given is one its ``add_argument`` calls define;
- ``scripts/X``: exists and is executable;
- every argument that names a path inside the repository's own directories (``docs/``,
  ``tests/``, ...; after the block's ``cd``) must exist, whatever the program;
- a synopsis line (one with a ``[--flag ...]`` group or a ``...`` elision) is not parsed; each
  ``--flag`` it shows must be one of its (sub-)command's options;
- ``docker compose exec SERVICE CMD``: CMD is checked as above (paths are the container's);
- any other program must be in :data:`OTHER_PROGRAMS` with the reason it is not checked.

Shell handled: ``\\`` continuations, comments, ``;`` ``&&`` ``||`` ``|`` ``&`` ``( )``,
redirections, here-documents (their bodies are skipped), ``NAME=value`` lines and prefixes,
``export``, ``cd``, ``until``/``do``/``done``, ``$NAME`` from the block's assignments and
``$(...)`` (not checked; a variable set from one takes its value from :data:`SUBSTITUTED`).
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGUAGES = {"sh", "bash", "shell", "console"}

# Top-level entries of the repository: a path argument inside one of them must exist.
REPO_ENTRIES = frozenset(
    (
        "bench",
        "bridge",
        "deploy",
        "docs",
        "drainer",
        "pump",
        "schemas",
        "scripts",
        "spark_consumers",
        "tests",
        "Dockerfile",
        "docker-compose.yml",
        "pyproject.toml",
        "README.md",
    )
)

# Programs the test does not parse, each with the reason.
OTHER_PROGRAMS = {
    "cat": "coreutils; here-documents writing a user's .env",
    "cd": "shell builtin; the test follows it to resolve later relative paths",
    "cp": "coreutils; its source paths are checked like every path argument",
    "curl": "HTTP client of the status endpoints (tests/integration/test_status_http*, docs e2e test)",
    "docker": "Docker CLI (tests/integration/test_compose_*); `docker compose exec` commands are checked",
    "echo": "shell builtin printing a checked command's exit status",
    "eval": "shell builtin over $(scripts/services env), which the test suite itself runs",
    "grep": "coreutils, filtering the output of a checked command",
    "kill": "shell builtin (the docs e2e test runs operations.md's use of it)",
    "mkdir": "coreutils",
    "pip": "Python's installer; the project's own install step is scripts/run's",
    "printf": "shell builtin writing a file",
    "sleep": "coreutils",
    "source": "shell builtin; .venv is made by scripts/run",
    "sh": "the shell running a repository script (its path is checked)",
    ".venv/bin/pytest": "pytest; its path arguments are checked",
    "python -c": "inline Python filtering a checked command's JSON output",
}

# `python -m MODULE` of modules that are not the repository's: not parsed (path arguments are
# checked like every path argument).
OTHER_MODULES = {"pytest": "the test runner; its test-file arguments are checked as paths"}

# Repository configs that name files an earlier command of their block makes: checked to exist
# and parse as TOML, not loaded (the loader checks those files).
LOADED_ELSEWHERE = {
    "docs/examples/tls": "pki/ is made by make-certs.sh first; tests/unit/test_tls_examples.py "
    "runs it and loads these configs with its files",
}

# `NAME=$(...)`: the value the variable stands for in later commands of its block.
SUBSTITUTED = {"META": "127.0.0.1:8248"}

SHELL_KEYWORDS = frozenset(("until", "while", "if", "then", "do", "else", "!", "time"))
SEPARATORS = frozenset((";", "&&", "||", "|", "&", "(", ")", ";;"))
REDIRECTIONS = frozenset((">", ">>", "<", "<<", "<<<", ">&", "&>", ">|"))
PYTHONS = frozenset(("python", "python3", ".venv/bin/python"))
PROJECT_MODULES = {"bridge.cli": "binlog-bridge", "spark_consumers": "spark_consumers"}
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass
class Command:
    """One simple command of a docs block, after the shell handling above."""

    where: str  # file:line
    argv: list[str]
    cwd: Path  # after the block's cd commands
    synopsis: bool
    in_container: bool = False


class ParseRefused(Exception):
    """argparse's error() (which would exit) raised instead."""


# ------------------------------------------------------------------------------ extracting


def shell_blocks(path: Path) -> Iterator[tuple[str, int, list[str]]]:
    """(language, first line number, lines) of every fenced block in a shell language."""
    language: str | None = None
    start, lines = 0, list[str]()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = re.match(r"^\s*```+\s*([\w-]*)", line)
        if fence and language is None:
            language, start, lines = fence.group(1).lower(), number + 1, []
        elif fence:
            if language in SHELL_LANGUAGES:
                yield language, start, lines
            language = None
        elif language is not None:
            lines.append(line)


def logical_lines(language: str, start: int, lines: list[str]) -> Iterator[tuple[int, str]]:
    """Lines with continuations joined and here-document bodies left out."""
    pending, first, heredoc = "", 0, None
    for number, line in enumerate(lines, start):
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        if language == "console" and not pending:
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        if not pending:
            first = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        text, pending = pending + line, ""
        if marker := re.search(r"<<-?\s*['\"]?(\w+)['\"]?", text):
            heredoc = marker.group(1)
        if text.strip():
            yield first, text


def without_substitutions(text: str) -> str:
    """``$(...)`` (balanced, quotes respected) replaced by the word ``$(SUBST)``-free ``__SUBST__``."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$(", i):
            depth, j, quote = 1, i + 2, ""
            while j < len(text) and depth:
                char = text[j]
                if quote:
                    quote = "" if char == quote else quote
                elif char in "'\"":
                    quote = char
                elif char == "(":
                    depth += 1
                elif char == ")":
                    depth -= 1
                j += 1
            out.append("__SUBST__")
            i = j
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def is_synopsis(text: str) -> bool:
    words = shlex.split(text, comments=True)
    return any(w.startswith("[") or w == "..." or w.startswith("(--") for w in words)


def simple_commands(text: str) -> Iterator[list[str]]:
    """The simple commands of one logical line, separators and redirections removed."""
    lexer = shlex.shlex(without_substitutions(text), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    current: list[str] = []
    skip_next = False
    for token in lexer:
        if skip_next:
            skip_next = False
        elif token in SEPARATORS:
            if current:
                yield current
            current = []
        elif token in REDIRECTIONS or re.fullmatch(r"\d?[<>]+&?\d*", token):
            skip_next = not re.fullmatch(r"\d?>&\d", token)
        else:
            current.append(token)
    if current:
        yield current


def expand(word: str, variables: dict[str, str]) -> list[str]:
    """``word`` with the block's variables put in (others left as they are), split as the
    shell splits an unquoted variable holding flags (``$TLS``)."""
    expanded = VARIABLE.sub(lambda m: variables.get(m.group(1) or m.group(2), m.group(0)), word)
    return shlex.split(expanded) if expanded != word and expanded.startswith("-") else [expanded]


def commands_of(path: Path) -> list[Command]:
    found: list[Command] = []
    for language, start, lines in shell_blocks(path):
        variables: dict[str, str] = {}
        cwd = ROOT
        for number, text in logical_lines(language, start, lines):
            where = f"{path.relative_to(ROOT)}:{number}"
            synopsis = is_synopsis(text)
            if synopsis and text.lstrip().startswith("[") and found and found[-1].synopsis:
                found[-1].argv += shlex.split(text, comments=True)  # a usage continued on this line
                continue
            for words in [shlex.split(text, comments=True)] if synopsis else simple_commands(text):
                words = [w for w in words if w]
                while words and words[0] in SHELL_KEYWORDS:
                    words = words[1:]
                if not words or words[0] in ("done", "fi"):
                    continue
                if words[0] == "export":
                    words = words[1:]
                assigned = [ASSIGNMENT.match(w) for w in words]
                leading = 0
                while leading < len(words) and assigned[leading]:
                    leading += 1
                if leading == len(words):  # NAME=value ... alone: the block's variables
                    for match in assigned:
                        assert match is not None
                        name, raw = match.groups()
                        variables[name] = SUBSTITUTED.get(name, raw) if "__SUBST__" in raw else raw
                    continue
                argv = words[leading:]
                if not synopsis:
                    argv = [part for word in argv for part in expand(word, variables)]
                if argv[0] == "cd" and len(argv) == 2:
                    cwd = (cwd / argv[1]).resolve()
                found.append(Command(where, argv, cwd, synopsis))
    return found


# ------------------------------------------------------------------------------ checking


def _raise(self: argparse.ArgumentParser, message: str) -> None:
    raise ParseRefused(f"{self.prog}: {message}")


@pytest.fixture(autouse=True)
def argparse_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(argparse.ArgumentParser, "error", _raise)


@functools.cache
def bridge_parser() -> argparse.ArgumentParser:
    from bridge.cli import build_parser

    return build_parser()


@functools.cache
def spark_parser() -> argparse.ArgumentParser:
    from spark_consumers.__main__ import parser

    return parser()


@functools.cache
def bench_parser(name: str) -> argparse.ArgumentParser:
    """The parser ``binlog-bridge bench NAME`` parses the benchmark's options with."""
    from bridge.cli.bench import benchmarks, load_benchmark

    if name not in benchmarks():
        raise ParseRefused(f"binlog-bridge bench: no benchmark {name!r}")
    parser = argparse.ArgumentParser(prog=f"binlog-bridge bench {name}")
    load_benchmark(name).add_arguments(parser)
    return parser


def parser_path(parser: argparse.ArgumentParser, words: list[str]) -> list[argparse.ArgumentParser]:
    """The parsers a synopsis goes through: each word naming a sub-command of the parser
    reached so far descends into it (``bench NAME``: the benchmark's own parser)."""
    path = [parser]
    for index, word in enumerate(words):
        if path[-1].prog == "binlog-bridge bench":
            return [*path, bench_parser(word)]
        actions = [a for a in path[-1]._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions:
            break
        if word in actions[0].choices:
            path.append(actions[0].choices[word])
        elif index == 0 and not word.startswith(("-", "[", "(")):
            raise ParseRefused(f"{path[-1].prog}: no sub-command {word!r}")
    return path


def options_of(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def synopsis_flags(words: list[str]) -> list[str]:
    flags = []
    for word in words:
        stripped = word.strip("[]()|")
        if stripped.startswith("--"):
            flags.append(stripped.split("=")[0])
    return flags


def repo_path(word: str, cwd: Path) -> Path | None:
    """The path inside the repository's own entries that ``word`` names, if it names one."""
    if "://" in word or "$" in word or "*" in word or word.startswith("-") or "/" not in word:
        return None
    candidate = word.split(":", 1)[1] if word.startswith("sqlite:") else word
    resolved = Path(os.path.normpath(cwd / candidate))
    try:
        relative = resolved.relative_to(ROOT)
    except ValueError:
        return None
    return resolved if relative.parts and relative.parts[0] in REPO_ENTRIES else None


def check_paths(command: Command) -> list[str]:
    if command.in_container:
        return []
    problems = []
    for word in command.argv[1:]:
        value = word.split("=", 1)[1] if word.startswith("--") and "=" in word else word
        path = repo_path(value, command.cwd)
        if path is not None and not path.exists():
            problems.append(f"{command.where}: {value}: no such file in the repository")
        problems += check_dsn(command.where, value)
    return problems


def check_dsn(where: str, word: str) -> list[str]:
    """A DSN parses; a SQLite one given as an absolute path points into /tmp (a relative one
    stays in the checkout: ``sqlite:///var/x.db`` would write into /var)."""
    from bridge.dsn import parse_dsn
    from bridge.errors import ConfigError

    if not word.lower().startswith(("sqlite:", "mysql://", "mariadb://")) or "$" in word:
        return []
    try:
        dsn = parse_dsn(word)
    except ConfigError as exc:
        return [f"{where}: {word}: {exc}"]
    if dsn.is_sqlite and dsn.path.startswith("/") and not dsn.path.startswith("/tmp/"):
        return [f"{where}: {word}: an absolute SQLite path outside /tmp; sqlite:relative/path stays here"]
    return []


def load_config(command: str, args: argparse.Namespace) -> None:
    """Load ``args.config`` as ``command`` does, its flags on top (raises ConfigError)."""
    from bridge.cli.nodeflags import flag_overrides

    if command == "meta":
        from bridge.cli.meta import load_config as load_meta

        load_meta(args)
    elif command == "pump":
        from bridge.config import load
        from pump.cli import FLAG_KEYS as PUMP_FLAGS
        from pump.config import PumpConfig

        load(PumpConfig, args.config, flag_overrides(args, PUMP_FLAGS))
    elif command == "drainer":
        from drainer.cli import FLAG_KEYS as DRAINER_FLAGS
        from drainer.config import load_config as load_drainer

        load_drainer(args.config, flag_overrides(args, DRAINER_FLAGS))
    elif command == "capture":
        from bridge.apps.capture import CaptureFile
        from bridge.config import load

        overrides = {"capture.data-dir": args.data_dir, "capture.meta": args.meta}
        load(CaptureFile, args.config, {**overrides, "capture.status-addr": args.status_addr})


def check_cli(command: Command, program: str, args: list[str]) -> list[str]:
    """Parse ``args`` with the project CLI ``program``; load a repository ``--config``."""
    parser = bridge_parser() if program == "binlog-bridge" else spark_parser()
    if command.synopsis:
        try:
            path = parser_path(parser, args)
        except ParseRefused as exc:
            return [f"{command.where}: {exc}"]
        known = {option for each in path for option in options_of(each)}
        problems = [
            f"{command.where}: {path[-1].prog} has no option {flag}"
            for flag in synopsis_flags(args)
            if flag not in known
        ]
        if "--config" in args[:-1] and program == "binlog-bridge":  # the config a synopsis names loads
            names = [each.prog.rsplit(" ", 1)[-1] for each in path[1:]]
            config = args[args.index("--config") + 1]
            plain = Command(command.where, command.argv, command.cwd, False, command.in_container)
            problems += check_cli(plain, program, [*names, "--config", config])
        return problems
    if program == "spark_consumers" and args[:1] == ["bench"]:
        return check_cli(command, "binlog-bridge", ["bench", "spark", *args[1:]])
    try:
        parsed = parser.parse_args(args)
    except ParseRefused as exc:
        return [f"{command.where}: {' '.join(command.argv)}: {exc}"]
    except SystemExit:  # --help, --version
        return []
    if program == "binlog-bridge" and parsed.command == "bench":
        try:
            bench_parser(parsed.name).parse_args(parsed.options)
        except ParseRefused as exc:
            return [f"{command.where}: {' '.join(command.argv)}: {exc}"]
    given = getattr(parsed, "config", None)
    if program != "binlog-bridge" or given is None or command.in_container:
        return []
    file = repo_path(str(given), command.cwd)
    if file is None:
        return []  # a file the text makes first (var/..., $D/..., the reader's own)
    if not file.is_file():
        return []  # check_paths reports it
    if str(file.parent.relative_to(ROOT)) in LOADED_ELSEWHERE:
        tomllib.loads(file.read_text(encoding="utf-8"))
        return []
    parsed.config = file
    try:
        load_config(parsed.command, parsed)
    except Exception as exc:  # reported with the command that failed
        return [f"{command.where}: {parsed.command} --config {given}: {type(exc).__name__}: {exc}"]
    return []


def script_flags(path: Path) -> set[str]:
    """The option strings of every ``add_argument`` call in a Python file."""
    flags = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
            flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
    return {f for f in flags if f.startswith("-")}


def check_python(command: Command) -> list[str]:
    args = command.argv[1:]
    if args[:1] == ["-c"]:
        return []
    if args[:1] == ["-m"] and len(args) > 1:
        module, rest = args[1], args[2:]
        if module in OTHER_MODULES:
            return []
        if module in PROJECT_MODULES:
            return check_cli(command, PROJECT_MODULES[module], rest)
        file = ROOT / (module.replace(".", "/") + ".py")
    else:
        file, rest = (command.cwd / args[0]).resolve() if args else ROOT, args[1:]
    if not file.is_file():
        return [
            f"{command.where}: {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}: no such file"
        ]
    known = script_flags(file)
    return [
        f"{command.where}: {file.relative_to(ROOT)} defines no option {flag}"
        for flag in synopsis_flags(rest)
        if flag not in known
    ]


def check_script(command: Command) -> list[str]:
    script = (command.cwd / command.argv[0]).resolve()
    if not script.is_file():
        return [f"{command.where}: {command.argv[0]}: no such script"]
    if not os.access(script, os.X_OK):
        return [f"{command.where}: {command.argv[0]}: not executable"]
    if script == ROOT / "scripts" / "run":
        args = command.argv[1:]
        if not args or (args[0].startswith("-") and args[0] != "--version"):
            args = ["demo", *args]  # scripts/run: flags first are the demo's
        return check_cli(command, "binlog-bridge", args)
    return []


def check(command: Command) -> list[str]:
    """What is wrong with one command (nothing: [])."""
    argv = command.argv
    program = argv[0]
    problems = check_paths(command)
    if program == "binlog-bridge":
        return problems + check_cli(command, program, argv[1:])
    if program in PYTHONS:
        if argv[1:2] == ["-c"]:
            return problems
        return problems + check_python(command)
    if program.startswith(("scripts/", "./scripts/")):
        return problems + check_script(command)
    if program == "docker" and argv[1:3] == ["compose", "exec"]:
        inner = [w for w in argv[3:]]
        while inner and inner[0].startswith("-"):
            inner = inner[1:]
        if len(inner) > 1:
            return problems + check(Command(command.where, inner[1:], command.cwd, command.synopsis, True))
    if program in OTHER_PROGRAMS or command.in_container:
        return problems  # in a container: the image's own tools
    unknown = f"{command.where}: {program}: not a checked program; add it to OTHER_PROGRAMS with why"
    return [*problems, unknown]


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_of_the_docs_parses(doc: Path) -> None:
    problems = [problem for command in commands_of(doc) for problem in check(command)]
    assert not problems, "\n".join(problems)


def test_the_checks_see_the_commands_they_claim() -> None:
    """The extraction finds the commands: a count per kind, and no unused allow-list entry."""
    commands = [c for doc in DOC_FILES for c in commands_of(doc)]
    programs = {c.argv[0] for c in commands} | {" ".join(c.argv[:2]) for c in commands}
    assert sum(c.argv[0] == "binlog-bridge" for c in commands) > 50
    assert any(c.argv[0] == "scripts/run" for c in commands)
    assert any(c.synopsis for c in commands)
    unused = [name for name in OTHER_PROGRAMS if name not in programs]
    assert not unused, f"OTHER_PROGRAMS names programs no doc command uses: {unused}"


def test_a_stale_flag_a_missing_config_and_a_missing_script_are_found(tmp_path: Path) -> None:
    doc = ROOT / "docs" / "_probe_for_test.md"
    text = (
        "```sh\n"
        "binlog-bridge diff --upstream sqlite:a.db --downstrem sqlite:b.db\n"
        "binlog-bridge drainer --config docs/examples/nosuch.toml\n"
        "scripts/nosuch --x\n"
        "binlog-bridge bench pump [--seconds 10] [--no-such-flag]\n"
        "binlog-bridge diff --upstream sqlite:///var/up.db --downstream mysql://h/a/b\n"
        "mysql -e 'select 1'\n"
        "```\n"
    )
    found = _problems_of_text(doc, text)
    assert any("required: --downstream" in p for p in found), found
    assert any("docs/examples/nosuch.toml: no such file" in p for p in found), found
    assert any("scripts/nosuch: no such script" in p for p in found), found
    assert any("has no option --no-such-flag" in p for p in found), found
    assert any("mysql: not a checked program" in p for p in found), found
    assert any("sqlite:///var/up.db: an absolute SQLite path" in p for p in found), found
    assert any("mysql://h/a/b: dsn: the path must be a single database name" in p for p in found), found
    assert not any("--seconds" in p for p in found), found


def _problems_of_text(doc: Path, text: str) -> list[str]:
    original = Path.read_text

    def read_text(self: Path, *args: Any, **kwargs: Any) -> str:
        return text if self == doc else original(self, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Path, "read_text", read_text)
        return [p for c in commands_of(doc) for p in check(c)]
