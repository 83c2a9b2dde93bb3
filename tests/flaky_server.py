"""A test HTTP server with failure modes, run as ``python tests/flaky_server.py HOST PORT LOG``.

- ``/always500/<anything>``: 500 every time.
- ``/retry-after/<seconds>/<id>``: 429 with ``Retry-After: <seconds>`` the first time, then 200.
- ``/fixed/<id>``: 500 until the file ``<LOG>.fixed`` exists, then 200.
- ``/site/<n>``: page n of a binary tree of SITE_PAGES pages (env, default 60), linking to
  pages 2n+1 and 2n+2; answered after SITE_DELAY_MS milliseconds (env, default 0), and then
  logged again as ``<unix time> END <path>``. With SITE_SLOTS (env), at most that many are
  being worked on at once, the others wait in line: the latency grows with the load, as a real
  server's does. ``<LOG>.slower`` holding a number multiplies SITE_DELAY_MS by it from then on.
- ``/sbn``: 200; ``/sbn/``: 302 to ``/bn``; ``/bn``: 503 the first time, then 302 to ``/sbn``
  (a retried request that redirects onto a page crawled already).
- ``/profile``: 302 to itself with ``Set-Cookie: s=1`` until the request has that cookie, then 200.
- ``/login``: 200 with ``Set-Cookie: auth=ok``, linking to ``/members/0`` and ``/profile``;
  ``/members/<n>``: 403 without that cookie, else page n of a binary tree of SITE_PAGES pages,
  answered after SITE_DELAY_MS milliseconds.
- ``/huge/<MB>``: an HTML page of that many megabytes (with Content-Length);
  ``/huge-unsized/<MB>`` the same without it (the body ends when the connection closes).
- ``/loop``: 302 to itself, always.
- ``/offsite``: links to ``/away/0`` ... ``/away/19`` and ``/here``; ``/away/<n>``: 301 to
  ``http://127.0.0.7:<PORT>/there/<n>``, another host (nothing answers there).
- ``/ports``: links to ``/pp`` with the server's port written out and without it (on port 80
  or 443 the same page).
- ``/goto/<host:port>/<path>``: 302 to ``http://<host:port>/<path>`` (another server).
- ``/robots.txt``: ROBOTS_TXT (env) with 200, or 404 without it; while the file
  ``<LOG>.robots-status`` exists, the status written in it (and no body).
- anything else: a small HTML page.
Every request is appended to LOG as ``<unix time> <path>``.
"""

import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOST, PORT, LOG = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
PAGES = int(os.environ.get("SITE_PAGES", "60"))
DELAY = int(os.environ.get("SITE_DELAY_MS", "0")) / 1000
SLOTS = threading.Semaphore(int(os.environ.get("SITE_SLOTS", "0")) or 10_000)
_seen: set[str] = set()
_lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        with _lock:
            with LOG.open("a") as f:
                f.write(f"{time.time():.3f} {self.path}\n")
            first = self.path not in _seen
            _seen.add(self.path)
        if self.path.startswith("/always500/"):
            return self._send(500, b"broken")
        if self.path.startswith("/retry-after/") and first:
            return self._send(429, b"slow down", {"Retry-After": self.path.split("/")[2]})
        if self.path.startswith("/fixed/") and not Path(f"{LOG}.fixed").exists():
            return self._send(500, b"not yet")
        if self.path == "/robots.txt":
            status_file = Path(f"{LOG}.robots-status")
            if status_file.exists():
                return self._send(int(status_file.read_text()), b"")
            robots = os.environ.get("ROBOTS_TXT")
            return self._send(200, robots.encode(), {"Content-Type": "text/plain"}) if robots else self._send(404, b"")
        if self.path == "/sbn/":
            return self._send(302, b"", {"Location": "/bn"})
        if self.path == "/bn":
            return self._send(503, b"busy") if first else self._send(302, b"", {"Location": "/sbn"})
        if self.path == "/login":
            links = '<a href="/members/0">members</a> <a href="/profile">profile</a>'
            page = f"<html><head><title>login</title></head><body>{links}</body></html>".encode()
            return self._send(200, page, {"Set-Cookie": "auth=ok; Path=/"})
        if self.path.startswith("/members/"):
            if "auth=ok" not in (self.headers.get("Cookie") or ""):
                return self._send(403, b"log in first")
            n = int(self.path.split("/")[2])
            time.sleep(DELAY)
            links = "".join(f'<a href="/members/{k}">{k}</a> ' for k in (2 * n + 1, 2 * n + 2) if k < PAGES)
            return self._send(200, f"<html><head><title>member {n}</title></head><body>{links}</body></html>".encode())
        if self.path == "/profile" and "s=1" not in (self.headers.get("Cookie") or ""):
            return self._send(302, b"", {"Location": "/profile", "Set-Cookie": "s=1; Path=/"})
        if self.path.startswith(("/huge/", "/huge-unsized/")):
            return self._huge(int(self.path.split("/")[2]), sized=self.path.startswith("/huge/"))
        if self.path.startswith("/goto/"):
            return self._send(302, b"", {"Location": "http://" + self.path.removeprefix("/goto/")})
        if self.path == "/loop":
            return self._send(302, b"", {"Location": "/loop"})
        if self.path == "/offsite":
            links = "".join(f'<a href="/away/{n}">{n}</a> ' for n in range(20)) + '<a href="/here">here</a>'
            return self._send(200, f"<html><head><title>offsite</title></head><body>{links}</body></html>".encode())
        if self.path.startswith("/away/"):
            return self._send(301, b"", {"Location": f"http://127.0.0.7:{PORT}/there/{self.path.split('/')[2]}"})
        if self.path == "/ports":
            links = f'<a href="http://{HOST}:{PORT}/pp">explicit</a> <a href="http://{HOST}/pp">implicit</a>'
            return self._send(200, f"<html><head><title>ports</title></head><body>{links}</body></html>".encode())
        if self.path.startswith("/site/"):
            n = int(self.path.split("/")[2])
            if DELAY:
                slower = Path(f"{LOG}.slower")
                with SLOTS:
                    time.sleep(DELAY * (float(slower.read_text()) if slower.exists() else 1))
                with _lock, LOG.open("a") as f:
                    f.write(f"{time.time():.3f} END {self.path}\n")
            links = "".join(f'<a href="/site/{k}">{k}</a> ' for k in (2 * n + 1, 2 * n + 2) if k < PAGES)
            if os.environ.get("ROBOTS_TXT"):
                links += f'<a href="/private/{n}">private</a>'
            return self._send(200, f"<html><head><title>page {n}</title></head><body>{links}</body></html>".encode())
        self._send(200, f"<html><head><title>{self.path}</title></head><body><p>ok</p></body></html>".encode())

    def _huge(self, megabytes, sized):
        chunk = b"<p>" + b"word " * 200 + b"</p>\n"  # about 1 kB
        count = megabytes * 1024 * 1024 // len(chunk)
        head, tail = b"<html><head><title>huge</title></head><body>", b"</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        if sized:
            self.send_header("Content-Length", str(len(head) + count * len(chunk) + len(tail)))
        self.end_headers()
        try:
            self.wfile.write(head)
            for _ in range(count // 64):
                self.wfile.write(chunk * 64)
            self.wfile.write(chunk * (count % 64) + tail)
        except OSError:
            pass  # the crawler cancelled the download

    def _send(self, status, body, headers=None):
        self.send_response(status)
        headers = {"Content-Type": "text/html; charset=utf-8", **(headers or {})}
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


ThreadingHTTPServer((HOST, PORT), Handler).serve_forever()
