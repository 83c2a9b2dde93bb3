"""Item schemas: declared on ``scrapy.Field`` metadata, checked by the validation pipeline,
and turned into SQL tables by the storage pipeline.

An item class with a schema is a :class:`scrapy.Item` that sets two class attributes,
``table`` (the SQL table name) and ``unique_key`` (the field the upsert keys on), and gives
each field these metadata keys (all optional but ``type``):

``type``
    ``str``, ``int``, ``float``, ``list``, ``dict`` or ``"datetime"`` (an ISO 8601 string with a
    UTC offset, stored as ``DATETIME(6)`` in UTC).
``required``
    ``True`` if the field must be present and not ``None`` (and not empty, for ``str``).
``max_length``
    For ``str``: the most characters the column holds. Longer values are truncated when
    ``on_too_long`` is ``"truncate"`` (the default) and refused when it is ``"reject"``.
``ascii``
    For ``str``: the value must be ASCII (URLs after :func:`w3lib.url.safe_url_string`); the
    column is ``CHARACTER SET ascii`` so that a 2048-character unique key fits InnoDB's
    3072-byte index limit.

Everything here is plain functions on plain data: no crawler, no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import cached_property
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy import Item

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

#: Longest text a MEDIUMTEXT column can hold in characters whatever the encoding:
#: 16,777,215 bytes / 4 bytes per utf8mb4 character (MariaDB docs, "MEDIUMTEXT").
MEDIUMTEXT_CHARS = 16_777_215 // 4
#: Longest VARCHAR we declare; above it a field becomes MEDIUMTEXT.
VARCHAR_MAX = 2048

_TYPES: dict[Any, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    float: (float, int),
    list: (list, tuple),
    dict: (dict,),
    "datetime": (str,),
}


class SchemaError(Exception):
    """An item class declares a schema that cannot be stored (bad type, missing key)."""


class ValidationError(ValueError):
    """An item breaks its schema.

    ``field`` names the field, ``reason`` is a short stat-friendly word (``missing``,
    ``type``, ``too_long``, ``not_ascii``, ``not_utf8``, ``bad_datetime``) and ``detail`` a sentence.
    """

    def __init__(self, field: str, reason: str, detail: str) -> None:
        super().__init__(f"{field}: {detail}")
        self.field = field
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: Any
    required: bool = False
    max_length: int | None = None
    on_too_long: str = "truncate"
    ascii: bool = False

    def mysql_type(self) -> str:
        if self.type is int:
            return "BIGINT"
        if self.type is float:
            return "DOUBLE"
        if self.type == "datetime":
            return "DATETIME(6)"
        if self.type in (list, dict):
            return "MEDIUMTEXT"
        if self.max_length is not None and self.max_length <= VARCHAR_MAX:
            charset = " CHARACTER SET ascii COLLATE ascii_bin" if self.ascii else ""
            return f"VARCHAR({self.max_length}){charset}"
        return "MEDIUMTEXT"

    def sqlite_type(self) -> str:
        return {int: "INTEGER", float: "REAL"}.get(self.type, "TEXT")


@dataclass(frozen=True)
class Schema:
    """The storable shape of one item class."""

    table: str
    unique_key: str
    fields: tuple[FieldSpec, ...]

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.fields]

    @cached_property
    def _row_plan(self) -> tuple[tuple[str, int], ...]:
        """``(field name, conversion)`` in column order: 0 as is, 1 JSON, 2 UTC date-time."""
        return tuple((f.name, 1 if f.type in (list, dict) else 2 if f.type == "datetime" else 0) for f in self.fields)


_schema_cache: dict[type, Schema | None] = {}


def schema_of(item_or_class: Any) -> Schema | None:
    """Return the :class:`Schema` of an item (or item class), or ``None`` if it declares none.

    Raises :class:`SchemaError` when the class sets ``table`` but a field lacks a valid ``type``
    or ``unique_key`` names no field.
    """
    cls = item_or_class if isinstance(item_or_class, type) else type(item_or_class)
    if cls in _schema_cache:
        return _schema_cache[cls]
    table = getattr(cls, "table", None)
    schema = None
    if table:
        specs = []
        for name, meta in getattr(cls, "fields", {}).items():
            ftype = meta.get("type")
            if ftype not in _TYPES:
                raise SchemaError(f"{cls.__name__}.{name}: 'type' must be one of str, int, float, list, dict, 'datetime', not {ftype!r}")
            on_too_long = meta.get("on_too_long", "truncate")
            if on_too_long not in ("truncate", "reject"):
                raise SchemaError(f"{cls.__name__}.{name}: on_too_long must be 'truncate' or 'reject'")
            max_length = meta.get("max_length")
            if ftype is str and max_length is None:
                max_length = MEDIUMTEXT_CHARS
            specs.append(FieldSpec(name, ftype, bool(meta.get("required")), max_length, on_too_long, bool(meta.get("ascii"))))
        unique_key = getattr(cls, "unique_key", None)
        if unique_key not in {s.name for s in specs}:
            raise SchemaError(f"{cls.__name__}.unique_key {unique_key!r} is not one of its fields")
        schema = Schema(table, unique_key, tuple(specs))
    _schema_cache[cls] = schema
    return schema


def validate(item: Any) -> list[str]:
    """Check ``item`` against its schema, truncating over-long ``truncate`` fields in place.

    Returns the names of the truncated fields when the item may be stored; raises the first
    :class:`ValidationError` otherwise. An item without a schema passes unchanged.
    """
    schema = schema_of(item)
    if schema is None:
        return []
    values = item_values(item)
    truncated = []
    for spec in schema.fields:
        value = values.get(spec.name)
        if value is None or (spec.type is str and value == ""):
            if spec.required:
                raise ValidationError(spec.name, "missing", "required field is missing or empty")
            continue
        if not isinstance(value, _TYPES[spec.type]) or isinstance(value, bool):
            raise ValidationError(spec.name, "type", f"expected {getattr(spec.type, '__name__', spec.type)}, got {type(value).__name__}")
        if spec.type == "datetime":
            try:
                parsed = datetime.fromisoformat(value)
            except ValueError:
                raise ValidationError(spec.name, "bad_datetime", f"not an ISO 8601 date-time: {value[:64]!r}") from None
            if parsed.tzinfo is None:
                raise ValidationError(spec.name, "bad_datetime", "date-time has no UTC offset")
            continue
        if spec.type is str:
            if not value.isascii():
                try:
                    value.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValidationError(spec.name, "not_utf8", "text holds a lone surrogate, which no UTF-8 column can store") from None
            if spec.ascii and not value.isascii():
                raise ValidationError(spec.name, "not_ascii", "value must be ASCII")
            if spec.max_length is not None and len(value) > spec.max_length:
                if spec.on_too_long == "reject":
                    raise ValidationError(spec.name, "too_long", f"{len(value)} characters, the column holds {spec.max_length}")
                ItemAdapter(item)[spec.name] = value[: spec.max_length]
                truncated.append(spec.name)
    return truncated


def item_values(item: Any) -> Mapping[str, Any]:
    """The field values of ``item`` as a read-only mapping of field name to value (not a copy:
    never modify it).

    A :class:`scrapy.Item`'s own value dict and a ``dict`` item itself are returned as they are
    (the storage and cache pipelines read every field of every item: going through
    :class:`~itemadapter.ItemAdapter` for each value cost more than half of their CPU per
    item); any other item type is wrapped in an :class:`~itemadapter.ItemAdapter`.
    """
    if isinstance(item, dict):
        return item
    if isinstance(item, Item):
        values = item.__dict__.get("_values")  # where scrapy.Item keeps the values it was given
        if type(values) is dict:
            return values
    return ItemAdapter(item)


#: ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` without building an encoder per call.
_to_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def to_row(item: Any, schema: Schema) -> tuple[Any, ...]:
    """Turn a validated item into a row tuple in ``schema.columns`` order.

    Lists and dicts become JSON text (UTF-8, not ASCII-escaped); date-times become naive UTC
    :class:`datetime` objects, which both pymysql and sqlite3 accept. Raises ``TypeError`` for
    a list or dict that is not JSON-serializable and ``ValueError`` for a date-time that is not
    ISO 8601 (neither passes :func:`validate`).
    """
    get = item_values(item).get
    row = []
    for name, conversion in schema._row_plan:
        value = get(name)
        if value is not None and conversion:
            if conversion == 1:
                value = _to_json(value)
            else:
                value = datetime.fromisoformat(value).astimezone(timezone.utc).replace(tzinfo=None)
        row.append(value)
    return tuple(row)


def iter_item_classes(module: Any) -> Iterator[type]:
    """Yield the item classes with a schema defined in ``module``."""
    for value in vars(module).values():
        if isinstance(value, type) and getattr(value, "table", None) and value.__module__ == module.__name__:
            yield value
