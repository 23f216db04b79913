"""What a DDL statement does, read from its text: kind, table, renames.

The writer needs to know which table a DDL acts on before running it (to
lock that table against DML) and which ``SchemaChange.Kind`` its binlog
carries; the resulting schema itself is read from the database afterwards.
Recognised, in MySQL and SQLite spelling (names may be quoted with
backticks, double quotes or brackets, and qualified by the upstream's own
database):

==============================================  ==============  =====================
statement                                       kind            table
==============================================  ==============  =====================
``CREATE TABLE [IF NOT EXISTS] t (...)``        CREATE_TABLE    t
``DROP TABLE [IF EXISTS] t``                    DROP_TABLE      t (one table)
``ALTER TABLE t ...``                           ALTER_TABLE     t
``ALTER TABLE t RENAME [TO|AS] u``              RENAME_TABLE    u (old: t)
``RENAME TABLE t TO u``                         RENAME_TABLE    u (old: t)
``CREATE [UNIQUE] INDEX i ON t (...)``          ALTER_TABLE     t
``DROP INDEX i [ON t]``                         ALTER_TABLE     t (else found by index)
``TRUNCATE [TABLE] t``                          TRUNCATE_TABLE  t
==============================================  ==============  =====================

``RENAME COLUMN a TO b`` and MySQL's ``CHANGE [COLUMN] a b`` inside an ALTER
are recorded so the column keeps its id. Anything else (databases, views,
temporary tables, ``CREATE TABLE ... SELECT``, several tables at once) raises
:class:`UnsupportedSchema`: the writer would not know what to put in the binlog.

:func:`refuse_nondeterministic` refuses, before anything runs, a DEFAULT or
generated-column expression whose value a downstream cannot reproduce
(``RAND()``, ``UUID()``, ``UUID_SHORT()``, ``SYSDATE()``, the connection's
user or id, sequences): the existing rows upstream would get values no
binlog carries. ``CURRENT_TIMESTAMP``/``NOW()`` are reproducible: the writer
fixes the DDL's session time and the binlog records it — in a DEFAULT; in a
generated column (which MariaDB evaluates on every read) they are refused too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bridge.producer.errors import UnsupportedSchema
from bridge.proto import row_pb2

Kind = row_pb2.SchemaChange.Kind

_IDENT = r'(?:`(?:[^`]|``)+`|"(?:[^"]|"")+"|\[[^\]]+\]|[A-Za-z_][\w$]*)'
_QNAME = rf"({_IDENT}(?:\s*\.\s*{_IDENT})?)"
_END = r"\s*;?\s*$"
_FLAGS = re.IGNORECASE | re.DOTALL

_CREATE = re.compile(rf"^CREATE\s+TABLE\s+(IF\s+NOT\s+EXISTS\s+)?{_QNAME}", _FLAGS)
_DROP = re.compile(rf"^DROP\s+TABLE\s+(IF\s+EXISTS\s+)?{_QNAME}(?:\s+(?:RESTRICT|CASCADE))?{_END}", _FLAGS)
_RENAME = re.compile(rf"^RENAME\s+TABLE\s+{_QNAME}\s+TO\s+{_QNAME}{_END}", _FLAGS)
_ALTER = re.compile(rf"^ALTER\s+(?:ONLINE\s+|IGNORE\s+)*TABLE\s+{_QNAME}\s", _FLAGS)
_ALTER_RENAME = re.compile(rf"\bRENAME\s+(?:TO\s+|AS\s+)?(?!COLUMN\b|INDEX\b|KEY\b){_QNAME}", _FLAGS)
_CREATE_INDEX = re.compile(
    rf"^CREATE\s+(?:UNIQUE\s+|FULLTEXT\s+)?INDEX\s+(?:IF\s+NOT\s+EXISTS\s+)?{_QNAME}"
    rf"(?:\s+USING\s+\w+)?\s+ON\s+{_QNAME}",
    _FLAGS,
)
_DROP_INDEX = re.compile(rf"^DROP\s+INDEX\s+(?:IF\s+EXISTS\s+)?{_QNAME}(?:\s+ON\s+{_QNAME})?{_END}", _FLAGS)
_TRUNCATE = re.compile(rf"^TRUNCATE\s+(?:TABLE\s+)?{_QNAME}{_END}", _FLAGS)
_COLUMN_RENAME = re.compile(rf"\bRENAME\s+COLUMN\s+({_IDENT})\s+TO\s+({_IDENT})", _FLAGS)
_COLUMN_CHANGE = re.compile(rf"\bCHANGE\s+(?:COLUMN\s+)?(?!COLUMN\b)({_IDENT})\s+({_IDENT})", _FLAGS)
_LEADING_COMMENTS = re.compile(r"^(?:\s+|/\*.*?\*/|--[^\n]*(?:\n|$)|#[^\n]*(?:\n|$))*", re.DOTALL)


_NONDETERMINISTIC = re.compile(
    r"\b(RAND|UUID|UUID_SHORT|SYS_GUID|SYSDATE|CONNECTION_ID|CURRENT_USER|SESSION_USER|SYSTEM_USER|USER"
    r"|CURRENT_ROLE|LAST_INSERT_ID|RANDOM_BYTES|RANDOM|RANDOMBLOB|NEXTVAL|LASTVAL|NEXT\s+VALUE\s+FOR)\b\s*(\(|(?<=CURRENT_USER)"
    r"|(?<=CURRENT_ROLE)|(?<=FOR))",
    re.IGNORECASE,
)
_CLOCK = re.compile(
    r"\b(NOW|CURRENT_TIMESTAMP|LOCALTIME|LOCALTIMESTAMP|CURDATE|CURRENT_DATE|CURTIME|CURRENT_TIME"
    r"|UNIX_TIMESTAMP|UTC_TIMESTAMP|UTC_DATE|UTC_TIME)\b",
    re.IGNORECASE,
)
_EXPRESSION_START = re.compile(r"\b(?:DEFAULT|AS)\s*(?=\()|\bDEFAULT\s+(?=[A-Za-z_]\w*\s*\()", re.IGNORECASE)
_QUOTED = re.compile(r"'(?:[^'\\]|''|\\.)*'|\"(?:[^\"\\]|\"\"|\\.)*\"|`(?:[^`]|``)*`", re.DOTALL)


def _expressions(text: str) -> list[tuple[bool, str]]:
    """(generated?, expression) for each parenthesised expression after DEFAULT / AS, and each
    function-call default (``DEFAULT f(..)``)."""
    found: list[tuple[bool, str]] = []
    for start in _EXPRESSION_START.finditer(text):
        depth, i = 0, start.end()
        while i < len(text):
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
            if depth == 0 and text[i - 1] == ")":
                break
        found.append((start.group(0).upper().startswith("AS"), text[start.end() : i]))
    return found


def refuse_nondeterministic(sql: str) -> None:
    """Raise :class:`UnsupportedSchema` when a DEFAULT or generated-column expression of ``sql``
    calls a function whose value a downstream cannot reproduce (see the module docstring)."""
    text = _QUOTED.sub(lambda m: m.group(0)[0] * 2, _LEADING_COMMENTS.sub("", sql, count=1))
    for generated, expression in _expressions(text):
        if generated and (clock := _CLOCK.search(expression)):
            raise UnsupportedSchema(
                f"DDL refused before it ran: {clock.group(1).upper()} in the generated column expression "
                f"{' '.join(expression.split())[:120]!r} is evaluated whenever a row is read, so no "
                "downstream holds the same values; store the time in a column with a DEFAULT instead"
            )
        if m := _NONDETERMINISTIC.search(expression):
            call = " ".join(m.group(1).upper().split())
            raise UnsupportedSchema(
                f"DDL refused before it ran: {call} in {' '.join(expression.split())[:120]!r} gives each "
                "row a value no binlog carries, so a downstream cannot reproduce it; use a constant or "
                "CURRENT_TIMESTAMP/NOW() (the writer fixes the DDL's session time), or fill the column "
                "with an UPDATE in a transaction"
            )


@dataclass(frozen=True)
class DdlStatement:
    """A recognised DDL. ``table`` is the table after the statement (the new name of a rename)."""

    kind: row_pb2.SchemaChange.Kind
    table: str
    old_table: str = ""
    index: str = ""  # DROP INDEX without ON: the index, whose table is looked up
    if_exists: bool = False  # IF EXISTS / IF NOT EXISTS: a no-op is not an error
    renames: dict[str, str] = field(default_factory=dict)  # column renames, lower-case old -> new

    @property
    def target(self) -> str:
        """The table to lock: the one that exists before the statement runs."""
        return self.old_table or self.table


def unquote(identifier: str) -> str:
    """An identifier's name without its quotes (doubled quote characters undone)."""
    first = identifier[:1]
    if first == "`":
        return identifier[1:-1].replace("``", "`")
    if first == '"':
        return identifier[1:-1].replace('""', '"')
    if first == "[":
        return identifier[1:-1]
    return identifier


def _table(qualified: str, database: str) -> str:
    parts = re.findall(_IDENT, qualified)
    if len(parts) == 2 and unquote(parts[0]) != database:
        raise UnsupportedSchema(
            f"DDL names {qualified}: the writer works in database {database!r} only; leave names unqualified"
        )
    return unquote(parts[-1])


def parse_ddl(sql: str, database: str) -> DdlStatement:
    """Recognise ``sql`` (see the module table); :class:`UnsupportedSchema` if it is none of those."""
    text = _LEADING_COMMENTS.sub("", sql, count=1)
    if m := _CREATE.match(text):
        if re.search(r"\bSELECT\b|\bLIKE\s", text, re.IGNORECASE):
            raise UnsupportedSchema(
                "CREATE TABLE ... SELECT/LIKE is not carried: "
                "create the table, then copy rows in a transaction"
            )
        return DdlStatement(Kind.CREATE_TABLE, _table(m.group(2), database), if_exists=bool(m.group(1)))
    if m := _DROP.match(text):
        return DdlStatement(Kind.DROP_TABLE, _table(m.group(2), database), if_exists=bool(m.group(1)))
    if m := _RENAME.match(text):
        old, new = _table(m.group(1), database), _table(m.group(2), database)
        return DdlStatement(Kind.RENAME_TABLE, new, old_table=old)
    if m := _ALTER.match(text):
        return _alter(text, _table(m.group(1), database), text[m.end() :], database)
    if m := _CREATE_INDEX.match(text):
        return DdlStatement(Kind.ALTER_TABLE, _table(m.group(2), database))
    if m := _DROP_INDEX.match(text):
        if m.group(2):
            return DdlStatement(Kind.ALTER_TABLE, _table(m.group(2), database))
        return DdlStatement(Kind.ALTER_TABLE, "", index=_table(m.group(1), database))
    if m := _TRUNCATE.match(text):
        return DdlStatement(Kind.TRUNCATE_TABLE, _table(m.group(1), database))
    first = " ".join(text.split()[:3])
    raise UnsupportedSchema(
        f"DDL {first!r}... is not carried: the writer handles CREATE/DROP/ALTER/RENAME/TRUNCATE TABLE "
        "and CREATE/DROP INDEX, one table at a time"
    )


def _alter(text: str, table: str, clauses: str, database: str) -> DdlStatement:
    renames = {
        unquote(m.group(1)).lower(): unquote(m.group(2)).lower()
        for pattern in (_COLUMN_RENAME, _COLUMN_CHANGE)
        for m in pattern.finditer(clauses)
    }
    moved = _ALTER_RENAME.search(clauses)
    if moved:
        new = _table(moved.group(1), database)
        return DdlStatement(Kind.RENAME_TABLE, new, old_table=table, renames=renames)
    return DdlStatement(Kind.ALTER_TABLE, table, renames=renames)
