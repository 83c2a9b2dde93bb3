"""Real servers on loopback, for the tests and the benchmarks: ``redis-server``, a Redis Cluster,
``mariadbd``, a Python HTTP server, and what a frontier holds in such a Redis.

tests/conftest.py makes fixtures of them; bench/ imports this module as ``tests.servers`` (its
scripts run as modules from the repository root, ``python -m bench.speed``, which puts the root
on ``sys.path``). Ports come from tests/loopback.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pymysql
import redis

from tests.loopback import free_cluster_port, free_port, wait_port

#: Debian's python3.11-doc HTML (``DOCS_DIR`` overrides it): the site most tests and
#: bench/cluster_cpu.py crawl.
DOCS = Path(os.environ.get("DOCS_DIR", "/usr/share/doc/python3.11/html"))


def queued_requests(client: redis.Redis, prefix: bytes = b"site:requests:") -> int:
    """Requests queued in an unsharded frontier: every host of ``site:requests``, each priority
    list of its queue (scrapy_frontier/lua/lib/frontier_queue.lua: priority 0's list, and one per
    score in the host's sorted set of the other priorities)."""
    total = 0
    for host in client.zrange(prefix[:-1], 0, -1):
        queue = prefix + host
        scores = {b"0", *client.zrange(queue, 0, -1)}
        total += sum(client.llen(queue + b"#" + score) for score in scores)
    return total


class HttpServer:
    """``python -m http.server`` (threaded) serving a directory on a 127.0.0.x address."""

    def __init__(self, directory: Path, host: str = "127.0.0.2", log: Path | None = None) -> None:
        self.host = host
        self.port = free_port(host)
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(self.port), "--bind", host, "--directory", str(directory)],
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb") if log else subprocess.DEVNULL,
        )
        wait_port(host, self.port)
        self.url = f"http://{host}:{self.port}/"

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)

    def fetches(self) -> dict[str, int]:
        """GET requests per path, from the access log (needs ``log``)."""
        counts: dict[str, int] = {}
        for match in re.finditer(r'"GET (\S+) HTTP', self.log.read_text(errors="replace")):
            counts[match.group(1)] = counts.get(match.group(1), 0) + 1
        return counts


class RedisServer:
    """A private ``redis-server`` on a free loopback port, without persistence: for tests that
    stop or reconfigure a server, and benchmarks whose millions of keys must not touch a shared
    Redis. ``directory`` is its working directory (``--dir``; None: the current one, where
    nothing is written without ``save`` or ``appendonly``); ``options`` are more ``redis-server``
    arguments (``appendonly="yes"``). :attr:`url` is its database 0. A context manager: stopped
    on exit."""

    def __init__(self, directory: Path | None = None, port: int | None = None, **options: str) -> None:
        if not shutil.which("redis-server"):
            raise SystemExit("redis-server is not installed: apt-get install redis-server")
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        if directory is not None:
            self.cmd += ["--dir", str(directory)]
        for key, value in options.items():
            self.cmd += [f"--{key}", value]
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port("127.0.0.1", self.port)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MariaDB:
    """A throwaway mariadbd with its own datadir on a free port (no grant tables: any user);
    ``options`` are more mariadbd arguments (``--wait-timeout=3``)."""

    def __init__(self, root: Path, *options: str) -> None:
        self.options = options
        self.datadir = root / "data"
        self.port = free_port()
        self.log = root / "mariadbd.log"
        subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={self.datadir}",
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.proc: subprocess.Popen | None = None
        self.start()
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", autocommit=True)
        with conn.cursor() as cur:
            cur.execute("CREATE DATABASE crawl CHARACTER SET utf8mb4")
        conn.close()
        self.url = f"mysql://root@127.0.0.1:{self.port}/crawl"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={self.datadir}",
                f"--port={self.port}",
                "--bind-address=127.0.0.1",
                f"--socket={self.datadir}/mysqld.sock",
                "--user=root",
                "--skip-grant-tables",
                "--skip-log-bin",
                *self.options,
            ],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("ab"),
        )
        wait_port("127.0.0.1", self.port, timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)

    def query(self, sql: str):
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", database="crawl")
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall()
        finally:
            conn.close()


class RedisCluster:
    """A private Redis Cluster on free loopback ports: ``masters`` masters with one replica
    each (``redis-cli --cluster create ... --cluster-replicas 1``), node timeout 2 s."""

    def __init__(self, directory: Path, masters: int = 3) -> None:
        for attempt in range(2):  # once more on new ports if a node or the create step fails
            self.nodes: list[RedisServer] = []
            for i in range(2 * masters):
                d = directory / f"try{attempt}" / f"node{i}"
                d.mkdir(parents=True)
                self.nodes.append(
                    RedisServer(
                        d,
                        free_cluster_port(),
                        **{
                            "cluster-enabled": "yes",
                            "cluster-node-timeout": "2000",
                            "cluster-config-file": str(d / "nodes.conf"),
                            "appendonly": "no",
                            "repl-diskless-sync-delay": "0",
                        },
                    )
                )
            create = [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in self.nodes),
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ]
            done = subprocess.run(create, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
            if done.returncode == 0:
                break
            self.stop()
            if attempt:
                raise AssertionError(
                    f"redis-cli --cluster create failed (status {done.returncode}): {done.stdout[-2000:]}"
                )
            print(f"redis-cli --cluster create failed, trying new ports: {done.stdout[-500:]}")
        self.wait_ok()

    @property
    def url(self) -> str:
        """The URL of the first node that is up (a worker needs one node to find the rest)."""
        live = next(n for n in self.nodes if n.proc is not None and n.proc.poll() is None)
        return f"redis://127.0.0.1:{live.port}/0"

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def wait_ok(self, timeout: float = 60) -> None:
        """Until every live node says ``cluster_state:ok`` and knows every slot."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                infos = [self.client(n.port).cluster("info") for n in self.nodes if n.proc and n.proc.poll() is None]
                if (
                    all(i.get("cluster_state") == "ok" and int(i.get("cluster_slots_ok", 0)) == 16384 for i in infos)
                    and self._replicas_online()
                ):
                    return
            except redis.RedisError:
                pass
            time.sleep(0.2)
        raise AssertionError("the Redis Cluster did not reach cluster_state:ok")

    def _replicas_online(self) -> bool:
        """Every live replica has finished its sync (WAIT counts only those)."""
        for n in self.nodes:
            if n.proc and n.proc.poll() is None:
                info = self.client(n.port).info("replication")
                if info["role"] == "slave" and info.get("master_link_status") != "up":
                    return False
        return True

    def masters(self) -> list[RedisServer]:
        out = []
        for n in self.nodes:
            if n.proc and n.proc.poll() is None:
                try:
                    if self.client(n.port).info("replication")["role"] == "master":
                        out.append(n)
                except redis.RedisError:
                    pass
        return out

    def stop(self) -> None:
        for n in self.nodes:
            if n.proc is not None and n.proc.poll() is None:
                n.proc.kill()
                n.proc.wait(10)
