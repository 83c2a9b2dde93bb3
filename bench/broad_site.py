"""A broad site on loopback for the benchmarks: ``python -m bench.broad_site HOSTS PAGES PORT``.

Serves ``HOSTS`` hosts, 127.1.0.1 and on, on ``PORT``, each with ``PAGES`` pages
``/p/<n>``; page n of host i links to page n + 1 of its own host and to page n of hosts i + 1
and i + 7 (mod ``HOSTS``), so a crawl from ``http://127.1.0.1:PORT/p/0`` spreads over every host
and reaches ``HOSTS`` x ``PAGES`` pages. One process, one listening socket per host.
"""

from __future__ import annotations

import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from socketserver import ThreadingMixIn

HOSTS, PAGES, PORT = (int(a) for a in sys.argv[1:4]) if len(sys.argv) > 3 else (40, 30, 8091)


def host(i: int) -> str:
    return f"127.1.{(i + 1) // 256}.{(i + 1) % 256}"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        me = int(self.server.index)
        try:
            n = int(self.path.rsplit("/", 1)[1])
        except ValueError:
            n = 0
        links = []
        if n + 1 < PAGES:
            links.append(f"http://{host(me)}:{PORT}/p/{n + 1}")
        links += [f"http://{host((me + step) % HOSTS)}:{PORT}/p/{n}" for step in (1, 7)]
        body = "<html><head><title>h{} p{}</title></head><body>{}<p>{}</p></body></html>".format(
            me, n, "".join(f'<a href="{u}">{u}</a> ' for u in links), "text " * 200
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(ThreadingMixIn, HTTPServer):
    daemon_threads = True


def main() -> None:
    servers = []
    for i in range(HOSTS):
        s = Server((host(i), PORT), Handler)
        s.index = i
        servers.append(s)
    for s in servers[1:]:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("ready", flush=True)
    servers[0].serve_forever()


if __name__ == "__main__":
    main()
