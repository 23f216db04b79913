"""What every benchmark's JSON result shares: the best run of each side and
their ratio (:func:`best_of`), and the machine it ran on (:func:`machine`)."""

from __future__ import annotations

import os
from typing import Any


def machine() -> dict[str, Any]:
    """``cores`` (CPUs this process may use) and ``load_avg`` (1, 5, 15 min) now.

    The machines these figures come from are small and shared: a result
    without the load it was taken under cannot be compared with another."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 0
    return {"cores": cores, "load_avg": [round(x, 2) for x in os.getloadavg()]}


def best_of(
    name: str, unit: str, values: list[float], ceilings: list[float], ceiling_runs: str
) -> dict[str, Any]:
    """``name``, ``value``, ``unit``, ``ceiling``, ``ratio`` and ``runs`` (every run of both sides;
    ``ceiling_runs`` names the ceiling's list) from repeated, alternating runs."""
    value, ceiling = max(values), max(ceilings)
    return {
        "name": name,
        "value": round(value, 1),
        "unit": unit,
        "ceiling": round(ceiling, 1),
        "ratio": float(f"{value / ceiling:.4g}") if ceiling else 0.0,
        "runs": {"sink": [round(v, 1) for v in values], ceiling_runs: [round(c, 1) for c in ceilings]},
    }
