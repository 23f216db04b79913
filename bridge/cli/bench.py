"""``binlog-bridge bench NAME [options]``: run one benchmark, JSON on the last line.

Each benchmark is a module registered in the entry-point group ``binlog_bridge.benchmarks`` of
pyproject.toml (``tso = "bench.tso"``), so the kernel never names ``bench``. It exposes
``add_arguments(parser)`` and ``run(args) -> dict``; progress goes to stderr, and the returned
result is printed as one JSON object, the last line of stdout, with at least ``name``,
``value``, ``unit``, ``ceiling`` and ``ratio`` (value / ceiling), and the machine's ``cores``
and ``load_avg`` (:func:`machine`, added here when a benchmark has not put them in).
"""

from __future__ import annotations

import argparse
import json
import os
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

from bridge.errors import UserError

GROUP = "binlog_bridge.benchmarks"  # entry points: name = "module"
REQUIRED_KEYS = ("name", "value", "unit", "ceiling", "ratio")


def benchmarks() -> dict[str, str]:
    """Benchmark name -> its module, as registered (imported only when that benchmark runs)."""
    return {entry.name: entry.value for entry in entry_points(group=GROUP)}


def load_benchmark(name: str) -> ModuleType:
    """The module of the benchmark registered as ``name``."""
    found = [entry for entry in entry_points(group=GROUP) if entry.name == name]
    if not found:
        raise UserError(
            f"binlog-bridge bench: no benchmark {name!r} (known: {', '.join(sorted(benchmarks()))})"
        )
    module: ModuleType = found[0].load()
    return module


def machine() -> dict[str, Any]:
    """``cores`` (CPUs this process may use) and ``load_avg`` (1, 5, 15 min) now.

    The machines these figures come from are small and shared: a result
    without the load it was taken under cannot be compared with another."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 0
    return {"cores": cores, "load_avg": [round(x, 2) for x in os.getloadavg()]}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="run a benchmark; prints one JSON object as the last line",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", choices=sorted(benchmarks()), help="which benchmark")
    parser.add_argument(
        "options", nargs=argparse.REMAINDER, help="the benchmark's own options (see NAME --help)"
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    module = load_benchmark(args.name)
    parser = argparse.ArgumentParser(prog=f"binlog-bridge bench {args.name}", description=module.__doc__)
    module.add_arguments(parser)
    options = parser.parse_args(args.options)
    result: dict[str, Any] = module.run(options)
    missing = [k for k in REQUIRED_KEYS if k not in result]
    if missing:
        raise RuntimeError(f"benchmark {args.name} returned no {', '.join(missing)}")  # a bug in the bench
    for key, value in machine().items():
        result.setdefault(key, value)
    print(json.dumps(result, sort_keys=False), flush=True)
    return 0
