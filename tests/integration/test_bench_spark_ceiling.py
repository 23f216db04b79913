"""bench/spark_ceiling.py's step costs: every step of the hand-written loop timed alone over the
messages of a real topic (the Kafka sink's encoding, ``bench spark``'s producer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.spark import produce
from bench.spark_ceiling import stage_costs

pytestmark = [pytest.mark.kafka]

STEPS = ("decode", "convert", "document", "delete", "add", "commit")


def test_each_step_of_the_ceiling_is_timed_over_the_sample(
    kafka_bootstrap: str, unique_name: str, tmp_path: Path
) -> None:
    topic = produce(kafka_bootstrap, unique_name, 600, 0.2, 2)
    costs = stage_costs(kafka_bootstrap, topic, 2, 500, tmp_path / "index")
    assert costs["sample"] == 500  # the first 500 of the 600 changes
    assert set(costs) == {*STEPS, "sum", "sample"}
    assert all(costs[step] >= 0 for step in STEPS)
    assert costs["decode"] > 0 and costs["add"] > 0  # CPU was spent where the work is
    assert costs["sum"] == pytest.approx(sum(costs[step] for step in STEPS), abs=0.05)
    assert (tmp_path / "index" / "meta.json").exists()  # the documents were committed to an index
