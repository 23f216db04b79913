"""`--help` of every command and the generated docs/configuration.md show no reST markup,
and every configuration row says what its key means (issue 18)."""

from __future__ import annotations

import re
from pathlib import Path

from bridge.cli import build_parser
from bridge.cli.text import plain, sub_parsers

ROOT = Path(__file__).resolve().parents[2]
MARKUP = re.compile(r"``|:(data|func|class|mod|meth|attr|exc):`")


def test_plain_turns_rest_markup_into_code_spans() -> None:
    text = "``[tso]``: see :data:`INTERNAL` and :meth:`~a.B.c`"
    assert plain(text) == "`[tso]`: see `INTERNAL` and `a.B.c`"


def test_no_help_text_carries_rest_markup() -> None:
    parser = build_parser()
    parsers = [parser, *sub_parsers(parser)]
    assert len(parsers) >= 20  # every sub-command and ctl's actions are walked
    for each in parsers:
        text = each.format_help()
        assert not MARKUP.search(text), f"{each.prog} --help:\n{text}"


def test_configuration_reference_has_no_markup_and_no_empty_meaning() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert not MARKUP.search(text)
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) > 100
    empty = [cells[1] for cells in rows if not cells[4].replace("*(secret)*", "").strip()]
    assert empty == []
