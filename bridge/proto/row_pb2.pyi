from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ColumnType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COLUMN_TYPE_UNSPECIFIED: _ClassVar[ColumnType]
    TINYINT: _ClassVar[ColumnType]
    SMALLINT: _ClassVar[ColumnType]
    MEDIUMINT: _ClassVar[ColumnType]
    INT: _ClassVar[ColumnType]
    BIGINT: _ClassVar[ColumnType]
    DECIMAL: _ClassVar[ColumnType]
    FLOAT: _ClassVar[ColumnType]
    DOUBLE: _ClassVar[ColumnType]
    BIT: _ClassVar[ColumnType]
    YEAR: _ClassVar[ColumnType]
    DATE: _ClassVar[ColumnType]
    TIME: _ClassVar[ColumnType]
    DATETIME: _ClassVar[ColumnType]
    TIMESTAMP: _ClassVar[ColumnType]
    CHAR: _ClassVar[ColumnType]
    VARCHAR: _ClassVar[ColumnType]
    TEXT: _ClassVar[ColumnType]
    BINARY: _ClassVar[ColumnType]
    VARBINARY: _ClassVar[ColumnType]
    BLOB: _ClassVar[ColumnType]
    JSON: _ClassVar[ColumnType]
    ENUM: _ClassVar[ColumnType]
    SET: _ClassVar[ColumnType]

class Generated(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NOT_GENERATED: _ClassVar[Generated]
    VIRTUAL: _ClassVar[Generated]
    STORED: _ClassVar[Generated]
COLUMN_TYPE_UNSPECIFIED: ColumnType
TINYINT: ColumnType
SMALLINT: ColumnType
MEDIUMINT: ColumnType
INT: ColumnType
BIGINT: ColumnType
DECIMAL: ColumnType
FLOAT: ColumnType
DOUBLE: ColumnType
BIT: ColumnType
YEAR: ColumnType
DATE: ColumnType
TIME: ColumnType
DATETIME: ColumnType
TIMESTAMP: ColumnType
CHAR: ColumnType
VARCHAR: ColumnType
TEXT: ColumnType
BINARY: ColumnType
VARBINARY: ColumnType
BLOB: ColumnType
JSON: ColumnType
ENUM: ColumnType
SET: ColumnType
NOT_GENERATED: Generated
VIRTUAL: Generated
STORED: Generated

class DateTime(_message.Message):
    __slots__ = ("year", "month", "day", "hour", "minute", "second", "microsecond")
    YEAR_FIELD_NUMBER: _ClassVar[int]
    MONTH_FIELD_NUMBER: _ClassVar[int]
    DAY_FIELD_NUMBER: _ClassVar[int]
    HOUR_FIELD_NUMBER: _ClassVar[int]
    MINUTE_FIELD_NUMBER: _ClassVar[int]
    SECOND_FIELD_NUMBER: _ClassVar[int]
    MICROSECOND_FIELD_NUMBER: _ClassVar[int]
    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: int
    microsecond: int
    def __init__(self, year: _Optional[int] = ..., month: _Optional[int] = ..., day: _Optional[int] = ..., hour: _Optional[int] = ..., minute: _Optional[int] = ..., second: _Optional[int] = ..., microsecond: _Optional[int] = ...) -> None: ...

class Datum(_message.Message):
    __slots__ = ("is_null", "int_value", "uint_value", "double_value", "decimal_value", "string_value", "bytes_value", "datetime_value", "duration_value", "json_value")
    IS_NULL_FIELD_NUMBER: _ClassVar[int]
    INT_VALUE_FIELD_NUMBER: _ClassVar[int]
    UINT_VALUE_FIELD_NUMBER: _ClassVar[int]
    DOUBLE_VALUE_FIELD_NUMBER: _ClassVar[int]
    DECIMAL_VALUE_FIELD_NUMBER: _ClassVar[int]
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    BYTES_VALUE_FIELD_NUMBER: _ClassVar[int]
    DATETIME_VALUE_FIELD_NUMBER: _ClassVar[int]
    DURATION_VALUE_FIELD_NUMBER: _ClassVar[int]
    JSON_VALUE_FIELD_NUMBER: _ClassVar[int]
    is_null: bool
    int_value: int
    uint_value: int
    double_value: float
    decimal_value: str
    string_value: str
    bytes_value: bytes
    datetime_value: DateTime
    duration_value: int
    json_value: str
    def __init__(self, is_null: _Optional[bool] = ..., int_value: _Optional[int] = ..., uint_value: _Optional[int] = ..., double_value: _Optional[float] = ..., decimal_value: _Optional[str] = ..., string_value: _Optional[str] = ..., bytes_value: _Optional[bytes] = ..., datetime_value: _Optional[_Union[DateTime, _Mapping]] = ..., duration_value: _Optional[int] = ..., json_value: _Optional[str] = ...) -> None: ...

class Row(_message.Message):
    __slots__ = ("column_ids", "values")
    COLUMN_IDS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    column_ids: _containers.RepeatedScalarFieldContainer[int]
    values: _containers.RepeatedCompositeFieldContainer[Datum]
    def __init__(self, column_ids: _Optional[_Iterable[int]] = ..., values: _Optional[_Iterable[_Union[Datum, _Mapping]]] = ...) -> None: ...

class Column(_message.Message):
    __slots__ = ("id", "name", "type", "unsigned", "nullable", "length", "precision", "scale", "fsp", "elems", "charset", "collation", "sql_type", "default_value", "auto_increment", "default_is_expression", "generated", "generation_expression", "on_update", "comment")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    UNSIGNED_FIELD_NUMBER: _ClassVar[int]
    NULLABLE_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    PRECISION_FIELD_NUMBER: _ClassVar[int]
    SCALE_FIELD_NUMBER: _ClassVar[int]
    FSP_FIELD_NUMBER: _ClassVar[int]
    ELEMS_FIELD_NUMBER: _ClassVar[int]
    CHARSET_FIELD_NUMBER: _ClassVar[int]
    COLLATION_FIELD_NUMBER: _ClassVar[int]
    SQL_TYPE_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_VALUE_FIELD_NUMBER: _ClassVar[int]
    AUTO_INCREMENT_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_IS_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    GENERATED_FIELD_NUMBER: _ClassVar[int]
    GENERATION_EXPRESSION_FIELD_NUMBER: _ClassVar[int]
    ON_UPDATE_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    type: ColumnType
    unsigned: bool
    nullable: bool
    length: int
    precision: int
    scale: int
    fsp: int
    elems: _containers.RepeatedScalarFieldContainer[str]
    charset: str
    collation: str
    sql_type: str
    default_value: str
    auto_increment: bool
    default_is_expression: bool
    generated: Generated
    generation_expression: str
    on_update: str
    comment: str
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., type: _Optional[_Union[ColumnType, str]] = ..., unsigned: _Optional[bool] = ..., nullable: _Optional[bool] = ..., length: _Optional[int] = ..., precision: _Optional[int] = ..., scale: _Optional[int] = ..., fsp: _Optional[int] = ..., elems: _Optional[_Iterable[str]] = ..., charset: _Optional[str] = ..., collation: _Optional[str] = ..., sql_type: _Optional[str] = ..., default_value: _Optional[str] = ..., auto_increment: _Optional[bool] = ..., default_is_expression: _Optional[bool] = ..., generated: _Optional[_Union[Generated, str]] = ..., generation_expression: _Optional[str] = ..., on_update: _Optional[str] = ..., comment: _Optional[str] = ...) -> None: ...

class Index(_message.Message):
    __slots__ = ("name", "primary", "unique", "columns", "prefix_lengths")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PRIMARY_FIELD_NUMBER: _ClassVar[int]
    UNIQUE_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_LENGTHS_FIELD_NUMBER: _ClassVar[int]
    name: str
    primary: bool
    unique: bool
    columns: _containers.RepeatedScalarFieldContainer[str]
    prefix_lengths: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., primary: _Optional[bool] = ..., unique: _Optional[bool] = ..., columns: _Optional[_Iterable[str]] = ..., prefix_lengths: _Optional[_Iterable[int]] = ...) -> None: ...

class TableSchema(_message.Message):
    __slots__ = ("table_id", "db", "table", "columns", "indexes", "charset", "collation", "max_column_id", "comment", "partitioning", "session_time_us")
    TABLE_ID_FIELD_NUMBER: _ClassVar[int]
    DB_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    COLUMNS_FIELD_NUMBER: _ClassVar[int]
    INDEXES_FIELD_NUMBER: _ClassVar[int]
    CHARSET_FIELD_NUMBER: _ClassVar[int]
    COLLATION_FIELD_NUMBER: _ClassVar[int]
    MAX_COLUMN_ID_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    PARTITIONING_FIELD_NUMBER: _ClassVar[int]
    SESSION_TIME_US_FIELD_NUMBER: _ClassVar[int]
    table_id: int
    db: str
    table: str
    columns: _containers.RepeatedCompositeFieldContainer[Column]
    indexes: _containers.RepeatedCompositeFieldContainer[Index]
    charset: str
    collation: str
    max_column_id: int
    comment: str
    partitioning: str
    session_time_us: int
    def __init__(self, table_id: _Optional[int] = ..., db: _Optional[str] = ..., table: _Optional[str] = ..., columns: _Optional[_Iterable[_Union[Column, _Mapping]]] = ..., indexes: _Optional[_Iterable[_Union[Index, _Mapping]]] = ..., charset: _Optional[str] = ..., collation: _Optional[str] = ..., max_column_id: _Optional[int] = ..., comment: _Optional[str] = ..., partitioning: _Optional[str] = ..., session_time_us: _Optional[int] = ...) -> None: ...

class SchemaChange(_message.Message):
    __slots__ = ("kind", "db", "table", "table_schema", "old_db", "old_table")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[SchemaChange.Kind]
        CREATE_DATABASE: _ClassVar[SchemaChange.Kind]
        DROP_DATABASE: _ClassVar[SchemaChange.Kind]
        CREATE_TABLE: _ClassVar[SchemaChange.Kind]
        DROP_TABLE: _ClassVar[SchemaChange.Kind]
        ALTER_TABLE: _ClassVar[SchemaChange.Kind]
        RENAME_TABLE: _ClassVar[SchemaChange.Kind]
        TRUNCATE_TABLE: _ClassVar[SchemaChange.Kind]
    KIND_UNSPECIFIED: SchemaChange.Kind
    CREATE_DATABASE: SchemaChange.Kind
    DROP_DATABASE: SchemaChange.Kind
    CREATE_TABLE: SchemaChange.Kind
    DROP_TABLE: SchemaChange.Kind
    ALTER_TABLE: SchemaChange.Kind
    RENAME_TABLE: SchemaChange.Kind
    TRUNCATE_TABLE: SchemaChange.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    DB_FIELD_NUMBER: _ClassVar[int]
    TABLE_FIELD_NUMBER: _ClassVar[int]
    TABLE_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    OLD_DB_FIELD_NUMBER: _ClassVar[int]
    OLD_TABLE_FIELD_NUMBER: _ClassVar[int]
    kind: SchemaChange.Kind
    db: str
    table: str
    table_schema: TableSchema
    old_db: str
    old_table: str
    def __init__(self, kind: _Optional[_Union[SchemaChange.Kind, str]] = ..., db: _Optional[str] = ..., table: _Optional[str] = ..., table_schema: _Optional[_Union[TableSchema, _Mapping]] = ..., old_db: _Optional[str] = ..., old_table: _Optional[str] = ...) -> None: ...
