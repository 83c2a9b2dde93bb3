"""Ports on loopback, for the tests and the benchmarks (``bench/`` imports this module)."""

from __future__ import annotations

import contextlib
import socket
import time


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on at ``host`` now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_cluster_port(host: str = "127.0.0.1") -> int:
    """A free port whose Redis Cluster bus port (port + 10000) is free too, both below Linux's
    ephemeral range (32768 and up: ``ip_local_port_range``), so that no outgoing connection of
    another test, nor :func:`free_port`, takes one between this check and the node's start."""
    import random

    for _ in range(200):
        port = random.randint(10000, 22000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind((host, port))
                b.bind((host, port + 10000))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair for a Redis Cluster node")


def wait_port(host: str, port: int, timeout: float = 10) -> None:
    """Return once something accepts connections on ``host:port``; raises ``RuntimeError`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {host}:{port} after {timeout:.0f} s")
