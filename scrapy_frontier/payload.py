"""The queued form of a request: its JSON (:func:`scrapy_frontier.serialize.request_to_json`)
less the scheme and host that the host's queue key already holds, and back."""

from __future__ import annotations

from scrapy_frontier.keys import START_LEASE_PREFIX

#: Field prefix of a raw start-URL payload held under lease (:data:`scrapy_frontier.keys.START_LEASE_PREFIX`).
START_PREFIX = START_LEASE_PREFIX.encode()

#: The start of a JSON payload (:func:`scrapy_frontier.serialize.request_to_json` writes the URL first).
_URL_OPEN = '{"url":"'
#: What may follow a URL's host: its port, path, query or fragment, or the URL's end (RFC 3986 3.2.2).
_AFTER_HOST = frozenset(':/?#"')


def compact_payload(payload: str, host: str) -> str:
    """The queued form of a request's JSON ``payload`` in the queue of ``host`` (a URL's host, as
    :func:`queue_host` names it), since the queue's key holds the host: what follows
    ``{"url":"https://<host>`` (``{"url":"https://example.com/a"}`` -> ``/a"}``), or ``h`` and
    what follows ``{"url":"http://<host>``. That is 16 bytes plus the host's length less a
    request (about 40 on the web's host names). A lease keeps this form (in the node's lease hash,
    and back in the queue when given back); the worker writes the JSON back
    (:func:`expand_payload`), so dead letters and the spider see the JSON as before. Any other
    payload (a host written in capitals, an IP v6 literal, a start URL's JSON) is returned as it
    is: a JSON payload starts with ``{``, and what follows a host (RFC 3986 3.2.2: its port,
    path, query, fragment, or the URL's end) never does."""
    for scheme, mark in (("https", ""), ("http", "h")):
        opening = f"{_URL_OPEN}{scheme}://{host}"
        if payload.startswith(opening) and payload[len(opening) : len(opening) + 1] in _AFTER_HOST:
            return mark + payload[len(opening) :]
    return payload


def expand_payload(stored: bytes, host: bytes) -> bytes:
    """The request's JSON of a payload as its host's queue stores it (:func:`compact_payload`'s
    inverse): ``/a"}`` of ``example.com`` -> ``{"url":"https://example.com/a"}``, ``h/a"}`` ->
    ``{"url":"http://example.com/a"}``, a JSON payload (``{`` first) as it is."""
    first = stored[:1]
    if first == b"{":
        return stored
    if first == b"h":
        return b'{"url":"http://' + host + stored[1:]
    return b'{"url":"https://' + host + stored


def lease_host(field: bytes) -> bytes:
    """The host of a lease field (``<lease id>\\t<score>\\t<host>``,
    :class:`~scrapy_frontier.frontier.Lease`), ``b""`` for a start URL's."""
    if field.startswith(START_PREFIX):
        return b""
    return field[field.rfind(b"\t") + 1 :]
