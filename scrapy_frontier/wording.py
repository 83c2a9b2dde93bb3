"""Wording shared by log lines and command output: a count with its noun, and a payload shown so
that a terminal prints it as text (escaped, never raw bytes or control characters) and without
the passwords of the URLs in it."""

from __future__ import annotations

import re

#: Bytes of a payload shown in a refusal (the rest is counted, not shown).
SHOWN_PAYLOAD_BYTES = 200


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``count`` and ``noun``, in the singular for exactly one: ``plural(1, "lease")`` is
    ``"1 lease"``, ``plural(0, "lease")`` ``"0 leases"``; ``plural_form`` for a noun that does
    not take an ``s`` (``plural(2, "replica entry", "replica entries")``)."""
    return f"{count} {noun if count == 1 else plural_form or noun + 's'}"


#: ``://user:password@``: the password of a URL's userinfo (RFC 3986, section 3.2.1), up to the
#: last ``@`` before the host (a password may hold an ``@``). It starts with the literal ``://``,
#: so a search is linear in the payload's size, ten megabytes of one letter included.
_USERINFO_PASSWORD = re.compile(rb"://([^/?#@:\s\"'\\]*):[^/?#\s\"'\\]*@")


def duration(seconds: float) -> str:
    """A duration for a reader: ``4.2s``, ``12m 5s``, ``3h 20m``, ``41d 6h``."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def hide_passwords(raw: bytes) -> bytes:
    """``raw`` with the password of every URL in it written ``***`` (``http://user:***@host/``,
    as :func:`scrapy_frontier.connection.redact_url` writes one URL): what a log line or a
    command shows of a payload. Hidden before a payload is cut to a limit, so that no cut leaves
    half a password shown."""
    return _USERINFO_PASSWORD.sub(rb"://\1:***@", raw)


def shown_payload(raw: bytes, limit: int = SHOWN_PAYLOAD_BYTES) -> str:
    """``raw`` as one printable, quoted line of at most ``limit`` bytes of it, its URLs'
    passwords hidden (:func:`hide_passwords`): Python's ``repr`` of the text when it is UTF-8
    (``'https://x/\\x1b[2J'``: control characters escaped), of the bytes when it is not
    (``b'\\xff\\xfe...'``), then ``... (N bytes)`` when cut (N: the payload's own size)."""
    size = len(raw)
    raw = hide_passwords(raw)
    head = raw[:limit]
    try:
        text = repr(head.decode("utf-8"))
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data" and len(raw) > limit:  # cut inside a character
            text = repr(head[: exc.start].decode("utf-8"))
        else:
            text = repr(head)
    return text if len(raw) <= limit else f"{text}... ({size} bytes)"


def payload_text(raw: bytes, limit: int = SHOWN_PAYLOAD_BYTES) -> str:
    """``raw`` (at most ``limit`` bytes of it) as a string for JSON output, its URLs' passwords
    hidden (:func:`hide_passwords`): the text when it is UTF-8, with each byte that is not
    written ``\\xNN``."""
    return hide_passwords(raw)[:limit].decode("utf-8", "backslashreplace")
