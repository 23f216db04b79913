"""What every benchmark's JSON result shares: the best run of each side and
their ratio (:func:`best_of`), and the machine it ran on (:func:`machine`)."""

from __future__ import annotations

from typing import Any

from bridge.cli.bench import machine

__all__ = ["best_of", "machine"]


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
