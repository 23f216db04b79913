"""docker-compose.yml as data: interpolation, profiles, services and their start order.

Only what ``scripts/compose-local`` and the compose tests need of the Compose
Specification: ``${VAR}``/``${VAR-default}``/``${VAR:-default}``/``${VAR?error}``/
``${VAR:?error}`` and ``$$`` interpolation of every string, ``profiles``,
``depends_on`` (short and long form), ``command``, ``environment``, ``volumes``,
``configs``, ``expose``, ``ports`` and ``healthcheck``. YAML merge keys (``<<``)
are resolved by the YAML loader, as Compose does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")

# Images whose service is replaced by a local server in scripts/compose-local (scripts/services).
LOCAL_KINDS = {
    "mariadb": "mariadb",
    "mysql": "mariadb",
    "apache/kafka": "kafka",
    "redis": "redis",
    "quay.io/coreos/etcd": "etcd",
    "prom/prometheus": "prometheus",  # Debian's prometheus (composelocal.observe)
}


class ComposeError(Exception):
    """The compose file is not what this tool can read, or a variable it requires is unset."""


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """``text`` with Compose's variable syntax replaced from ``env``."""

    def substitute(match: re.Match[str]) -> str:
        escaped, name, op, arg, bare = match.groups()
        if escaped:
            return "$"
        if bare:
            return env.get(bare, "")
        value = env.get(name)
        empty_counts = op is not None and op.startswith(":")
        missing = value is None or (empty_counts and value == "")
        if op and op.endswith("-"):
            return arg if missing else str(value)
        if op and op.endswith("?"):
            if missing:
                raise ComposeError(f"variable {name} is required: {arg}")
            return str(value)
        return value or ""

    return _VAR.sub(substitute, text)


def _interpolate_tree(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, list):
        return [_interpolate_tree(item, env) for item in node]
    if isinstance(node, dict):
        return {key: _interpolate_tree(value, env) for key, value in node.items()}
    return node


@dataclass
class Mount:
    """A volume or config mount: ``kind`` is ``volume``, ``bind`` or ``config``."""

    kind: str
    source: str
    target: str
    read_only: bool = False


@dataclass
class Service:
    name: str
    spec: dict[str, Any]
    mounts: list[Mount] = field(default_factory=list)

    @property
    def image(self) -> str:
        return str(self.spec.get("image", ""))

    @property
    def is_project(self) -> bool:
        """Built from this repository's Dockerfile (runs the project's own commands)."""
        return "build" in self.spec

    @property
    def local_kind(self) -> str | None:
        """The local server standing in for this third-party image, or None."""
        repo = self.image.rsplit(":", 1)[0]
        return LOCAL_KINDS.get(repo)

    @property
    def command(self) -> list[str]:
        command = self.spec.get("command", [])
        if isinstance(command, str):
            raise ComposeError(f"{self.name}: write command as a list (exec form)")
        return [str(arg) for arg in command]

    @property
    def environment(self) -> dict[str, str]:
        env = self.spec.get("environment", {})
        if isinstance(env, list):
            env = dict(item.split("=", 1) for item in env)
        return {str(k): "" if v is None else str(v) for k, v in env.items()}

    @property
    def expose(self) -> list[int]:
        ports = {int(p) for p in self.spec.get("expose", [])}
        for published in self.spec.get("ports", []):
            ports.add(int(str(published).rsplit(":", 1)[-1].split("/")[0]))
        return sorted(ports)

    @property
    def depends_on(self) -> dict[str, dict[str, Any]]:
        deps = self.spec.get("depends_on", {})
        if isinstance(deps, list):
            return {name: {"condition": "service_started"} for name in deps}
        return {name: dict(options) for name, options in deps.items()}

    @property
    def healthcheck(self) -> list[str] | None:
        """The test as an argv (CMD-SHELL becomes ``sh -c``), or None."""
        test = self.spec.get("healthcheck", {}).get("test")
        if not test or test == ["NONE"]:
            return None
        if isinstance(test, str):
            return ["sh", "-c", test]
        kind, *argv = test
        return ["sh", "-c", " ".join(argv)] if kind == "CMD-SHELL" else list(argv)

    @property
    def one_shot(self) -> bool:
        """Runs to completion (the workload, verify) rather than serving."""
        return str(self.spec.get("restart", "no")) == "no" and self.is_project


@dataclass
class ComposeFile:
    path: Path
    data: dict[str, Any]
    services: dict[str, Service]

    @property
    def root(self) -> Path:
        return self.path.parent

    def config_content(self, name: str) -> str | None:
        config = self.data.get("configs", {}).get(name, {})
        content = config.get("content")
        return None if content is None else str(content)

    def config_file(self, name: str) -> Path | None:
        config = self.data.get("configs", {}).get(name, {})
        return self.root / config["file"] if "file" in config else None


def _mounts(spec: Mapping[str, Any], named_volumes: Mapping[str, Any]) -> list[Mount]:
    mounts = []
    for volume in spec.get("volumes", []):
        if isinstance(volume, Mapping):
            source, target = str(volume.get("source", "")), str(volume["target"])
            read_only = bool(volume.get("read_only", False))
        else:
            source, target, *options = str(volume).split(":")
            read_only = "ro" in options
        kind = "volume" if source in named_volumes else "bind"
        mounts.append(Mount(kind, source, target, read_only))
    for config in spec.get("configs", []):
        source = config if isinstance(config, str) else config["source"]
        target = f"/{source}" if isinstance(config, str) else config.get("target", f"/{source}")
        mounts.append(Mount("config", source, target, True))
    return mounts


def load(path: Path, env: Mapping[str, str], profiles: frozenset[str] = frozenset()) -> ComposeFile:
    """The compose file at ``path`` interpolated with ``env``, with the services ``profiles`` enable."""
    data = _interpolate_tree(yaml.safe_load(path.read_text()), env)
    named_volumes = data.get("volumes", {}) or {}
    services = {}
    for name, spec in data["services"].items():
        wanted = set(spec.get("profiles", []))
        if wanted and not wanted & profiles:
            continue
        services[name] = Service(name, spec, _mounts(spec, named_volumes))
    return ComposeFile(path, data, services)


def start_order(compose: ComposeFile) -> list[str]:
    """Services ordered so every one comes after what it depends on (file order among equals).

    A dependency on a service outside the enabled profiles is dropped when marked
    ``required: false``, and an error otherwise (as Compose does).
    """
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise ComposeError(f"depends_on cycle through {name}")
        visiting.add(name)
        for dep, options in compose.services[name].depends_on.items():
            if dep in compose.services:
                visit(dep)
            elif options.get("required", True):
                raise ComposeError(f"{name}: depends on {dep}, which is not enabled")
        visiting.discard(name)
        order.append(name)

    for name in compose.services:
        visit(name)
    return order
