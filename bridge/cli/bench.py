"""``binlog-bridge bench NAME [options]``: run one benchmark, JSON on the last line.

Each benchmark is a module under ``bench/`` named in :data:`BENCHES`. It
exposes ``add_arguments(parser)`` and ``run(args) -> dict``; progress goes to
stderr, and the returned result is printed as one JSON object, the last line
of stdout, with at least ``name``, ``value``, ``unit``, ``ceiling`` and
``ratio`` (value / ceiling), and the machine's ``cores`` and ``load_avg``
(:func:`bench.result.machine`, added here when a benchmark has not put them in).
"""

from __future__ import annotations

import argparse
import importlib
import json
from typing import Any

# benchmark name -> module; imported only when that benchmark runs
BENCHES: dict[str, str] = {
    "tso": "bench.tso",
    "rowcodec": "bench.rowcodec",
    "pump-index": "bench.pump_index",
    "pump": "bench.pump",
    "drainer": "bench.drainer",
    "latency": "bench.latency",
    "mysql": "bench.mysql",
    "bigtxn": "bench.bigtxn",
    "kafka": "bench.kafka",
    "spark": "bench.spark",
    "capture": "bench.capture",
    "redis": "bench.redis",
}

REQUIRED_KEYS = ("name", "value", "unit", "ceiling", "ratio")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bench",
        help="run a benchmark; prints one JSON object as the last line",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", choices=sorted(BENCHES), help="which benchmark")
    parser.add_argument(
        "options", nargs=argparse.REMAINDER, help="the benchmark's own options (see NAME --help)"
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    module = importlib.import_module(BENCHES[args.name])
    parser = argparse.ArgumentParser(prog=f"binlog-bridge bench {args.name}", description=module.__doc__)
    module.add_arguments(parser)
    options = parser.parse_args(args.options)
    result: dict[str, Any] = module.run(options)
    missing = [k for k in REQUIRED_KEYS if k not in result]
    if missing:
        raise RuntimeError(f"benchmark {args.name} returned no {', '.join(missing)}")  # a bug in the bench
    for key, value in importlib.import_module("bench.result").machine().items():
        result.setdefault(key, value)
    print(json.dumps(result, sort_keys=False), flush=True)
    return 0
