"""Wording shared by log lines and command output: a count with its noun, and a payload shown so
that a terminal prints it as text (escaped, never raw bytes or control characters)."""

from __future__ import annotations

#: Bytes of a payload shown in a refusal (the rest is counted, not shown).
SHOWN_PAYLOAD_BYTES = 200


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``count`` and ``noun``, in the singular for exactly one: ``plural(1, "lease")`` is
    ``"1 lease"``, ``plural(0, "lease")`` ``"0 leases"``; ``plural_form`` for a noun that does
    not take an ``s`` (``plural(2, "replica entry", "replica entries")``)."""
    return f"{count} {noun if count == 1 else plural_form or noun + 's'}"


def shown_payload(raw: bytes, limit: int = SHOWN_PAYLOAD_BYTES) -> str:
    """``raw`` as one printable, quoted line of at most ``limit`` bytes of it: Python's ``repr``
    of the text when it is UTF-8 (``'https://x/\\x1b[2J'``: control characters escaped), of the
    bytes when it is not (``b'\\xff\\xfe...'``), then ``... (N bytes)`` when cut."""
    head = raw[:limit]
    try:
        text = repr(head.decode("utf-8"))
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data" and len(raw) > limit:  # cut inside a character
            text = repr(head[: exc.start].decode("utf-8"))
        else:
            text = repr(head)
    return text if len(raw) <= limit else f"{text}... ({len(raw)} bytes)"


def payload_text(raw: bytes, limit: int = SHOWN_PAYLOAD_BYTES) -> str:
    """``raw`` (at most ``limit`` bytes of it) as a string for JSON output: the text when it is
    UTF-8, with each byte that is not written ``\\xNN``."""
    return raw[:limit].decode("utf-8", "backslashreplace")
