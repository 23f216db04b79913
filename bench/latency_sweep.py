"""``bench latency --sweep``: the highest offered rate each sink set keeps up with.

For each sink set of ``--sweep-sets`` (default ``mysql``, ``kafka`` and
``mysql,kafka``) a binary search over the offered rate, in ``--sweep-steps``
runs of ``bench latency`` (``--duration`` each, 10 s unless given) between 0
and ``--sweep-max`` rows/s, rounded to ``--sweep-step`` rows/s. A rate
**passes** when every row arrived within ``--timeout``, the producer offered at
least 95 % of it, the worst p99 of the sinks is at most 1 s, and the p99 does
not grow quarter over quarter: the last quarter's p99 is at most 1.5 times the
first quarter's + 100 ms (a pipeline falling behind grows by seconds). The
first probe is half of ``--sweep-max``; each pass moves up, each failure down.

Time: a run takes about ``duration`` + 15 s (starting the processes, the idle
sample, the catch-up); with the defaults (3 sets, 4 steps, 10 s) the sweep
takes 8-10 minutes. ``value`` is the mysql,kafka set's rate (else the first
set's), ``ceiling`` the issue's goal, 10,000 rows/s; every probe's figures
and CPU budget are in ``sets``.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
from collections.abc import Callable
from typing import Any

GOAL_RATE = 10_000.0
DEFAULT_SETS = "mysql kafka mysql,kafka"
FLAT_FACTOR, FLAT_SLACK_MS = 1.5, 100.0
OFFERED_SHARE = 0.95


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sweep", action="store_true", help="binary-search the highest rate per sink set")
    parser.add_argument(
        "--sweep-sets", default=DEFAULT_SETS, help=f'space-separated (default "{DEFAULT_SETS}")'
    )
    parser.add_argument("--sweep-max", type=float, default=16_000, help="highest rate tried (default 16000)")
    parser.add_argument("--sweep-steps", type=int, default=4, help="runs per sink set (default 4)")
    parser.add_argument(
        "--sweep-step", type=float, default=500, help="rates are multiples of this (default 500)"
    )


def verdict(result: dict[str, Any]) -> str:
    """ "" when one ``bench latency`` result keeps up with its rate, else why not."""
    if result["achieved_rate"] < OFFERED_SHARE * result["offered_rate"]:
        return f"offered only {result['achieved_rate']:,.0f} rows/s"
    for sink, figures in result["sinks"].items():
        if figures["p99_ms"] > 1000:
            return f"{sink} p99 {figures['p99_ms']:,.0f} ms"
        quarters = [q for q in figures["p99_ms_by_quarter"] if q is not None]
        if quarters and quarters[-1] > FLAT_FACTOR * quarters[0] + FLAT_SLACK_MS:
            return f"{sink} p99 grows by quarter: {quarters[0]:,.0f} -> {quarters[-1]:,.0f} ms"
    return ""


def probe(
    args: argparse.Namespace, sinks: str, rate: float, run: Callable[[argparse.Namespace], dict[str, Any]]
) -> dict[str, Any]:
    one = copy.copy(args)
    one.sweep, one.sinks, one.rate = False, sinks, rate
    began = time.monotonic()
    try:
        result = run(one)
        failed = verdict(result)
        figures = {
            "p99_ms": {s: f["p99_ms"] for s, f in result["sinks"].items()},
            "p99_ms_by_quarter": {s: f["p99_ms_by_quarter"] for s, f in result["sinks"].items()},
            "achieved_rate": result["achieved_rate"],
            "bridge_us_per_row": result["budget"]["bridge_us_per_row"],
            "cpu_us_per_row": result["budget"]["cpu_us_per_row"],
            "load_avg": result["load_avg"],
        }
    except RuntimeError as exc:  # not every row arrived in time, or a process failed
        failed, figures = f"failed: {exc}", {}
    passed = not failed
    print(
        f"bench latency --sweep: {sinks} at {rate:,.0f} rows/s: {'pass' if passed else failed}",
        file=sys.stderr,
        flush=True,
    )
    return {
        "rate": rate,
        "passed": passed,
        "why": failed,
        "seconds": round(time.monotonic() - began, 1),
        **figures,
    }


def sweep_set(
    args: argparse.Namespace, sinks: str, run: Callable[[argparse.Namespace], dict[str, Any]]
) -> dict[str, Any]:
    low, high = 0.0, args.sweep_max + args.sweep_step  # low passes (or is 0), high fails
    probes = []
    for _ in range(args.sweep_steps):
        rate = round((low + high) / 2 / args.sweep_step) * args.sweep_step
        if rate <= low or rate >= high:
            break
        outcome = probe(args, sinks, rate, run)
        probes.append(outcome)
        low, high = (rate, high) if outcome["passed"] else (low, rate)
    return {"best_rate": low, "probes": probes}


def sweep(args: argparse.Namespace, run: Callable[[argparse.Namespace], dict[str, Any]]) -> dict[str, Any]:
    sets = args.sweep_sets.split()
    if args.sweep_steps < 1 or args.sweep_max < args.sweep_step or args.sweep_step <= 0 or not sets:
        raise SystemExit(
            "bench latency: --sweep-steps, --sweep-max, --sweep-step or --sweep-sets out of range"
        )
    began = time.monotonic()
    results = {sinks: sweep_set(args, sinks, run) for sinks in sets}
    headline = "mysql,kafka" if "mysql,kafka" in results else sets[0]
    value = results[headline]["best_rate"]
    return {
        "name": "latency-sweep",
        "value": value,
        "unit": "rows/s",
        "ceiling": GOAL_RATE,
        "ratio": round(value / GOAL_RATE, 4),
        "sets": results,
        "best_rate": {sinks: r["best_rate"] for sinks, r in results.items()},
        "seconds": round(time.monotonic() - began, 1),
        "params": {
            "duration": args.duration,
            "steps": args.sweep_steps,
            "max": args.sweep_max,
            "step": args.sweep_step,
        },
        "value_is": f"the highest offered rate of the {headline} set with p99 <= 1 s, flat by quarter, "
        "every row arrived",
        "ceiling_is": "the issue's goal: 10,000 rows/s",
    }
