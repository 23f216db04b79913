"""Help text without reST markup: the commands' docstrings serve as ``--help`` and as
generated docs, where ````x```` and ``:role:`x``` would show as typed."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

_DOUBLE_BACKTICKS = re.compile(r"``(.+?)``", re.S)
_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def plain(text: str) -> str:
    """``text`` with reST literals and roles (````x````, ``:data:`x```) as single-backtick code."""
    return _ROLE.sub(r"`\1`", _DOUBLE_BACKTICKS.sub(r"`\1`", text))


def sub_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser below ``parser`` (sub-commands, their actions, ...), depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield child
                yield from sub_parsers(child)


def plain_help(parser: argparse.ArgumentParser) -> None:
    """Strip reST markup from the descriptions, epilogs and option help of ``parser`` and below."""
    for each in (parser, *sub_parsers(parser)):
        each.description = plain(each.description) if each.description else each.description
        each.epilog = plain(each.epilog) if each.epilog else each.epilog
        for action in each._actions:
            if isinstance(action.help, str):
                action.help = plain(action.help)
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    choice.help = plain(choice.help) if isinstance(choice.help, str) else choice.help
