"""Which item types a project declares: ``STORAGE_ITEM_TYPES``.

The declared types are the classes whose schemas are checked when a crawl starts, and the only
classes ``scrapy replay`` (and the storage pipeline's replay of ``<spider>:items:pending``)
rebuilds: a record naming any other class is refused, its class never imported.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import TYPE_CHECKING, Any

from scrapy_frontier.connection import ConfigError
from scrapy_frontier.schema import iter_item_classes, schema_of, type_name

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

logger = logging.getLogger(__name__)


def item_type_paths(settings: BaseSettings) -> tuple[list[str], bool]:
    """The import paths ``STORAGE_ITEM_TYPES`` names and whether it was set. Unset, it is the
    ``items`` module of the project: the package of the first ``SPIDER_MODULES`` entry plus
    ``.items`` (``crawler.spiders`` -> ``crawler.items``)."""
    if settings.get("STORAGE_ITEM_TYPES") is not None:
        return [path.strip() for path in settings.getlist("STORAGE_ITEM_TYPES") if path.strip()], True
    spider_modules = settings.getlist("SPIDER_MODULES")
    if not spider_modules:
        return [], False
    package = spider_modules[0].rpartition(".")[0]
    return [f"{package}.items" if package else "items"], False


def _import(path: str, explicit: bool) -> Any:
    """The module or class at ``path``. ``None`` when ``path`` is the default (``explicit`` false)
    and no such module exists, or it fails to import: then nothing is declared, with one WARNING
    line naming the module and the error (a project's unused ``items.py`` never stops a crawl).
    Raises :class:`ConfigError` when an explicit entry cannot be imported."""
    module_path, _, name = path.rpartition(".")
    try:
        try:
            return importlib.import_module(path)
        except ModuleNotFoundError as exc:
            if exc.name != path or not module_path:  # a module on the way is missing, or the module's own imports fail
                if exc.name == path and not explicit:
                    return None
                raise
        found = getattr(importlib.import_module(module_path), name, None)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        if not explicit:
            logger.warning(
                "The project's items module %r cannot be imported (%s): no item type is declared for storage, "
                "items are stored as JSON documents. To store item classes with their own schema, set "
                "STORAGE_ITEM_TYPES to them (docs/items.md)",
                path,
                error,
            )
            return None
        raise ConfigError(f"STORAGE_ITEM_TYPES: cannot import {path!r} ({error})") from None
    if isinstance(found, type):
        return found
    if not explicit:
        return None
    raise ConfigError(f"STORAGE_ITEM_TYPES: {path!r} is neither a module that can be imported nor a class in one")


def declared_item_types(settings: BaseSettings) -> dict[str, type]:
    """The declared item types by :func:`~scrapy_frontier.schema.type_name`, their schemas checked.

    Each entry of ``STORAGE_ITEM_TYPES`` is a module (every item class defined in it that sets
    ``table``) or a class (which must set ``table``). Raises
    :class:`~scrapy_frontier.connection.ConfigError` for an entry that cannot be imported or a
    class without a schema, and :class:`~scrapy_frontier.schema.SchemaError` (naming the class
    and the field) for the first schema that cannot be stored.
    """
    paths, explicit = item_type_paths(settings)
    types: dict[str, type] = {}
    tables: dict[str, type] = {}
    for path in paths:
        found = _import(path, explicit)
        if found is None:
            continue
        if isinstance(found, ModuleType):
            classes = list(iter_item_classes(found))
        elif getattr(found, "table", None):
            classes = [found]
        else:
            raise ConfigError(f"STORAGE_ITEM_TYPES: class {path!r} declares no schema (no 'table' class attribute)")
        for cls in classes:
            schema = schema_of(cls)
            assert schema is not None
            other = tables.setdefault(schema.table, cls)
            if other is not cls and schema_of(other) != schema:
                raise ConfigError(
                    f"STORAGE_ITEM_TYPES: {type_name(other)} and {type_name(cls)} both declare table "
                    f"{schema.table!r} with different schemas"
                )
            types[type_name(cls)] = cls
    return types
