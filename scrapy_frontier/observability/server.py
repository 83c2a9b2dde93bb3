"""The HTTP server of a worker's Prometheus metrics (prometheus-client's own server thread).

``METRICS_PORT`` is a port or an inclusive range of ports tried in order (several workers on one
machine each take the next free one). When every port of it is taken, the metrics go to any
free port: the address a worker serves on is recorded in the node registry, so it is found
there. The functions here block: call them off the reactor (``asyncio.to_thread``).
"""

from __future__ import annotations

import errno
import re
import socket
from typing import TYPE_CHECKING, Any

from prometheus_client import start_http_server

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client import CollectorRegistry

#: The default ``METRICS_PORT``: the first free port of this range.
DEFAULT_PORTS = "9410-9429"


def parse_ports(value: Any) -> list[int]:
    """``METRICS_PORT``: a port (``9410``; ``0`` = any free port) or an inclusive range tried
    in order (``"9410-9429"``). Returns the ports to try. Raises ValueError naming the setting."""
    text = str(value).strip()
    match = re.fullmatch(r"(\d{1,5})(?:\s*-\s*(\d{1,5}))?", text)
    if match:
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        if match.group(2) is None and first <= 65535:
            return [first]
        if 1 <= first <= last <= 65535:
            return list(range(first, last + 1))
    raise ValueError(
        f"Setting METRICS_PORT={value!r} is not a port (0-65535, 0 = any free port) or a range like {DEFAULT_PORTS}"
    )


def ports_text(ports: list[int]) -> str:
    """``[9410]`` -> ``9410``; ``[9410, ..., 9429]`` -> ``9410-9429`` (for log lines)."""
    return str(ports[0]) if len(ports) == 1 else f"{ports[0]}-{ports[-1]}"


class PortsBusy(OSError):
    """Every port of ``METRICS_PORT`` is taken."""


def serve(host: str, ports: list[int], registry: CollectorRegistry) -> WSGIServer:
    """Serve ``registry`` on the first free port of ``ports``. Raises :class:`PortsBusy` when
    all are taken, OSError when ``host`` cannot be bound."""
    for port in ports:
        try:
            server, _ = start_http_server(port, host, registry)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                continue
            raise
        return server
    raise PortsBusy(errno.EADDRINUSE, "every port is in use")


def start_server(host: str, ports: list[int], registry: CollectorRegistry) -> tuple[WSGIServer, bool]:
    """Serve ``registry`` on the first free port of ``ports``, or on any free port when all are
    taken. Returns ``(server, moved)``, ``moved`` True in the second case. Raises OSError when
    ``host`` cannot be bound."""
    try:
        return serve(host, ports, registry), False
    except PortsBusy:
        return serve(host, [0], registry), True


def server_address(host: str, port: int) -> str:
    """``host:port`` to reach a server bound on ``host`` (``[host]:port`` for IPv6; the machine's
    name for a wildcard address)."""
    shown = socket.gethostname() if host in ("0.0.0.0", "::") else host
    return f"[{shown}]:{port}" if ":" in shown else f"{shown}:{port}"


def stop_server(server: WSGIServer) -> None:
    """Stop serving and close the socket."""
    server.shutdown()
    server.server_close()
