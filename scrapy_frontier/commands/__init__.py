"""Project commands (COMMANDS_MODULE): ``crawl`` (exit status 2 on a bad setting), ``status``
(a crawl's state from Redis), ``push`` (checked start URLs), ``requeue`` (failed requests back
to the frontier), ``replay`` (pending items to the database)."""
