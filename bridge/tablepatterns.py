"""Table selection by DM-style wildcards, shared by the drainer's ``[[route]]`` rules and the
Kafka sink's ``[[sink.kafka.topic-route]]``: ``*`` matches any run of characters, ``?`` one,
whole names, case-insensitive; targets are templates with ``{schema}`` / ``{table}`` placeholders.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bridge.errors import ConfigError

PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


def compile_pattern(pattern: str, key: str) -> re.Pattern[str]:
    """A DM-style wildcard (``*`` any run, ``?`` one character) as a whole-name, case-insensitive regex."""
    if not pattern:
        raise ConfigError(f"{key}: must not be empty")
    parts = [".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern]
    return re.compile("".join(parts), re.IGNORECASE | re.DOTALL)


@dataclass
class TablePatternsConfig:
    """The table selection of a rule: shared by ``[[route]]`` and ``[[sink.kafka.topic-route]]``."""

    schema_pattern: str = field(
        default="",
        metadata={"help": "upstream database name; * matches any run of characters, ? one (required)"},
    )
    table_pattern: str = field(
        default="",
        metadata={"help": 'upstream table name, * and ? as above; "" = every table of the database'},
    )


class TablePatterns:
    """``matches`` for a parsed rule holding ``schema_pattern`` and ``table_pattern`` (None: every table)."""

    schema_pattern: re.Pattern[str]
    table_pattern: re.Pattern[str] | None

    def matches(self, db: str, table: str) -> bool:
        if self.schema_pattern.fullmatch(db) is None:
            return False
        return self.table_pattern is None or self.table_pattern.fullmatch(table) is not None
