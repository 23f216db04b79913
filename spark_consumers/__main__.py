"""``python -m spark_consumers {index,snapshot,search,stats,bench}``: see docs/spark-consumers.md."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path
from typing import Any

from bridge.errors import UserError
from spark_consumers.source.kafka import BrokerError


def _job_flags(parser: argparse.ArgumentParser, output: str) -> None:
    parser.add_argument("--config", type=Path, help="a TOML file of these settings (flags win)")
    parser.add_argument("--bootstrap-servers", dest="bootstrap-servers")
    parser.add_argument("--topics", help="topic names or globs, comma-separated ('bridge.shop.*')")
    parser.add_argument("--schema-registry-url", dest="schema-registry-url",
                        help="Confluent wire format; leave out for single-object encoding")  # fmt: skip
    parser.add_argument(f"--{output}", help=f"the {output} folder")
    parser.add_argument("--checkpoint", help="Spark's checkpoint folder (offsets); keep it with the output")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--available-now", dest="available-now", action="store_true", default=None,
                      help="apply everything there now, then stop")  # fmt: skip
    mode.add_argument("--trigger-interval", dest="trigger-interval", help="micro-batch interval (2s)")
    parser.add_argument("--max-offsets-per-trigger", dest="max-offsets-per-trigger", type=int,
                        help="offsets per micro-batch (200000; 0: no bound)")  # fmt: skip
    parser.add_argument("--master", help="local[2] (default), spark://host:7077")
    if output == "index":
        parser.add_argument("--shards", type=int,
                            help="index shards at creation (default: direct: the topics' partition "
                                 "count; shuffle: Spark's parallelism)")  # fmt: skip
        parser.add_argument("--index-mode", dest="index-mode", choices=["direct", "shuffle"],
                            help="direct (default): each shard task reads its own Kafka partitions; "
                                 "shuffle: rows through Spark, repartitioned by document")  # fmt: skip
    parser.add_argument("--source", choices=["python", "kafka"],
                        help="python: this project's data source (default); kafka: Spark's own")  # fmt: skip


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m spark_consumers", description=__doc__)
    top.add_argument("--log-level", default="warning")
    commands = top.add_subparsers(dest="command", required=True)
    _job_flags(commands.add_parser("index", help="keep a tantivy search index of the change topics"), "index")
    _job_flags(commands.add_parser("snapshot", help="keep a Parquet snapshot per table"), "snapshot")
    search = commands.add_parser("search", help="query an index; JSON lines with the score")
    search.add_argument("--index", type=Path, required=True)
    search.add_argument("query")
    search.add_argument("--table", help="only documents of db.table")
    search.add_argument("--limit", type=int, default=10)
    stats = commands.add_parser("stats", help="documents per table, last commit_ts indexed, lag")
    stats.add_argument("--index", type=Path, required=True)
    bench = commands.add_parser("bench", help="the same as binlog-bridge bench spark")
    bench.add_argument("options", nargs=argparse.REMAINDER)
    return top


def run_job(kind: str, args: argparse.Namespace) -> int:
    from spark_consumers.config import build_config, load_toml
    from spark_consumers.jobs import StopFlag, run
    from spark_consumers.session import driver_logging, logging_option, spark_session

    flags: dict[str, Any] = {
        k: v
        for k, v in vars(args).items()
        if "-" in k or k in ("topics", "master", "source", "checkpoint", "shards", kind)
    }
    config = build_config(kind, flags, load_toml(args.config) if args.config else {})
    conf = dict(config.spark_conf)
    properties = None
    log_file = Path(f"{config.checkpoint}.spark.log")
    console = args.log_level.lower() in ("debug", "info")  # Spark's own log in the terminal too
    if "spark.driver.extraJavaOptions" not in conf:  # the user's own JVM options win
        properties = driver_logging(log_file, "info" if console else "warn", console)
        conf.update(logging_option(properties))
    try:
        spark = spark_session(config.master, f"bridge-{kind}", conf, None if console else log_file)
    finally:
        if properties is not None:
            properties.unlink(missing_ok=True)  # read once, at the JVM's start
    stop = StopFlag()
    stop.install()  # after the session: SparkContext installs a SIGINT handler of its own
    try:
        return run(spark, config, stop)
    except Exception as exc:  # noqa: BLE001 - Spark's failures come as py4j/pyspark errors of many kinds
        message, status = failure(exc)
        print(f"error: {message} (Spark's log: {log_file})", file=sys.stderr)
        return status
    finally:
        spark.stop()


# the project's exit-code convention (docs/operations.md)
EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 1, 2, 3
_STATUS = {"BrokerError": EXIT_UNREACHABLE, "DecodeError": EXIT_FAILED}
_OUR_ERROR = re.compile(r"\b(BrokerError|ConfigError|UserError|SchemaError|DecodeError): ([^\n]+)")


def failure(exc: BaseException) -> tuple[str, int]:
    """A failed query as one line and an exit status: the cause our code raised, wherever Spark
    wrapped it (a driver-side source call or a task), else the first line Spark gives."""
    text = str(exc)
    name = type(exc).__name__
    if name in ("BrokerError", "ConfigError", "UserError", "SchemaError", "DecodeError"):
        return text.splitlines()[0] if text else name, _STATUS.get(name, EXIT_USAGE)  # raised here
    found = _OUR_ERROR.search(text)
    if found is not None:
        return found.group(2).strip(), _STATUS.get(found.group(1), EXIT_USAGE)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0][:400] if lines else type(exc).__name__), EXIT_FAILED


def run_bench(options: list[str]) -> int:
    """``bench spark`` without the binlog-bridge front door: the same JSON last line."""
    import json

    from bridge.cli.bench import load_benchmark

    bench_spark = load_benchmark("spark")  # registered by bench/ (pyproject entry points)

    bench_parser = argparse.ArgumentParser(
        prog="python -m spark_consumers bench", description=bench_spark.__doc__
    )
    bench_spark.add_arguments(bench_parser)
    print(json.dumps(bench_spark.run(bench_parser.parse_args(options))), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # its own options, parsed by bench.spark
        return run_bench(argv[1:])
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        if args.command in ("index", "snapshot"):
            return run_job(args.command, args)
        from spark_consumers.index import search

        if args.command == "search":
            for found in search.search(args.index, args.query, args.table, args.limit):
                print(search.dumps(found))
            return 0
        if args.command == "stats":
            print(search.dumps(search.stats(args.index)))
            return 0
        return 2  # unreachable: bench was handled before parsing
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE if isinstance(exc, BrokerError) else EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
