"""The index job's progress line: the lag it states must never be a 0 it did not measure."""

from __future__ import annotations

import json

from spark_consumers.jobs import progress_line


def report(end: dict[str, dict[str, int]], latest: dict[str, dict[str, int]] | None) -> dict[str, object]:
    source: dict[str, object] = {"endOffset": json.dumps(end)}
    if latest is not None:
        source["latestOffset"] = json.dumps(latest)
    return {"batchId": 3, "numInputRows": 10, "durationMs": {"triggerExecution": 500}, "sources": [source]}


def test_the_lag_is_what_the_source_saw_beyond_the_batch() -> None:
    line = progress_line(report({"t": {"0": 5, "1": 7}}, {"t": {"0": 9, "1": 7}}), None)
    assert line.startswith("batch 3: 10 rows in 0.50s") and ", 4 offsets behind" in line


def test_a_batch_recovered_from_the_offset_log_has_an_unknown_lag_not_zero() -> None:
    # Spark re-runs a batch a dead run had planned without asking the source for its latest offset
    line = progress_line(report({"t": {"0": 5}}, None), None)
    assert "unknown offsets behind" in line and " 0 offsets behind" not in line
