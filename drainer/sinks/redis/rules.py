"""Rules and key templates, compiled per table.

A rule (:class:`~drainer.sinks.redis.config.RuleConfig`) applies to every
table its ``db`` and ``table`` patterns match: a name (compared without
regard to case, as MySQL names usually are), ``"*"`` (any), or ``"/regex/"``
(:func:`re.fullmatch`, case-sensitive unless the regex says ``(?i)``). Every
matching rule applies, in the order written.

A key template is text with placeholders: ``{db}``, ``{table}``, ``{pk}``
(the primary key's columns, else the first NOT NULL unique key's, joined by
``key-separator``), ``{name}`` for a column (case-insensitively; ``{col:db}``
for a column whose name is one of the three words), and ``{{``/``}}`` for
literal braces. A template that names a column the table lacks is a
:class:`TemplateError` (:meth:`Rules.plan` turns it into a ConfigError
naming rule, table and field). ``{pk}`` on a table without any key is an
error for a rule that names the table, and skips the table for a rule that
matched it by ``*`` or regex (it is logged once).
"""

from __future__ import annotations

import logging
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass

from bridge.errors import ConfigError
from bridge.proto import row_pb2
from bridge.schema import key_positions, table_name
from drainer.sinks.redis.config import PREFIX, RuleConfig
from drainer.sinks.redis.render import DEFAULT_NULL_TOKEN, key_text

_TEXT_OF = {int: str, str: str}  # the usual key columns, without a call to key_text

log = logging.getLogger(__name__)

_META = ("db", "table", "pk")
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")

Image = tuple[object, ...]


class TemplateError(ConfigError):
    """A template does not fit a table: ``field`` is what it names."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class Pattern:
    """A ``db``/``table`` pattern of a rule."""

    def __init__(self, text: str, key: str) -> None:
        self.text = text
        self.literal = not (text == "*" or (len(text) > 2 and text.startswith("/") and text.endswith("/")))
        self._regex: re.Pattern[str] | None = None
        if text.startswith("/") and text.endswith("/") and len(text) > 2:
            try:
                self._regex = re.compile(text[1:-1])
            except re.error as exc:
                raise ConfigError(f"{key}: invalid regex {text!r}: {exc}") from None
        elif not text:
            raise ConfigError(f'{key}: empty; a name, "*" or "/regex/"')

    def matches(self, name: str) -> bool:
        if self.text == "*":
            return True
        if self._regex is not None:
            return self._regex.fullmatch(name) is not None
        return name.casefold() == self.text.casefold()


@dataclass(frozen=True)
class Template:
    """A parsed template: literal pieces around fields (``len(literals) == len(fields) + 1``)."""

    text: str
    literals: tuple[str, ...]
    fields: tuple[str, ...]

    @classmethod
    def parse(cls, text: str, key: str, allowed: Sequence[str] | None = None) -> Template:
        """Parse ``text``; ``allowed`` limits the fields (None: any column or meta field)."""
        literals, fields = [""], []
        try:
            parsed = list(string.Formatter().parse(text))
        except ValueError as exc:
            raise ConfigError(f"{key}: template {text!r}: {exc} (write {{{{ and }}}} for braces)") from None
        for literal, name, spec, conversion in parsed:
            literals[-1] += literal
            if name is None:
                continue
            if name == "col" and spec and not conversion:
                name, spec = f"col:{spec}", ""  # {col:name}: the column, whatever its name
            if spec or conversion:
                raise ConfigError(f"{key}: template {text!r}: {{{name}}} takes no format spec or conversion")
            if not name.strip():
                raise ConfigError(f"{key}: template {text!r}: an empty placeholder {{}}")
            if allowed is not None and name not in allowed:
                raise ConfigError(
                    f"{key}: template {text!r}: unknown placeholder {{{name}}}; allowed: "
                    + ", ".join(f"{{{a}}}" for a in allowed)
                )
            fields.append(name)
            literals.append("")
        if not text:
            raise ConfigError(f"{key}: an empty template")
        return cls(text, tuple(literals), tuple(fields))

    def meta(self, db: str, table: str) -> str:
        """The text of a template whose only fields are ``{db}`` and ``{table}``."""
        values = {"db": db, "table": table}
        out = [self.literals[0]]
        for name, literal in zip(self.fields, self.literals[1:], strict=True):
            out += [values[name], literal]
        return "".join(out)


@dataclass(frozen=True)
class KeyRenderer:
    """A key template compiled for one table: literals around column positions."""

    template: str
    literals: tuple[str, ...]
    positions: tuple[int, ...]
    null_token: str = DEFAULT_NULL_TOKEN

    def render(self, image: Image) -> str:
        null, lits, positions = self.null_token, self.literals, self.positions
        if len(positions) == 1:
            value = image[positions[0]]
            text = _TEXT_OF.get(type(value))
            return lits[0] + (text(value) if text is not None else key_text(value, null)) + lits[1]
        out = [lits[0]]
        for position, literal in zip(positions, lits[1:], strict=True):
            out += [key_text(image[position], null), literal]
        return "".join(out)

    def pattern(self) -> str:
        """The SCAN MATCH glob of every key this renders (each column a ``*``)."""
        return "*".join(_GLOB_SPECIAL.sub(r"\\\1", lit) for lit in self.literals)


def compile_key(
    template: Template, schema: row_pb2.TableSchema, separator: str, null_token: str
) -> KeyRenderer:
    """``template`` for ``schema``; :class:`TemplateError` naming a field the table lacks."""
    by_name = {column.name.casefold(): i for i, column in enumerate(schema.columns)}
    literals, positions = [template.literals[0]], []
    for name, literal in zip(template.fields, template.literals[1:], strict=True):
        if name == "db" or name == "table":
            literals[-1] += (schema.db if name == "db" else schema.table) + literal
            continue
        if name == "pk":
            keys = key_positions(schema)
            if not keys:
                raise TemplateError("has neither a primary key nor a NOT NULL unique key", "pk")
            for n, key_position in enumerate(keys):
                positions.append(key_position)
                literals.append(literal if n == len(keys) - 1 else separator)
            continue
        column = name[4:] if name.startswith("col:") else name
        found = by_name.get(column.casefold())
        if found is None:
            raise TemplateError(f"has no column {column!r}", column)
        positions.append(found)
        literals.append(literal)
    return KeyRenderer(template.text, tuple(literals), tuple(positions), null_token)


@dataclass(frozen=True)
class Rule:
    """A rule of the config with its patterns and templates parsed; ``index`` is its place in the list."""

    index: int
    config: RuleConfig
    db: Pattern
    table: Pattern
    keys: tuple[Template, ...]
    channel: Template
    stream: Template

    @property
    def where(self) -> str:
        return f"{PREFIX}rules[{self.index}]"

    def matches(self, schema: row_pb2.TableSchema) -> bool:
        return self.db.matches(schema.db) and self.table.matches(schema.table)

    def describe(self) -> str:
        return f"{self.where} (db {self.config.db!r}, table {self.config.table!r})"


@dataclass(frozen=True)
class TableRule:
    """A rule as it applies to one table: rendered keys, channel and stream."""

    rule: Rule
    keys: tuple[KeyRenderer, ...]
    channel: str
    stream: str

    def render_keys(self, image: Image) -> list[str]:
        return [key.render(image) for key in self.keys]


class Rules:
    """Every rule of the config; :meth:`plan` gives the rules of one table."""

    def __init__(self, configs: Sequence[RuleConfig], separator: str, null_token: str) -> None:
        self.separator = separator
        self.null_token = null_token
        self.rules = [self._parse(i, config) for i, config in enumerate(configs)]

    @staticmethod
    def _parse(index: int, config: RuleConfig) -> Rule:
        where = f"{PREFIX}rules[{index}]"
        keys = tuple(Template.parse(text, f"{where}.keys[{n}]") for n, text in enumerate(config.keys))
        meta = ("db", "table")
        return Rule(
            index,
            config,
            Pattern(config.db, f"{where}.db"),
            Pattern(config.table, f"{where}.table"),
            keys,
            Template.parse(config.channel, f"{where}.channel", meta),
            Template.parse(config.stream, f"{where}.stream", meta),
        )

    def plan(self, schema: row_pb2.TableSchema, context: str = "") -> tuple[TableRule, ...]:
        """The rules that apply to ``schema``, compiled; ConfigError naming rule, table and field.

        ``context`` says where the table came from (e.g. "at start-up" or the DDL), for messages.
        """
        out = []
        for rule in self.rules:
            if not rule.matches(schema):
                continue
            compiled = self._compile(rule, schema, context)
            if compiled is not None:
                out.append(compiled)
        return tuple(out)

    def _compile(self, rule: Rule, schema: row_pb2.TableSchema, context: str) -> TableRule | None:
        keys = []
        for n, template in enumerate(rule.keys):
            try:
                keys.append(compile_key(template, schema, self.separator, self.null_token))
            except TemplateError as exc:
                if exc.field == "pk" and not (rule.db.literal and rule.table.literal):
                    log.warning(
                        "redis sink: %s matches table %s, which %s: the rule skips the table",
                        rule.describe(),
                        table_name(schema),
                        exc,
                    )
                    return None
                raise ConfigError(field_error(rule, n, schema, exc, context)) from None
        channel = rule.channel.meta(schema.db, schema.table)
        stream = rule.stream.meta(schema.db, schema.table)
        return TableRule(rule, tuple(keys), channel, stream)


def field_error(rule: Rule, n: int, schema: row_pb2.TableSchema, exc: TemplateError, context: str) -> str:
    """The message for a template that does not fit a table: rule, table, field and the fix."""
    template = rule.keys[n].text
    what = f"{rule.describe()}: template {template!r} ({rule.where}.keys[{n}]) uses {{{exc.field}}}"
    fix = (
        f"fix the rule: change or remove that template, or narrow {rule.where}.table so that it no "
        f"longer matches {table_name(schema)}"
    )
    restart = "; then start the drainer again: it resumes before the DDL" if "DDL" in context else ""
    return f"{what}, but table {table_name(schema)} {exc}{context}; {fix}{restart}"
