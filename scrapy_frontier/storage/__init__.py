"""Storage of items in SQL, by role.

- :mod:`~scrapy_frontier.storage.backends`: the MySQL/MariaDB and SQLite backends (connect,
  create a table, upsert a batch) and which one the settings name (``backend_for``,
  ``storage_target``).
- :mod:`~scrapy_frontier.storage.ddl`: the ``CREATE TABLE`` of a schema, and the DDL script of
  a project's item types (``deploy/schema.sql``).
- :mod:`~scrapy_frontier.storage.item_types`: which item types a project declares
  (``STORAGE_ITEM_TYPES``).
- :mod:`~scrapy_frontier.storage.replay`: writing the items kept in ``<spider>:items:pending``.

The storage pipeline (:mod:`scrapy_frontier.pipelines.storage`) and ``scrapy replay`` use them.
"""
