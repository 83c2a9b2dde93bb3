"""Requests as JSON, and start-URL payloads as requests.

A queued request is the JSON form of :meth:`scrapy.Request.to_dict`, without the values that are
Scrapy's defaults: callbacks and errbacks by spider method name, headers and body as Latin-1 text
(a lossless byte-to-character mapping), meta and cb_kwargs as they are (they must be
JSON-serializable). Keys starting with ``_frontier`` in meta are this worker's bookkeeping and
are not stored.
"""

from __future__ import annotations

import codecs
import ipaddress
import json
import math
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from scrapy import Request
from scrapy.utils.request import request_from_dict
from w3lib.url import safe_url_string

from scrapy_frontier.connection import redact_url

if TYPE_CHECKING:
    from scrapy import Spider

#: Meta keys that belong to this worker only (lease bookkeeping); never serialized.
PRIVATE_META_PREFIX = "_frontier"

_ALLOWED_SCHEMES = ("http", "https")
#: Types of the request meta keys Scrapy itself reads (Scrapy docs, "Request.meta special
#: keys"): a payload that sets one to another type is refused rather than failing later.
_META_TYPES: dict[str, tuple[type, ...]] = {
    "depth": (int,),
    "download_timeout": (int, float),
    "download_maxsize": (int,),
    "download_warnsize": (int,),
    "max_retry_times": (int,),
    "dont_retry": (bool,),
    "dont_redirect": (bool,),
    "dont_cache": (bool,),
    "dont_merge_cookies": (bool,),
    "dont_obey_robotstxt": (bool,),
    "handle_httpstatus_all": (bool,),
    "handle_httpstatus_list": (list,),
    "download_slot": (str,),
    "proxy": (str,),
    "bindaddress": (str, list),
    "cookiejar": (str, int),
    "redirect_reasons": (list,),
}
#: Numeric meta keys Scrapy refuses below zero (an assertion, or a negative depth counted on).
_META_NOT_NEGATIVE = frozenset(
    {"depth", "download_timeout", "download_maxsize", "download_warnsize", "max_retry_times"}
)
#: Spider methods that are not callbacks (Scrapy calls them without a response).
_NOT_CALLBACKS = frozenset({"start", "start_requests"})
#: Priorities a Redis sorted set's score (a double) holds exactly.
_MAX_PRIORITY = 2**53

#: Request meta key: a ``dont_filter`` start request that came from a pushed start-URL payload
#: (deduplicated with the links, not among start requests only).
PUSHED_META = "_frontier_pushed"


def _refuse_constant(constant: str) -> Any:
    """``json.loads``'s hook for ``NaN``, ``Infinity`` and ``-Infinity``, which Python reads and
    JSON has no place for (RFC 8259 section 6): refused, as ``bad_json``."""
    raise RequestRefused("bad_json", f"{constant} is not a JSON number (RFC 8259 section 6)")


def _finite_float(text: str) -> float:
    """``json.loads``'s hook for numbers with a fraction or exponent: one too large for a double
    (``1e999``, read as infinity) is refused, as ``bad_json``."""
    value = float(text)
    if math.isinf(value):
        raise RequestRefused("bad_json", f"{text[:50]} is too large for a number")
    return value


_PAYLOAD_KEYS = frozenset(
    {"url", "meta", "method", "headers", "body", "priority", "callback", "cb_kwargs", "dont_filter"}
)


class RequestRefused(ValueError):
    """A request cannot be put in the shared frontier; ``reason`` is a short stat word."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


#: Attributes written apart: the URL always, callbacks by name, headers and body as Latin-1 text.
_SPECIAL = frozenset({"url", "callback", "errback", "headers", "body"})
#: The value of each ``Request.to_dict()`` key that a payload leaves out (scrapy/http/request).
_DEFAULTS: dict[str, Any] = {
    "callback": None,
    "errback": None,
    "method": "GET",
    "headers": {},
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "priority": 0,
    "dont_filter": False,
    "flags": [],
    "cb_kwargs": {},
}


def method_name(spider: Spider, func: Any) -> str | None:
    """Name of the spider method ``func`` is bound to; raises :class:`RequestRefused` otherwise."""
    if func is None or isinstance(func, str):
        return func
    name = getattr(func, "__name__", None)
    if (
        getattr(func, "__self__", None) is spider
        and name
        and getattr(getattr(spider, name, None), "__func__", None) is getattr(func, "__func__", 0)
    ):
        return name
    raise RequestRefused(
        "callback",
        f"callback {func!r} is not a method of spider {spider.name!r}: a request in Redis names its callback, so it "
        "must be a spider method",
    )


def request_to_json(request: Request, spider: Spider) -> str:
    """Serialize ``request`` as :meth:`scrapy.Request.to_dict` does (every name in the class's
    ``attributes``, so subclasses such as ``JsonRequest`` keep their own, and ``_class`` for a
    subclass), leaving out every value that is Scrapy's default; :func:`request_from_json` reads it
    back with :func:`scrapy.utils.request.request_from_dict`. Callbacks are named by
    :func:`method_name`, without the method-by-method search of ``to_dict(spider=...)``, which
    costs many times more per request, and a page queues dozens.

    Raises :class:`RequestRefused`: reason ``callback`` for a callback or errback that is not a
    method of ``spider`` (a lambda, another object's function), ``not_json`` naming the ``meta``,
    ``cb_kwargs`` or ``cookies`` key whose value JSON cannot hold.
    """
    out: dict[str, Any] = {"url": request.url}
    callback = method_name(spider, request.callback)
    if callback is not None:
        out["callback"] = callback
    errback = method_name(spider, request.errback)
    if errback is not None:
        out["errback"] = errback
    for key in request.attributes:
        if key in _SPECIAL:
            continue
        value = getattr(request, key)
        if key in _DEFAULTS and value == _DEFAULTS[key]:
            continue
        out[key] = value
    if request.headers:
        out["headers"] = {k.decode("latin-1"): [v.decode("latin-1") for v in vs] for k, vs in request.headers.items()}
    if request.body:
        out["body"] = request.body.decode("latin-1")
    if "meta" in out:
        meta = {k: v for k, v in out["meta"].items() if not k.startswith(PRIVATE_META_PREFIX)}
        if meta:
            out["meta"] = meta
        else:
            del out["meta"]
    if "flags" in out:
        out["flags"] = list(out["flags"])
    if type(request) is not Request:
        out["_class"] = f"{type(request).__module__}.{type(request).__name__}"
    try:
        return json.dumps(out, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise RequestRefused("not_json", f"{_not_json(out)} ({exc}); a request in Redis is JSON") from None


def _not_json(d: dict[str, Any]) -> str:
    """Which key of a request's dict JSON cannot hold, in words."""
    for section in ("meta", "cb_kwargs", "cookies"):
        value = d.get(section)
        for key, item in value.items() if isinstance(value, dict) else ():
            try:
                json.dumps(item)
            except (TypeError, ValueError):
                return f"{section} key {key!r} holds a {type(item).__name__}, which is not JSON-serializable"
    for key, value in d.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            return f"{key!r} holds a {type(value).__name__}, which is not JSON-serializable"
    return "the request is not JSON-serializable"


def request_from_json(payload: str | bytes, spider: Spider) -> Request:
    """Inverse of :func:`request_to_json`. Raises ``ValueError`` for a payload it cannot rebuild."""
    d = json.loads(payload)
    if "headers" in d:
        d["headers"] = {k.encode("latin-1"): [v.encode("latin-1") for v in vs] for k, vs in d["headers"].items()}
    if "body" in d:
        d["body"] = d["body"].encode("latin-1")
    return request_from_dict(d, spider=spider)


#: Characters that never appear in a host, even an internationalized one (RFC 3986 section 3.2.2):
#: white space, controls, and the delimiters "<>\"{}|\\^`".
_BAD_HOST_CHARS = re.compile(r'[\s\x00-\x1f\x7f<>"{}|\\^`]')
#: A host whose last label is all digits: an IPv4 address or nothing (a resolver would look up
#: ``256.1.1.1`` in DNS as a name).
_NUMERIC_LABEL = re.compile(r"(?:^|\.)[0-9]+\.?$")


#: The longest URL accepted, in characters: Scrapy's ``URLLENGTH_LIMIT`` default (the limit its
#: UrlLengthMiddleware puts on the links a spider yields, after Internet Explorer's 2,083).
URL_MAX_LENGTH = 2083


def check_url(url: Any) -> str:
    """Return ``url`` made safe (RFC 3986 escaping by w3lib), or raise :class:`RequestRefused`.

    Only absolute ``http`` and ``https`` URLs with a host, no user or password (Scrapy sends
    none from a URL: its HttpAuthMiddleware takes ``http_user`` / ``http_pass``; and the URL
    would carry the password into logs and dead letters) and at most :data:`URL_MAX_LENGTH`
    characters are accepted. A refused URL is shown by :func:`~scrapy_frontier.connection.redact_url`:
    its password is never repeated in the message.
    """
    if not isinstance(url, str) or not url.strip():
        raise RequestRefused("bad_url", f"url must be a non-empty string, got {url!r:.100}")
    url = url.strip()
    if len(url) > URL_MAX_LENGTH:
        raise RequestRefused(
            "bad_url",
            f"URL is {len(url)} characters long, over {URL_MAX_LENGTH} (Scrapy's URLLENGTH_LIMIT): "
            f"{redact_url(url)!r:.200}",
        )
    try:
        url.encode("utf-8")
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number in 0-65535, RFC 3986 section 3.2.3)
    except (ValueError, UnicodeError) as exc:
        shown = redact_url(url)
        why = exc if shown == url else type(exc).__name__  # its message may quote the password
        raise RequestRefused("bad_url", f"not a URL: {shown!r:.200} ({why})") from None
    if "@" in parts.netloc:
        raise RequestRefused(
            "bad_url",
            "URL has a user or password before its host, which Scrapy does not send (use the http_user and "
            f"http_pass spider attributes of HttpAuthMiddleware): {redact_url(url)!r:.200}",
        )
    if not parts.scheme:
        raise RequestRefused("bad_url", f"not an absolute URL: {url!r:.200}")
    if parts.scheme.lower() not in _ALLOWED_SCHEMES:
        raise RequestRefused("bad_scheme", f"scheme {parts.scheme!r} is not http or https: {url!r:.200}")
    if not host:
        raise RequestRefused("bad_url", f"URL has no host: {url!r:.200}")
    if _BAD_HOST_CHARS.search(host):
        raise RequestRefused(
            "bad_url",
            f"host {host!r:.100} has characters a host name cannot have (RFC 3986 section 3.2.2): {url!r:.200}",
        )
    if _NUMERIC_LABEL.search(host) and ":" not in host:
        try:
            ipaddress.IPv4Address(host.removesuffix("."))
        except ValueError:
            raise RequestRefused(
                "bad_url",
                f"host {host!r:.100} ends with a number but is not an IPv4 address (four numbers 0-255, RFC 3986 "
                f"section 3.2.2; no top-level domain is all digits, RFC 3696 section 2): {url!r:.200}",
            ) from None
    try:
        return safe_url_string(url)
    except (ValueError, UnicodeError) as exc:  # what urlsplit lets through and w3lib does not
        raise RequestRefused("bad_url", f"not a URL: {url!r:.200} ({exc})") from None


_DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def without_default_port(url: str) -> str:
    """``url`` without an explicit default port (``http://h:80/p`` -> ``http://h/p``, ``:443``
    for https): the same resource (RFC 3986 section 6.2.3, scheme-based normalization), which
    Scrapy's request fingerprint would otherwise tell apart. Any other URL is returned as it is."""
    scheme, sep, rest = url.partition("://")
    suffix = _DEFAULT_PORTS.get(scheme)
    if suffix is None or not sep:
        return url
    end = len(rest)
    for delimiter in "/?#":
        at = rest.find(delimiter)
        if at != -1 and at < end:
            end = at
    authority = rest[:end]
    if not authority.endswith(suffix):
        return url
    return f"{scheme}://{authority[: -len(suffix)]}{rest[end:]}"


def is_utf8(encoding: str) -> bool:
    """Whether ``encoding`` names UTF-8 (``utf-8``, ``UTF8``, ``utf_8``...); raises ``LookupError``
    for a name that is not a Python codec."""
    return codecs.lookup(encoding).name == "utf-8"


def parse_start_payload(
    raw: bytes, spider: Spider, max_bytes: int, encoding: str = "utf-8", *, default_dont_filter: bool = False
) -> tuple[Request, list[str]]:
    """Turn one ``<spider>:start_urls`` entry, text in ``encoding`` (``REDIS_ENCODING``, a Python
    codec name), into a request.

    ``raw`` is a URL, or a JSON object with the keys ``url`` (required), ``meta``, ``method``,
    ``headers``, ``body``, ``priority``, ``callback`` (a spider method name), ``cb_kwargs`` and
    ``dont_filter``. A JSON string is taken as a URL. Returns the request and the unknown keys it
    ignored; raises :class:`RequestRefused` with reason ``too_large``, ``not_utf8`` (or
    ``not_decodable`` with another encoding), ``bad_json``,
    ``not_object``, ``bad_field``, ``bad_url`` or ``bad_scheme``, and ``bad_payload`` for any
    other failure (JSON nested too deep for Python's parser: ``RecursionError``), so the workers
    and ``scrapy push`` refuse the same payloads. The body is sent as given: it is never turned
    into form data.

    ``encoding`` decodes the payload (REDIS_ENCODING; ``not_utf8``, or ``not_decodable`` for another
    encoding: ``not_decodable``, when it does not decode). ``default_dont_filter`` is the request's ``dont_filter``
    when the payload does not say (a URL, or JSON without the key): ``True`` for a scrapy-redis
    spider, whose start requests are ``dont_filter`` (Scrapy's offsite filter lets them through);
    such a request is also marked ``is_start_request`` and :data:`PUSHED_META`: the scheduler
    fetches it once per crawl, and a link to it found later is filtered too.
    """
    try:
        request, unknown = _parse_start_payload(raw, spider, max_bytes, encoding)
    except RequestRefused:
        raise
    except Exception as exc:  # one bad payload never stops a batch, nor a command
        raise RequestRefused("bad_payload", f"{type(exc).__name__}: {exc}") from None
    if default_dont_filter and not request.dont_filter and not _says_dont_filter(raw, encoding):
        request.dont_filter = True
        request.meta.setdefault("is_start_request", True)
        request.meta[PUSHED_META] = True
    return request, unknown


def _says_dont_filter(raw: bytes, encoding: str) -> bool:
    """Whether a start-URL payload (already parsed without error) is a JSON object with ``dont_filter``."""
    text = raw.decode(encoding).strip()
    if not text.startswith("{"):
        return False
    data = json.loads(text)
    return isinstance(data, dict) and data.get("dont_filter") is not None


def _parse_start_payload(raw: bytes, spider: Spider, max_bytes: int, encoding: str) -> tuple[Request, list[str]]:
    if len(raw) > max_bytes:
        raise RequestRefused("too_large", f"payload of {len(raw)} bytes is over REDIS_START_URLS_MAX_BYTES={max_bytes}")
    try:
        text = raw.decode(encoding).strip()
    except UnicodeDecodeError as exc:
        if is_utf8(encoding):
            raise RequestRefused("not_utf8", f"payload is not UTF-8 ({exc})") from None
        raise RequestRefused("not_decodable", f"payload is not {encoding} (REDIS_ENCODING; {exc})") from None
    if not text or text[0] not in '{["-0123456789' and text not in ("true", "false", "null"):
        return Request(check_url(text)), []
    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except RequestRefused:
        raise
    except ValueError as exc:
        if text[0] not in '{["':  # a digit first: a URL without its scheme (127.0.0.1:8080/x), not JSON
            return Request(check_url(text)), []
        raise RequestRefused("bad_json", f"payload looks like JSON but does not parse ({exc})") from None
    if isinstance(data, str):
        return Request(check_url(data)), []
    if not isinstance(data, dict):
        raise RequestRefused("not_object", f"JSON payload must be an object or a URL string, got {type(data).__name__}")
    unknown = sorted(set(data) - _PAYLOAD_KEYS)
    kwargs: dict[str, Any] = {"url": check_url(data.get("url"))}
    for key, expected in (
        ("meta", dict),
        ("cb_kwargs", dict),
        ("headers", dict),
        ("method", str),
        ("body", str),
        ("priority", int),
        ("dont_filter", bool),
    ):
        if key in data and data[key] is not None:
            value = data[key]
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise RequestRefused("bad_field", f"{key!r} must be {expected.__name__}, got {type(value).__name__}")
            kwargs[key] = value
    if "priority" in kwargs and abs(kwargs["priority"]) > _MAX_PRIORITY:
        raise RequestRefused(
            "bad_field",
            f"priority {kwargs['priority']} is beyond +-2**53 (a sorted set's score holds integers exactly up to "
            "there)",
        )
    for name, value in kwargs.get("headers", {}).items():
        values = value if isinstance(value, list) else [value]
        if not all(isinstance(v, (str, int)) and not isinstance(v, bool) for v in values):
            raise RequestRefused(
                "bad_field",
                f"header {name!r:.100} must be a string, a number or a list of them, got {json.dumps(value)[:100]}",
            )
    if "method" in kwargs and not kwargs["method"].isalpha():
        raise RequestRefused("bad_field", f"method {kwargs['method']!r:.50} is not an HTTP method")
    callback = data.get("callback")
    if callback is not None:
        if not isinstance(callback, str) or not callable(getattr(spider, callback, None)) or callback.startswith("_"):
            raise RequestRefused("bad_field", f"callback {callback!r:.100} is not a method of spider {spider.name!r}")
        kwargs["callback"] = getattr(spider, callback)
        try:
            method_name(spider, kwargs["callback"])  # what the frontier will ask of it (a static method fails)
        except RequestRefused as exc:
            raise RequestRefused("bad_field", str(exc)) from None
    if "meta" in kwargs:
        kwargs["meta"] = {k: v for k, v in kwargs["meta"].items() if not k.startswith(PRIVATE_META_PREFIX)}
        for key, value in kwargs["meta"].items():
            types = _META_TYPES.get(key)
            if types and (not isinstance(value, types) or (bool not in types and isinstance(value, bool))):
                raise RequestRefused(
                    "bad_field",
                    f"meta {key!r} must be {' or '.join(t.__name__ for t in types)}, got {type(value).__name__}",
                )
            if key in _META_NOT_NEGATIVE and value < 0:
                raise RequestRefused("bad_field", f"meta {key!r} must be 0 or more, got {value!r}")
    if callback in _NOT_CALLBACKS:
        raise RequestRefused(
            "bad_field", f"callback {callback!r} is the spider's start method, which takes no response"
        )
    try:
        return Request(**kwargs), unknown
    except (TypeError, ValueError) as exc:
        raise RequestRefused("bad_field", f"cannot build a request from the payload ({exc})") from None
