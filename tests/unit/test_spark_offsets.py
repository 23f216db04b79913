"""spark_consumers.source.offsets and .kafka.select_topics, spark_consumers.config: the pure parts
of the data source and the job settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from bridge.errors import ConfigError
from spark_consumers.config import build_config, parse_duration
from spark_consumers.source import offsets
from spark_consumers.source.datasource import SourceOptions
from spark_consumers.source.kafka import select_topics


def test_ranges_start_new_partitions_at_zero_and_skip_empty_ones() -> None:
    start = {"a": {"0": 5, "1": 7}}
    end = {"a": {"0": 9, "1": 7, "2": 3}, "b": {"0": 1}}
    assert list(offsets.ranges(start, end)) == [("a", 0, 5, 9), ("a", 2, 0, 3), ("b", 0, 0, 1)]
    assert offsets.behind(start, end) == 4 + 3 + 1


def test_merge_never_moves_back_and_clamp_keeps_to_the_target() -> None:
    assert offsets.merge({"a": {"0": 9}}, {"a": {"0": 4, "1": 2}}) == {"a": {"0": 9, "1": 2}}
    assert offsets.clamp({"a": {"0": 9, "1": 2}}, {"a": {"0": 5}}) == {"a": {"0": 5, "1": 0}}


def test_cap_shares_the_limit_by_what_each_partition_has_waiting() -> None:
    start = {"a": {"0": 0, "1": 0}}
    ends = {"a": {"0": 300, "1": 100}}
    capped = offsets.cap(start, ends, 100)
    assert capped == {"a": {"0": 75, "1": 25}} and offsets.behind(start, capped) == 100
    assert offsets.cap(start, ends, 1000) == ends
    tiny = offsets.cap({"a": {"0": 0, "1": 0, "2": 0}}, {"a": {"0": 1000, "1": 1, "2": 1}}, 3)
    assert offsets.behind({}, tiny) <= 3 and all(v >= 0 for v in tiny["a"].values())


def test_offsets_json_errors_name_the_option() -> None:
    assert offsets.parse_offsets('{"t": {"0": 4}}', "startingOffsets") == {"t": {"0": 4}}
    with pytest.raises(ConfigError, match="startingOffsets"):
        offsets.parse_offsets("[1]", "startingOffsets")


def test_globs_select_table_topics_and_their_ddl_topic_never_the_schemas_topic() -> None:
    names = ["b.shop.a", "b.shop.b", "b.other.c", "b._ddl", "b._schemas", "c.shop.a"]
    assert select_topics(names, ["b.shop.*"], with_ddl=True) == ["b._ddl", "b.shop.a", "b.shop.b"]
    assert select_topics(names, ["b.*"], with_ddl=False) == ["b.other.c", "b.shop.a", "b.shop.b"]


def test_source_options_are_checked_by_name() -> None:
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        SourceOptions.parse({"topics": "x"})
    parsed = SourceOptions.parse(
        {
            "bootstrap.servers": "k:9092",
            "topics": "a.*, b.t",
            "maxOffsetsPerTrigger": "50",
            "kafka.client.id": "me",
        }
    )
    assert (
        parsed.topics == ("a.*", "b.t") and parsed.max_offsets == 50 and parsed.kafka == {"client.id": "me"}
    )
    assert parsed.schemas_topic_of("a.db.t") == "a._schemas"
    assert parsed.ddl_wait  # by default a DDL event waits for a watermark at or past it
    assert not SourceOptions.parse({"bootstrap.servers": "k", "topics": "t", "ddl.wait": "none"}).ddl_wait
    with pytest.raises(ConfigError, match=r"^ddl\.wait: 'soon'"):
        SourceOptions.parse({"bootstrap.servers": "k", "topics": "t", "ddl.wait": "soon"})


def test_job_config_flags_over_the_file_and_errors_name_the_key(tmp_path: Path) -> None:
    file = {"bootstrap-servers": "k:9092", "topics": ["p.*"], "checkpoint": "/c", "index": "/i",
            "trigger-interval": "500ms", "text-fields": {"db.t": ["title"]},
            "spark": {"spark.x": 1}}  # fmt: skip
    config = build_config("index", {"index": str(tmp_path), "master": "spark://m:7077"}, file)
    assert config.output == tmp_path and config.trigger_interval == 0.5 and config.master == "spark://m:7077"
    assert config.text_fields == {"db.t": ["title"]} and config.spark_conf == {"spark.x": "1"}
    with pytest.raises(ConfigError, match=r"^checkpoint: required"):
        build_config("index", {}, {**file, "checkpoint": ""})
    with pytest.raises(ConfigError, match=r"^trigger-interval"):
        build_config("index", {"trigger-interval": "soon"}, file)
    assert parse_duration("2s", "k") == 2.0 and parse_duration("1m", "k") == 60.0


def test_job_config_goes_through_the_one_config_builder(tmp_path: Path) -> None:
    """A misspelled key is refused with a hint and durations take the project's one grammar."""
    file = {"bootstrap-servers": "k:9092", "topics": "p.*, q.t", "checkpoint": "/c", "index": "/i"}
    with pytest.raises(ConfigError, match=r"^chekpoint: unknown key \(did you mean 'checkpoint'\?\)"):
        build_config("index", {}, {**file, "chekpoint": "/c"})
    with pytest.raises(ConfigError, match=r"^trigger-interval: expected a duration"):
        build_config("index", {"trigger-interval": "2 seconds"}, file)
    with pytest.raises(ConfigError, match=r"^text-fields: must be a table"):
        build_config("index", {}, {**file, "text-fields": "title"})
    config = build_config("index", {"trigger-interval": "1h", "shards": 4}, file)
    assert config.trigger_interval == 3600.0 and config.shards == 4 and config.topics == ["p.*", "q.t"]


def test_a_batch_cut_short_of_a_row_topic_reads_no_ddl() -> None:
    """A DDL never comes ahead of older changes still waiting in a row topic: while the bound cuts
    a row partition short, the DDL topic stays where it was; once rows reach their end, it moves."""
    start = {"p.db.t": {"0": 10}, "p._ddl": {"0": 2}}
    wanted = {"p.db.t": {"0": 110}, "p._ddl": {"0": 5}}
    capped = offsets.cap(start, wanted, 50)
    held = offsets.hold_back_ddl(start, capped, wanted, "._ddl")
    assert held["p._ddl"] == {"0": 2} and held["p.db.t"] == capped["p.db.t"]
    assert offsets.hold_back_ddl(start, wanted, wanted, "._ddl") == wanted  # nothing cut: DDL read
    new_topic = {"p.db.t": {"0": 20}, "p._ddl": {"0": 5}}
    assert offsets.hold_back_ddl({}, new_topic, wanted, "._ddl")["p._ddl"] == {"0": 0}


def test_a_ddl_event_waits_in_its_topic_until_a_watermark_reaches_its_commit_ts() -> None:
    from spark_consumers.source.kafka import cut_at

    assert cut_at([], 9) == (9, False)
    assert cut_at([(3, "resolved", 5), (4, "resolved", 6)], 9) == (9, False)  # watermarks only
    assert cut_at([(3, "ddl", 20), (4, "resolved", 13)], 9) == (3, False)  # no watermark at 20 yet
    assert cut_at([(3, "ddl", 20), (4, "resolved", 13), (5, "resolved", 20)], 9) == (9, True)
    # the first waiting event holds back every later one, passed or not
    assert cut_at([(3, "ddl", 20), (4, "ddl", 30), (5, "resolved", 25), (6, "ddl", 26)], 9) == (4, True)
    assert cut_at([(3, "ddl", 40), (4, "ddl", 30), (5, "resolved", 35)], 9) == (3, False)
