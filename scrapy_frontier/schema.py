"""Item schemas: declared on the item type's field metadata, checked by the validation pipeline,
and turned into SQL tables by the storage pipeline; and the JSON documents that items without a
schema are stored as.

An item class with a schema is any item class :class:`~itemadapter.ItemAdapter` supports (a
:class:`scrapy.Item`, a dataclass, an attrs class) that sets two class attributes, ``table``
(the SQL table name) and ``unique_key`` (the field the upsert keys on; ``ClassVar`` on a
dataclass or attrs class), and gives each field these metadata keys (``scrapy.Field(...)``,
``dataclasses.field(metadata={...})``, ``attrs.field(metadata={...})``; all optional but
``type``):

``type``
    ``str``, ``int``, ``float``, ``bool``, ``list``, ``dict`` or ``"datetime"`` (an ISO 8601
    string with a UTC offset, stored as ``DATETIME(6)`` in UTC).
``required``
    ``True`` if the field must be present and not ``None`` (and not empty, for ``str``).
``max_length``
    For ``str``: the most characters the column holds. Longer values are truncated when
    ``on_too_long`` is ``"truncate"`` (the default) and refused when it is ``"reject"``.
``ascii``
    For ``str``: the value must be ASCII (URLs after :func:`w3lib.url.safe_url_string`); the
    column is ``CHARACTER SET ascii`` so that a 2048-character unique key fits InnoDB's
    3072-byte index limit.

An item without a schema (a ``dict``, a class without ``table``) is a :class:`Document`: its
canonical JSON, stored in the table :data:`DOCUMENTS_TABLE` under its spider, its type's name
and a key (a field's value, or the JSON itself).

Everything here is plain functions on plain data: no crawler, no I/O. docs/items.md shows how
to declare an item type and its schema.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from itemadapter import ItemAdapter
from scrapy import Item
from scrapy.utils.serialize import ScrapyJSONEncoder

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

#: Longest text a MEDIUMTEXT column can hold in characters whatever the encoding:
#: 16,777,215 bytes / 4 bytes per utf8mb4 character (MariaDB docs, "MEDIUMTEXT").
MEDIUMTEXT_CHARS = 16_777_215 // 4
#: Longest VARCHAR we declare; above it a field becomes MEDIUMTEXT.
VARCHAR_MAX = 2048

#: Longest unique key InnoDB indexes, in bytes (DYNAMIC row format, MariaDB and MySQL docs,
#: "Limits on InnoDB Tables"): 768 utf8mb4 characters, or 2048 (VARCHAR_MAX) ASCII ones.
INDEX_MAX_BYTES = 3072
#: A table or column name: what MySQL and SQLite both take unquoted, at most 64 characters
#: (MySQL's identifier limit).
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
#: Columns every table has besides the schema's fields.
RESERVED_COLUMNS = frozenset({"id", "updated_at"})
#: The table of the items without a schema (:data:`DOCUMENTS`).
DOCUMENTS_TABLE = "items"

_TYPES: dict[Any, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    float: (float, int),
    bool: (bool,),
    list: (list, tuple),
    dict: (dict,),
    "datetime": (str,),
}
_TYPE_NAMES = "str, int, float, bool, list, dict, 'datetime'"


class SchemaError(Exception):
    """An item class declares a schema that cannot be stored (bad type, missing key).

    ``item_class`` is the class, ``field`` the field at fault (or ``"table"`` /
    ``"unique_key"`` for those class attributes).
    """

    def __init__(self, item_class: type, field: str, detail: str) -> None:
        super().__init__(f"{item_class.__qualname__}.{field}: {detail}")
        self.item_class = item_class
        self.field = field
        self.detail = detail

    def describe(self) -> str:
        """One line naming the class (with its module) and the field: what a crawl logs at start."""
        where = self.field if self.field in ("table", "unique_key") else f"field {self.field!r}"
        return f"Item type {type_name(self.item_class)} cannot be stored: {where}: {self.detail}"


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
        if self.type is bool:
            return "BOOLEAN"
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
        return {int: "INTEGER", bool: "INTEGER", float: "REAL"}.get(self.type, "TEXT")


@dataclass(frozen=True)
class Schema:
    """The storable shape of one item class: its table, the field it is unique on, its fields.

    ``unique_columns`` are the columns the table's unique index covers, ``(unique_key,)`` unless
    given (the documents table is unique on spider, item type and key).
    """

    table: str
    unique_key: str
    fields: tuple[FieldSpec, ...]
    unique_columns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.unique_columns:
            object.__setattr__(self, "unique_columns", (self.unique_key,))

    @property
    def columns(self) -> list[str]:
        return [f.name for f in self.fields]

    @cached_property
    def _row_plan(self) -> tuple[tuple[str, int], ...]:
        """``(field name, conversion)`` in column order: 0 as is, 1 JSON, 2 UTC date-time."""
        return tuple((f.name, 1 if f.type in (list, dict) else 2 if f.type == "datetime" else 0) for f in self.fields)


_schema_cache: dict[type, Schema | None] = {}


def schema_of(item_or_class: Any) -> Schema | None:
    """Return the :class:`Schema` of an item (or item class), or ``None`` if it declares none
    (no ``table`` class attribute).

    Raises :class:`SchemaError` when the class sets ``table`` but the schema cannot be stored:
    a field without a valid ``type``, a ``unique_key`` that names no required field or that
    InnoDB cannot index, a name that is not an SQL identifier.
    """
    cls = item_or_class if isinstance(item_or_class, type) else type(item_or_class)
    try:
        return _schema_cache[cls]
    except KeyError:
        pass
    schema = _read_schema(cls) if getattr(cls, "table", None) else None
    _schema_cache[cls] = schema
    return schema


def _read_schema(cls: type) -> Schema:
    table = cls.table  # type: ignore[attr-defined]
    if not isinstance(table, str) or not _IDENTIFIER.fullmatch(table):
        raise SchemaError(cls, "table", f"{table!r} is not a table name (letters, digits and _, at most 64)")
    if table == DOCUMENTS_TABLE:
        raise SchemaError(cls, "table", f"{table!r} is the table of the items without a schema; choose another name")
    specs = []
    for name in ItemAdapter.get_field_names_from_class(cls) or ():
        meta = ItemAdapter.get_field_meta_from_class(cls, name)
        if not _IDENTIFIER.fullmatch(name) or name in RESERVED_COLUMNS:
            raise SchemaError(cls, name, f"a column cannot be named {name!r} (every table has id and updated_at)")
        ftype = meta.get("type")
        if ftype not in _TYPES:
            raise SchemaError(cls, name, f"'type' must be one of {_TYPE_NAMES}, not {ftype!r}")
        on_too_long = meta.get("on_too_long", "truncate")
        if on_too_long not in ("truncate", "reject"):
            raise SchemaError(cls, name, f"'on_too_long' must be 'truncate' or 'reject', not {on_too_long!r}")
        max_length = meta.get("max_length")
        if max_length is not None and (ftype is not str or type(max_length) is not int or max_length < 1):
            raise SchemaError(
                cls,
                name,
                f"'max_length' must be a positive int on a str field, not {max_length!r} on {_type_name(ftype)}",
            )
        if ftype is str and max_length is None:
            max_length = MEDIUMTEXT_CHARS
        specs.append(
            FieldSpec(name, ftype, bool(meta.get("required")), max_length, on_too_long, bool(meta.get("ascii")))
        )
    unique_key = getattr(cls, "unique_key", None)
    key = next((s for s in specs if s.name == unique_key), None)
    if key is None:
        raise SchemaError(
            cls, "unique_key", f"{unique_key!r} is not one of its fields ({', '.join(s.name for s in specs) or 'none'})"
        )
    if not key.required:
        raise SchemaError(
            cls, key.name, "the unique_key field must be required=True (rows without it could not be upserted)"
        )
    if key.type in (list, dict):
        raise SchemaError(
            cls,
            key.name,
            f"the unique_key field cannot be a {_type_name(key.type)} (a JSON text column has no unique index)",
        )
    if key.type is str and key.max_length is not None and key.max_length * (1 if key.ascii else 4) > INDEX_MAX_BYTES:
        raise SchemaError(
            cls,
            key.name,
            f"the unique_key field needs max_length <= {INDEX_MAX_BYTES // 4} (or ascii=True and <= {VARCHAR_MAX}) "
            f"to fit InnoDB's {INDEX_MAX_BYTES}-byte index",
        )
    return Schema(table, key.name, tuple(specs))


def _type_name(ftype: Any) -> str:
    return getattr(ftype, "__name__", repr(ftype))


def _has_type(value: Any, ftype: Any) -> bool:
    """Whether ``value`` is of the schema type ``ftype`` (a bool is no ``int`` or ``float``)."""
    return isinstance(value, _TYPES[ftype]) and (ftype is bool or not isinstance(value, bool))


def validate(item: Any) -> list[str]:
    """Check ``item`` against its schema, truncating over-long ``truncate`` fields in place.

    Returns the names of the truncated fields when the item may be stored; raises the first
    :class:`ValidationError` otherwise. An item without a schema is stored as a JSON document:
    it passes unchanged when JSON can hold every value, else raises reason ``not_json`` naming
    the first field that JSON cannot hold.
    """
    schema = schema_of(item)
    if schema is None:
        document = item if isinstance(item, dict) else ItemAdapter(item).asdict()
        try:
            canonical_json(document)
        except (TypeError, ValueError):
            for name, field_value in document.items():
                try:
                    canonical_json(field_value)
                except (TypeError, ValueError):
                    raise ValidationError(
                        str(name),
                        "not_json",
                        f"holds a {type(field_value).__name__}, which a JSON document cannot hold (an item without a "
                        "schema is stored as JSON)",
                    ) from None
            raise ValidationError("", "not_json", "the item is not JSON-serializable") from None
        return []
    values = item_values(item)
    truncated = []
    for spec in schema.fields:
        value = values.get(spec.name)
        if value is None or (spec.type is str and value == ""):
            if spec.required:
                raise ValidationError(spec.name, "missing", "required field is missing or empty")
            continue
        if not _has_type(value, spec.type):
            raise ValidationError(spec.name, "type", f"expected {_type_name(spec.type)}, got {type(value).__name__}")
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
                    raise ValidationError(
                        spec.name, "not_utf8", "text holds a lone surrogate, which no UTF-8 column can store"
                    ) from None
            if spec.ascii and not value.isascii():
                raise ValidationError(spec.name, "not_ascii", "value must be ASCII")
            if spec.max_length is not None and len(value) > spec.max_length:
                if spec.on_too_long == "reject":
                    raise ValidationError(
                        spec.name, "too_long", f"{len(value)} characters, the column holds {spec.max_length}"
                    )
                try:
                    ItemAdapter(item)[spec.name] = value[: spec.max_length]
                except AttributeError:  # a frozen dataclass or attrs class
                    raise ValidationError(
                        spec.name,
                        "too_long",
                        f"{len(value)} characters, the column holds {spec.max_length}, and the item is frozen",
                    ) from None
                truncated.append(spec.name)
    return truncated


def item_values(item: Any) -> Mapping[str, Any]:
    """The field values of ``item`` as a read-only mapping of field name to value (not a copy:
    never modify it).

    A :class:`scrapy.Item`'s own value dict and a ``dict`` item itself are returned as they are
    (the storage and cache pipelines read every field of every item, and going through
    :class:`~itemadapter.ItemAdapter` for each value would be most of their CPU per item); any
    other item type is wrapped in an :class:`~itemadapter.ItemAdapter`.
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
                value = datetime.fromisoformat(value).astimezone(UTC).replace(tzinfo=None)
        row.append(value)
    return tuple(row)


def iter_item_classes(module: Any) -> Iterator[type]:
    """Yield the item classes defined in ``module`` (not imported into it) that set ``table``."""
    for value in vars(module).values():
        if (
            isinstance(value, type)
            and value.__module__ == module.__name__
            and getattr(value, "table", None)
            and ItemAdapter.is_item_class(value)
        ):
            yield value


class _CanonicalEncoder(ScrapyJSONEncoder):
    """Scrapy's JSON encoder (what feed exports write: date-times in ISO 8601, ``Decimal`` as
    text, nested items as objects), with sets sorted so that equal items give equal JSON."""

    def default(self, o: Any) -> Any:
        if isinstance(o, (set, frozenset)):
            try:
                return sorted(o)
            except TypeError:
                return list(o)
        return super().default(o)


#: The canonical JSON of a value: keys sorted, no spaces, UTF-8 text (not ASCII-escaped).
canonical_json = _CanonicalEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode

#: The documents table: one row per (spider, item type, key). ``item_key`` is the key field's
#: value as text (``NULL`` when the item is keyed by its content), ``key_hash`` the SHA-1 (hex)
#: of ``item_key`` or, without one, of ``document``; ``document`` the item's canonical JSON.
DOCUMENTS = Schema(
    table=DOCUMENTS_TABLE,
    unique_key="key_hash",
    fields=(
        FieldSpec("spider", str, True, 128),
        FieldSpec("item_type", str, True, 255),
        FieldSpec("item_key", str, False, MEDIUMTEXT_CHARS),
        FieldSpec("key_hash", str, True, 40, "reject", True),
        FieldSpec("document", str, True, MEDIUMTEXT_CHARS),
    ),
    unique_columns=("spider", "item_type", "key_hash"),
)


def type_name(cls: type) -> str:
    """The name an item type is stored under: ``dict`` for a plain dict, else ``module.QualName``."""
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True)
class Document:
    """An item without a schema, as the documents table stores it."""

    #: :func:`type_name` of the item's class.
    item_type: str
    #: The key field's value as text, or ``None`` when the item is keyed by its content.
    key: str | None
    #: SHA-1 (hex) of ``key``, or of ``json`` when ``key`` is ``None``.
    key_hash: str
    #: The item's canonical JSON.
    json: str

    @property
    def content_hash(self) -> str:
        """SHA-1 (hex) of the JSON: equal for equal items (the cache's unchanged check)."""
        return self.key_hash if self.key is None else hashlib.sha1(self.json.encode()).hexdigest()

    def row(self, spider: str) -> tuple[Any, ...]:
        """The row of :data:`DOCUMENTS`, in its column order."""
        return (spider, self.item_type, self.key, self.key_hash, self.json)


def document_of(item: Any, key_field: str | None) -> Document:
    """The :class:`Document` of an item without a schema, keyed by ``key_field``'s value when
    the item has one (not ``None``, not empty), else by its content. Raises ``TypeError`` for a
    value JSON cannot hold (bytes, an arbitrary object)."""
    values = item if isinstance(item, dict) else ItemAdapter(item).asdict()
    return document_from_values(type_name(type(item)), values, key_field)


def document_from_values(item_type: str, values: Mapping[str, Any], key_field: str | None) -> Document:
    """:func:`document_of` for an item given as its type's name and its values (a replayed record)."""
    text = canonical_json(values)
    key = values.get(key_field) if key_field else None
    if key is None or key == "":
        return Document(item_type, None, hashlib.sha1(text.encode()).hexdigest(), text)
    key = key if isinstance(key, str) else canonical_json(key)
    return Document(item_type, key, hashlib.sha1(key.encode()).hexdigest(), text)


def content_hash_of(item: Any, schema: Schema) -> str:
    """What tells two versions of an item apart: its ``content_hash`` field when its schema has
    one (the ``site`` spider's sha256 of the body), else the SHA-1 of its canonical JSON."""
    if "content_hash" in schema.columns:
        return str(item_values(item).get("content_hash") or "")
    values = item if isinstance(item, dict) else ItemAdapter(item).asdict()
    return hashlib.sha1(canonical_json(values).encode()).hexdigest()
