"""The signals scrapy-frontier sends, beside Scrapy's own (``crawler.signals.connect(handler,
signal)``; Scrapy docs, "Signals").

``items_stored``
    Sent by the storage pipeline with ``items=`` (a list) once those items are committed to the
    database. The cache pipeline marks their content hash as stored; metrics count them.
``item_unchanged``
    Sent by the cache pipeline with ``item=`` when the item's content hash equals the one last
    stored in this database: the storage pipeline skips the write.
``host_limited``
    Sent with ``host=`` when this worker learns that a host needs a send-time check (a robots.txt
    Crawl-delay), so the politeness middleware checks it before its next refresh.
"""

items_stored = object()
item_unchanged = object()
host_limited = object()
