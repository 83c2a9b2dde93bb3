"""Project commands (COMMANDS_MODULE, and the ``scrapy.commands`` entry point): ``status``
(a crawl's state from Redis), ``push`` (checked start URLs), ``requeue`` (failed requests back
to the frontier), ``replay`` (pending items to the database)."""
