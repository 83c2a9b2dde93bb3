"""SQL backends of the storage pipeline: MySQL/MariaDB (pymysql) and SQLite (stdlib), and which
one the settings name (:func:`backend_for`, :func:`storage_target`).

Both are blocking and are only ever called from the storage pipeline's single worker thread.
Writes are idempotent upserts on the schema's unique key, so a retried batch never duplicates
a row and a re-crawl updates the row in place. A MySQL connection left unused is pinged before
its next statement and opened again if the server has closed it (:data:`IDLE_PING`); a table
found missing (dropped while the crawl runs) is created again from its schema and the batch
written (:data:`ER_NO_SUCH_TABLE`).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import pymysql
from pymysql.constants import ER, SERVER_STATUS
from pymysql.converters import escape_string

from scrapy_frontier.config import read_value
from scrapy_frontier.connection import PERCENT_ENCODE_HINT, ConfigError, redact_url, url_problem
from scrapy_frontier.defaults import SETTINGS
from scrapy_frontier.storage.ddl import mysql_add_columns, mysql_ddl, sqlite_add_columns, sqlite_ddl

if TYPE_CHECKING:
    from scrapy_frontier.schema import Schema

logger = logging.getLogger(__name__)

DEFAULT_SQLITE_PATH = SETTINGS["SQLITE_PATH"]

#: The error code :meth:`MySQLBackend._run` gives a pymysql error that carries none. During a
#: query pymysql raises one such error (pymysql 1.2 ``connections.py``,
#: ``Connection._read_packet``): ``InternalError("Packet sequence number wrong - got N expected
#: M")``, when the packets arriving are not the reply to the command sent (a connection cut or
#: taken over mid-reply). The connection cannot be used again; a new one can.
NO_ERROR_CODE = 0

#: pymysql/MariaDB error codes that mean "the connection is gone, try again later":
#: 2003 can't connect, 2006 server has gone away, 2013 lost connection during query,
#: 2014 commands out of sync, 2055 lost connection (MariaDB Connector error codes), and the
#: server-side 1053 server shutdown in progress, 1927 connection was killed, 1205 lock wait
#: timeout, 1213 deadlock (MariaDB error codes: https://mariadb.com/kb/en/mariadb-error-codes/),
#: and :data:`NO_ERROR_CODE`, a reply out of step. (pymysql's other code-less error,
#: ``InterfaceError(0, "")`` for a connection already closed, is retried for its class.)
RETRYABLE_MYSQL_ERRORS = frozenset({2003, 2006, 2013, 2014, 2055, 1053, 1927, 1205, 1213, NO_ERROR_CODE})


#: MySQL/MariaDB error 1146, ``ER_NO_SUCH_TABLE`` ("Table 'db.t' doesn't exist"): the table was
#: dropped after the storage pipeline created it. :meth:`MySQLBackend.upsert` creates it again
#: (``CREATE TABLE IF NOT EXISTS``, :func:`~scrapy_frontier.storage.ddl.mysql_ddl`) and writes
#: the batch, instead of refusing every row.
ER_NO_SUCH_TABLE = ER.NO_SUCH_TABLE

#: Seconds a MySQL connection may stay unused before its next statement is preceded by a ping
#: (``COM_PING``, one round trip). The server closes a connection idle for ``wait_timeout``
#: seconds (8 hours by default, as little as 1), and so do proxies and firewalls after their own
#: idle times: a connection found closed is opened again, quietly - that is not an outage.
#: Batches that follow each other closer than this are not pinged.
IDLE_PING = 1.0

#: Longest multi-row INSERT the MySQL backend sends, in characters (pymysql's own limit for
#: ``executemany`` is 1,024,000 bytes): well under the server's ``max_allowed_packet`` (16 MB by
#: default on MariaDB 10.11, 4 MB on MySQL 5.7) even when every character takes 4 bytes.
MAX_STATEMENT_CHARS = 512_000


class ConnectionLost(Exception):
    """The database cannot be reached now; the batch is intact and may be retried."""


def table_missing(database: str, schema: Schema, error: str, count: int) -> None:
    """The one warning of a batch that found its table missing (``error``, the server's words)
    and creates it again from ``schema``, then writes its ``count`` rows."""
    logger.warning(
        "Table %s is missing in %s (%s): creating it again from its schema and writing the batch of %d items",
        schema.table,
        database,
        error,
        count,
    )


def columns_added(database: str, schema: Schema, added: list[str]) -> None:
    """The one warning of a table created by an earlier version of its item type, given the
    columns it lacked (``added``, as NULL columns: its rows have no value for them)."""
    logger.warning(
        "Table %s in %s lacks the column(s) %s of its item type: added (NULL in the rows already stored)",
        schema.table,
        database,
        ", ".join(added),
    )


def parse_mysql_url(url: str) -> dict[str, Any]:
    """``mysql://user:password@host:port/db`` (password percent-encoded) -> pymysql arguments.

    Raises :class:`ConfigError` naming ``MYSQL_URL`` (never the password) when it is malformed.
    """
    shown = redact_url(url)
    problem = url_problem(url)
    if problem:
        raise ConfigError(f"MYSQL_URL {shown} is malformed: {problem}; {PERCENT_ENCODE_HINT}")
    try:
        parts = urlsplit(url)
        port = parts.port or 3306
    except ValueError as exc:
        raise ConfigError(f"MYSQL_URL {shown} is malformed: {exc}") from None
    if parts.scheme not in ("mysql", "mysql+pymysql", "mariadb"):
        raise ConfigError(f"MYSQL_URL {shown} must start with mysql://, mariadb:// or mysql+pymysql://")
    database = unquote(parts.path.lstrip("/"))
    if not parts.hostname or not database:
        raise ConfigError(f"MYSQL_URL {shown} needs a host and a database: mysql://user:password@host:port/db")
    return {
        "host": parts.hostname,
        "port": port,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "database": database,
    }


def backend_for(settings: Any) -> MySQLBackend | SQLiteBackend:
    """The storage backend the settings name, not connected yet: MySQL at ``MYSQL_URL`` or,
    without it, the SQLite file ``SQLITE_PATH`` (default ``crawl.sqlite3``). Raises
    :class:`ConfigError` for a ``MYSQL_URL`` that is not a MySQL URL."""
    url = read_value(settings, "MYSQL_URL")
    return MySQLBackend(url) if url else SQLiteBackend(settings.get("SQLITE_PATH") or DEFAULT_SQLITE_PATH)


def storage_target(settings: Any) -> str:
    """Which database :func:`backend_for` names, safe to log and stable across password
    changes: ``MYSQL_URL`` with its password left out, or the absolute ``SQLITE_PATH``."""
    url = read_value(settings, "MYSQL_URL")
    return redact_url(url) if url else os.path.abspath(settings.get("SQLITE_PATH") or DEFAULT_SQLITE_PATH)


class MySQLBackend:
    def __init__(self, url: str, connect_timeout: float = 10) -> None:
        self.url = url
        self.params = parse_mysql_url(url)
        self.connect_timeout = connect_timeout
        self.conn: pymysql.connections.Connection | None = None
        self.name = f"MySQL {redact_url(url)}"
        #: ``time.monotonic()`` when the connection last answered (or was opened).
        self.used = 0.0

    def connect(self) -> None:
        """Connect. Raises :class:`ConfigError` for a wrong password or unknown database (final)
        and :class:`ConnectionLost` when the server cannot be reached (worth retrying)."""
        self.close()
        try:
            self.conn = pymysql.connect(
                **self.params,
                charset="utf8mb4",
                autocommit=False,
                connect_timeout=self.connect_timeout,
                read_timeout=60,
                write_timeout=60,
            )
            self.used = time.monotonic()
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else 0
            if code in (1045, 1044, 1049):  # access denied (user/db), unknown database
                raise ConfigError(
                    f"MYSQL_URL {redact_url(self.url)}: {exc.args[1] if len(exc.args) > 1 else exc}"
                ) from None
            raise ConnectionLost(f"MySQL error {code}: {exc.args[1] if len(exc.args) > 1 else exc}") from None

    def close(self) -> None:
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None

    def ensure_table(self, schema: Schema) -> None:
        """Create the table of ``schema`` if it is missing; add the columns of fields an existing
        table lacks (:func:`~scrapy_frontier.storage.ddl.mysql_add_columns`, one warning). A column
        another worker adds at the same time (MySQL error 1060, duplicate column) is taken as added."""

        def ensure(cur: Any) -> list[str]:
            cur.execute(mysql_ddl(schema))
            cur.execute(f"SHOW COLUMNS FROM `{schema.table}`")
            existing = {row[0] for row in cur.fetchall()}
            added = []
            for name, statement in mysql_add_columns(schema, existing):
                try:
                    cur.execute(statement)
                    added.append(name)
                except pymysql.err.OperationalError as exc:
                    if not exc.args or exc.args[0] != ER.DUP_FIELDNAME:
                        raise
            return added

        added = self._run(ensure)
        if added:
            columns_added(self.name, schema, added)

    def _revive(self) -> None:
        """Ping the connection; if the server has closed it (``wait_timeout``, a proxy's idle
        timeout, a ``KILL``), connect again. Raises :class:`ConnectionLost` (or
        :class:`ConfigError`) only when that new connection cannot be made: a real outage."""
        assert self.conn is not None
        idle = time.monotonic() - self.used
        try:
            self.conn.ping()
            self.used = time.monotonic()
        except pymysql.err.MySQLError as exc:
            logger.debug("%s: the connection idle for %.1fs was closed (%s); connecting again", self.name, idle, exc)
            self.connect()

    def _run(self, fn: Any) -> Any:
        if self.conn is None:
            self.connect()
        elif time.monotonic() - self.used > IDLE_PING:
            self._revive()
        assert self.conn is not None
        try:
            with self.conn.cursor() as cur:
                result = fn(cur)
            self.conn.commit()
            self.used = time.monotonic()
            return result
        except (pymysql.err.OperationalError, pymysql.err.InterfaceError, pymysql.err.InternalError) as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else NO_ERROR_CODE
            if isinstance(exc, pymysql.err.InterfaceError) or code in RETRYABLE_MYSQL_ERRORS:
                self.close()
                raise ConnectionLost(f"MySQL error {code}: {exc}") from None
            self._rollback()
            raise

    def _rollback(self) -> None:
        try:
            if self.conn is not None:
                self.conn.rollback()
                self.used = time.monotonic()
        except Exception:
            self.close()

    def literal(self, row: tuple[Any, ...]) -> tuple[int, str] | None:
        """``(mode, "(v1,v2,...)")``: ``row`` as one entry of a ``VALUES`` list, each value
        escaped by pymysql: ``str`` by ``pymysql.converters.escape_string`` (or, when the
        server's ``NO_BACKSLASH_ESCAPES`` mode is on - given as ``mode`` - by
        ``Connection.escape``, which then only doubles quotes), ``None`` and ``int`` as
        pymysql's converters write them (``NULL``, ``str(v)``), every other value by
        ``Connection.escape`` (pymysql's converter of its type). ``None`` when not connected.

        Only reads the connection, so the storage pipeline calls it on the event loop as items
        arrive (the work overlaps the database's on the batch before); :meth:`upsert` takes the
        result and rebuilds it if the mode has changed since.
        """
        conn = self.conn
        if conn is None:
            return None
        escape = conn.escape
        # types-PyMySQL lacks server_status, which pymysql sets on every OK packet
        mode = conn.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES  # type: ignore[attr-defined]
        if mode:
            return mode, "(" + ",".join(["NULL" if v is None else escape(v) for v in row]) + ")"
        return mode, "(" + ",".join(
            [
                "'" + escape_string(v) + "'"
                if type(v) is str
                else "NULL"
                if v is None
                else str(v)
                if type(v) is int
                else escape(v)
                for v in row
            ]
        ) + ")"

    def _insert_many(
        self, cur: Any, head: str, tail: str, rows: list[tuple[Any, ...]], literals: list[tuple[int, str] | None] | None
    ) -> None:
        """Run ``head (row), (row), ... tail`` as few multi-row statements of at most
        :data:`MAX_STATEMENT_CHARS` characters (one if a row is longer), with the rows'
        :meth:`literal` (the one given if built in the connection's current mode).

        What ``cursor.executemany`` does for an ``INSERT ... VALUES``, without its regex
        parsing of the statement and its per-row ``%`` formatting.
        """
        conn = self.conn
        assert conn is not None
        # types-PyMySQL lacks server_status, which pymysql sets on every OK packet
        mode = conn.server_status & SERVER_STATUS.SERVER_STATUS_NO_BACKSLASH_ESCAPES  # type: ignore[attr-defined]
        values: list[str] = []
        size = 0
        for i, row in enumerate(rows):
            given = literals[i] if literals is not None else None
            if given is None or given[0] != mode:
                given = self.literal(row)
                assert given is not None
            value = given[1]
            if values and size + len(value) > MAX_STATEMENT_CHARS:
                cur.execute(head + ",".join(values) + tail)
                values, size = [], 0
            values.append(value)
            size += len(value) + 1
        if values:
            cur.execute(head + ",".join(values) + tail)

    def upsert(
        self, schema: Schema, rows: list[tuple[Any, ...]], literals: list[tuple[int, str] | None] | None = None
    ) -> list[tuple[int, str]]:
        """Write ``rows`` in one transaction; if the server refuses it, write them one by one.
        ``literals``, if given, holds each row's :meth:`literal` (or ``None``), built beforehand.

        Returns ``[(row index, error)]`` for the rows the server refused (they are not written;
        the others are). A missing table (:data:`ER_NO_SUCH_TABLE`) is created again and the
        batch written, with one warning. Raises :class:`ConnectionLost` when the connection
        fails: nothing of the batch is committed then, so the whole batch can be retried.
        """
        cols = ", ".join(f"`{c}`" for c in schema.columns)
        marks = ", ".join(["%s"] * len(schema.columns))
        updates = ", ".join(f"`{c}` = VALUES(`{c}`)" for c in schema.columns if c not in schema.unique_columns)
        head = f"INSERT INTO `{schema.table}` ({cols}) VALUES "
        tail = f" ON DUPLICATE KEY UPDATE {updates}"
        sql = f"{head}({marks}){tail}"
        for attempt in (1, 2):
            try:
                self._run(lambda cur: self._insert_many(cur, head, tail, rows, literals))
                return []
            except pymysql.err.ProgrammingError as exc:
                if attempt == 1 and exc.args and exc.args[0] == ER_NO_SUCH_TABLE:
                    table_missing(
                        self.name,
                        schema,
                        f"MySQL error {exc.args[0]}: {exc.args[1] if len(exc.args) > 1 else exc}",
                        len(rows),
                    )
                    self.ensure_table(schema)
                    continue
                break
            except (
                pymysql.err.DataError,
                pymysql.err.IntegrityError,
                pymysql.err.OperationalError,
                pymysql.err.InternalError,
            ):
                break
        refused = []
        for i, row in enumerate(rows):
            try:
                self._run(lambda cur, row=row: cur.execute(sql, row))
            except ConnectionLost:
                raise
            except pymysql.err.MySQLError as exc:
                refused.append(
                    (i, f"MySQL error {exc.args[0] if exc.args else '?'}: {exc.args[1] if len(exc.args) > 1 else exc}")
                )
        return refused


class SQLiteBackend:
    def __init__(self, path: str) -> None:
        self.path = path
        self.conn: sqlite3.Connection | None = None
        self.name = f"SQLite {path}"

    def connect(self) -> None:
        for attempt in range(50):
            try:
                self.conn = sqlite3.connect(self.path, check_same_thread=False)
                self.conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                # Switching to WAL answers SQLITE_BUSY at once, without the busy timeout, while
                # another process (a second worker on the same file) opens it: try again.
                if "locked" not in str(exc) or attempt == 49:
                    raise ConfigError(f"SQLITE_PATH {self.path!r}: {exc}") from None
                self.close()
                time.sleep(0.1)
            except sqlite3.Error as exc:
                raise ConfigError(f"SQLITE_PATH {self.path!r}: {exc}") from None

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def ensure_table(self, schema: Schema) -> None:
        """Create the table of ``schema`` if it is missing; add the columns of fields an existing
        table lacks (:func:`~scrapy_frontier.storage.ddl.sqlite_add_columns`, one warning)."""
        assert self.conn is not None
        with self.conn:
            self.conn.execute(sqlite_ddl(schema))
            existing = {row[1] for row in self.conn.execute(f"PRAGMA table_info({schema.table})")}
            added = []
            for name, statement in sqlite_add_columns(schema, existing):
                try:
                    self.conn.execute(statement)
                    added.append(name)
                except sqlite3.OperationalError as exc:
                    if "duplicate column" not in str(exc):
                        raise
        if added:
            columns_added(self.name, schema, added)

    def literal(self, row: tuple[Any, ...]) -> None:
        """Always ``None``: sqlite3 binds the values itself."""
        return None

    def upsert(
        self, schema: Schema, rows: list[tuple[Any, ...]], literals: list[Any] | None = None
    ) -> list[tuple[int, str]]:
        """Write ``rows`` in one transaction (``literals`` is ignored); if it fails, one by one.
        Returns ``[(row index, error)]`` for the rows refused. A missing table (``no such
        table``) is created again and the batch written, with one warning."""
        assert self.conn is not None
        cols = ", ".join(schema.columns)
        marks = ", ".join(["?"] * len(schema.columns))
        updates = ", ".join(f"{c} = excluded.{c}" for c in schema.columns if c not in schema.unique_columns)
        sql = (
            f"INSERT INTO {schema.table} ({cols}) VALUES ({marks}) ON CONFLICT({', '.join(schema.unique_columns)}) "
            f"DO UPDATE SET {updates},"
            " updated_at = strftime('%Y-%m-%d %H:%M:%f', 'now')"
        )
        for attempt in (1, 2):
            try:
                with self.conn:
                    self.conn.executemany(sql, rows)
                return []
            except sqlite3.OperationalError as exc:
                if attempt == 1 and str(exc).startswith("no such table"):
                    table_missing(self.name, schema, f"SQLite error: {exc}", len(rows))
                    self.ensure_table(schema)
                    continue
                break
            except sqlite3.Error:
                break
        refused = []
        for i, row in enumerate(rows):
            try:
                with self.conn:
                    self.conn.execute(sql, row)
            except sqlite3.Error as exc:
                refused.append((i, f"SQLite error: {exc}"))
        return refused
