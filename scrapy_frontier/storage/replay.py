"""Writing the items kept in ``<spider>:items:pending`` (a batch the database could not take in
time) to the database: by ``scrapy replay`` and by the storage pipeline when the database is back.

A pending record is ``{"item_class": "module.Class", "item": {...}, ...}``
(:func:`scrapy_frontier.deadletter.item_record`); a record of an item without a schema also has
``"document_type"``, the name its documents are stored under. A record is rebuilt as an instance
of a declared item type (``STORAGE_ITEM_TYPES``, looked up by name: a record never makes this
process import anything) or as a document; anything else is refused and kept.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any, NamedTuple

from scrapy_frontier import scripts
from scrapy_frontier.schema import (
    DOCUMENTS,
    document_from_values,
    schema_of,
    to_row,
    validate,
)

if TYPE_CHECKING:
    from scrapy_frontier.keys import Keys
    from scrapy_frontier.schema import Schema


class Refused(ValueError):
    """A pending record that cannot be stored; the message says why (shown to the user)."""


class ReplayOutcome(NamedTuple):
    #: Records written to the database.
    written: int
    #: Records refused, kept in ``<spider>:items:invalid``.
    refused: int
    #: Why records were refused: each distinct message and how many records it refused.
    problems: Counter[str]


def rebuild(
    raw: bytes, types: dict[str, type], spider: str, document_key: str | None
) -> tuple[Schema, tuple[Any, ...]]:
    """A pending record -> (schema, row). Raises :class:`Refused` for a record naming a class
    that is not declared, and any other exception for a record that cannot be stored."""
    try:
        record = json.loads(raw)
    except ValueError as exc:
        raise Refused(f"the record is not JSON ({getattr(exc, 'msg', exc)})") from None
    if not isinstance(record, dict):
        raise Refused("the record is not a JSON object")
    values = record.get("item")
    if not isinstance(values, dict):
        raise Refused("'item' is not an object")
    document_type = record.get("document_type")
    if isinstance(document_type, str) and document_type:
        return DOCUMENTS, document_from_values(document_type, values, document_key).row(spider)
    name = record.get("item_class")
    cls = types.get(name) if isinstance(name, str) else None
    if cls is None:
        raise Refused(
            f"item class {name!r:.200} is not a declared item type: name it (or its module) in STORAGE_ITEM_TYPES, "
            "then push the record back to the pending list"
        )
    item = cls(**values)
    validate(item)
    schema = schema_of(item)
    assert schema is not None
    return schema, to_row(item, schema)


def replay_pending(
    client: Any,
    keys: Keys,
    node_id: str,
    backend: Any,
    types: dict[str, type],
    document_key: str | None = None,
    batch_size: int = 500,
) -> ReplayOutcome:
    """Write the items kept in ``<spider>:items:pending`` to the database, oldest first, in
    batches, until the list is empty. Blocking: call it from a thread or a command.

    ``types`` are the declared item types by name
    (:func:`scrapy_frontier.storage.item_types.declared_item_types`), ``document_key`` the
    ``STORAGE_DOCUMENT_KEY`` the documents are keyed by. Each batch is moved atomically to
    ``<spider>:items:pending:<node>`` (``lua/take_pending.lua``) while it is written; if anything
    goes wrong with the batch as a whole it goes back to the pending list before the error is
    raised (and the reclaim of a dead node puts it back too). A record that cannot be rebuilt
    (an undeclared item class, broken JSON, a schema violation) or that the database refuses
    goes to ``<spider>:items:invalid`` (reason ``unreplayable`` or ``storage_refused``, with the
    detail). Raises :class:`~scrapy_frontier.storage.backends.ConnectionLost` if the database is
    gone, or the database's error.
    """
    take = client.register_script(scripts.source("take_pending"))
    replaying = keys.items_replaying(node_id)
    written = refused = 0
    problems: Counter[str] = Counter()
    while True:
        raws = take(keys=[keys.items_pending, replaying], args=[batch_size])
        if not raws:
            return ReplayOutcome(written, refused, problems)
        try:
            by_schema: dict[Schema, list[tuple[bytes, tuple[Any, ...]]]] = {}
            bad = []
            for raw in raws:
                try:
                    schema, row = rebuild(raw, types, keys.spider, document_key)
                except Exception as exc:  # anything in a record is data: refuse it, keep it
                    detail = str(exc) if isinstance(exc, Refused) else f"{type(exc).__name__}: {exc}"
                    problems[detail[:300]] += 1
                    bad.append(
                        json.dumps(
                            {"reason": "unreplayable", "detail": detail[:500], "record": raw.decode("utf-8", "replace")}
                        )
                    )
                    continue
                by_schema.setdefault(schema, []).append((raw, row))
            for schema, entries in by_schema.items():
                backend.ensure_table(schema)
                for index, error in backend.upsert(schema, [row for _, row in entries]):
                    problems[error[:300]] += 1
                    bad.append(
                        json.dumps(
                            {
                                "reason": "storage_refused",
                                "detail": error,
                                "record": entries[index][0].decode("utf-8", "replace"),
                            }
                        )
                    )
        except BaseException:
            while client.lmove(replaying, keys.items_pending, "LEFT", "RIGHT"):
                pass
            raise
        # Not a transaction (two hash slots on a Redis Cluster): refused records are kept before
        # the batch is let go, so a crash between the two keeps them twice, never loses them.
        with client.pipeline(transaction=False) as pipe:
            if bad:
                pipe.lpush(keys.items_invalid, *bad)
            pipe.delete(replaying)
            pipe.execute()
        refused += len(bad)
        written += len(raws) - len(bad)
