"""A test site whose pages change on a known schedule, run as
``python tests/changing_server.py HOST PORT LOG``.

- ``/``: links to ``/p/0`` ... ``/p/<PAGES - 1>`` (env ``PAGES``, default 40).
- ``/p/<n>`` (any query string: the same page, logged with it): the paragraphs of one page of
  Python's documentation (Debian's ``python3.11-doc``, the n-th of ``library/*.html``) in an
  ``<article>``, with the sentence ``Revision <v>.``, and an
  ``<aside>`` that changes on every request (the time, an advert): the part no reader keeps.
  Every ``CHANGING``-th page (env, default 4; page 0, 4, 8...) changes every ``PERIOD`` seconds
  (env, default 8): its revision is ``(now - start) // PERIOD``; the others stay at revision 0.
- With ``VALIDATORS=1`` (env, the default), a page carries ``ETag: "<n>-<v>"`` and
  ``Last-Modified`` (the start of its revision), and answers ``304`` when ``If-None-Match``
  names its ETag (else when ``If-Modified-Since`` is not before its ``Last-Modified``), as
  RFC 9110 section 13.1 says. With ``VALIDATORS=0``, neither header, and never a 304.

- A page whose number is a line of the file ``<LOG>.gone`` answers ``410 Gone``.

Every request of a page is appended to LOG as ``<unix time> <path> <status> <revision>
<conditional: 1/0>``.
"""

import os
import re
import sys
import threading
import time
from email.utils import formatdate, parsedate_to_datetime
from html import escape, unescape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST, PORT, LOG = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
PAGES = int(os.environ.get("PAGES", "40"))
CHANGING = int(os.environ.get("CHANGING", "4"))
PERIOD = float(os.environ.get("PERIOD", "8"))
VALIDATORS = os.environ.get("VALIDATORS", "1") == "1"
DOCS = Path(os.environ.get("DOCS_DIR", "/usr/share/doc/python3.11/html")) / "library"
START = time.time()
_lock = threading.Lock()


def paragraphs(path: Path) -> list[str]:
    html = path.read_text(encoding="utf-8", errors="replace")
    found = [
        re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", "", p))).strip()
        for p in re.findall(r"<p>(.*?)</p>", html, re.S)
    ]
    return [p for p in found if len(p) > 80][:8]


SOURCES = [(p.stem, paragraphs(p)) for p in sorted(DOCS.glob("*.html"))]
SOURCES = [(name, found) for name, found in SOURCES if len(found) >= 4][:PAGES]


def revision(n: int) -> int:
    return int((time.time() - START) // PERIOD) if n % CHANGING == 0 else 0


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if status != 304:
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if status != 304:
            self.wfile.write(body)

    def do_GET(self):
        if self.path == "/":
            links = "".join(f'<li><a href="/p/{n}">page {n}</a></li>' for n in range(len(SOURCES)))
            return self._send(
                200, f"<html><head><title>Index</title></head><body><ul>{links}</ul></body></html>".encode()
            )
        m = re.fullmatch(r"/p/(\d+)", self.path.split("?", 1)[0])
        if not m or int(m.group(1)) >= len(SOURCES):
            return self._send(404, b"<html><body>not here</body></html>")
        n = int(m.group(1))
        gone = Path(f"{LOG}.gone")
        if gone.exists() and str(n) in gone.read_text().split():
            with _lock, LOG.open("a") as f:
                f.write(f"{time.time():.3f} {self.path} 410 -1 0\n")
            return self._send(410, b"<html><body>gone</body></html>")
        v = revision(n)
        etag = f'"{n}-{v}"'
        modified = START + v * PERIOD if v else START
        headers = {"ETag": etag, "Last-Modified": formatdate(modified, usegmt=True)} if VALIDATORS else {}
        inm, ims = self.headers.get("If-None-Match"), self.headers.get("If-Modified-Since")
        status = 200
        if VALIDATORS and inm is not None:
            status = 304 if etag in [t.strip() for t in inm.split(",")] else 200
        elif VALIDATORS and ims is not None:
            try:
                status = 304 if parsedate_to_datetime(ims).timestamp() >= int(modified) else 200
            except (TypeError, ValueError):
                status = 200
        with _lock, LOG.open("a") as f:
            f.write(f"{time.time():.3f} {self.path} {status} {v} {int(inm is not None or ims is not None)}\n")
        if status == 304:
            return self._send(304, headers=headers)
        name, found = SOURCES[n]
        text = "".join(f"<p>{escape(p)}</p>" for p in found)
        body = (
            f"<html><head><title>{escape(name)}</title></head><body>"
            f'<nav><a href="/">Index</a></nav>'
            f"<article><h1>{escape(name)}</h1>{text}<p>Revision {v}.</p></article>"
            f"<aside>Served at {time.time():.6f}. Advert {os.urandom(4).hex()}: buy now.</aside>"
            f"</body></html>"
        )
        self._send(200, body.encode(), headers)


ThreadingHTTPServer((HOST, PORT), Handler).serve_forever()
