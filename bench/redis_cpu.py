"""Redis's CPU per crawled page, and where it goes: ``INFO cpu``, ``INFO commandstats`` and,
profiled, every command's execution time from ``SLOWLOG`` summed per script; and, steadier than
any time, the instructions Redis executes (:class:`CallgrindRedis`).

Used by bench/speed.py (every scrapy-redis and frontier crawl of the benchmark), bench/broad.py,
bench/frontier_calls.py and bench/redis_instructions.py.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from tests.loopback import free_port, wait_port


def script_names() -> dict[str, str]:
    """SHA-1 of every Lua script of the package (as loaded) -> its name."""
    import hashlib

    from scrapy_frontier.dupefilter import SEGMENT_BITS
    from scrapy_frontier.scripts import names, source

    out = {}
    for name in names():
        out[hashlib.sha1(source(name, SEGMENT_BITS=SEGMENT_BITS, QUEUE_ORDER="").encode()).hexdigest()] = name
    return out


class RedisCpu:
    """Redis's CPU seconds between :meth:`start` and :meth:`stop`, per page, and where they went.

    ``INFO commandstats`` counts the commands a script runs under their own names as well as
    under ``evalsha`` (whose time includes theirs), and cannot tell one script from another; with
    ``profile`` every command is also logged (``SLOWLOG``, threshold 0 µs: its execution time,
    no I/O) and the time is summed per script (by SHA-1) and per command. The log costs Redis
    some CPU itself, so a profiled run's CPU per page reads a little high. The commands a script
    runs are logged too (client ``?:0``): left out, being in the script's time.
    """

    def __init__(self, url: str, profile: bool = False) -> None:
        self.client = redis.Redis.from_url(url)
        self.profile = profile

    def read(self) -> tuple[float, dict[str, tuple[int, float]]]:
        cpu = self.client.info("cpu")
        stats = self.client.info("commandstats")
        return cpu["used_cpu_user"] + cpu["used_cpu_sys"], {
            k.removeprefix("cmdstat_"): (v["calls"], v["usec"]) for k, v in stats.items()
        }

    def idle(self, seconds: float = 3.0) -> float:
        """Measure Redis's CPU with nothing to do (its own timers, ``hz``), in µs per second: the
        part of a slow crawl's figure that is per second, not per page. Returns it. Waits first
        for Redis's background frees to end (``lazyfree_pending_objects``: an earlier crawl's
        keys deleted with ``UNLINK``), whose CPU would read as idle."""
        deadline = time.monotonic() + 30
        while self.client.info("memory").get("lazyfree_pending_objects", 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
        before, t0 = self.read()[0], time.monotonic()
        time.sleep(seconds)
        self.idle_us_per_s = (self.read()[0] - before) / (time.monotonic() - t0) * 1e6
        return self.idle_us_per_s

    def start(self) -> None:
        self.t_start = time.monotonic()
        if self.profile:
            self.client.config_set("slowlog-max-len", 5_000_000)
            self.client.config_set("slowlog-log-slower-than", 0)
            self.client.slowlog_reset()
        self.before = self.read()

    def stop(self) -> None:
        """Take the readings (and the profile's log) of the end of the run."""
        self.after = self.read()
        self.seconds = time.monotonic() - self.t_start
        self.log = []
        if self.profile:
            self.log = self.client.execute_command("SLOWLOG", "GET", -1)
            self.client.config_set("slowlog-log-slower-than", 10000)
            self.client.slowlog_reset()

    def figures(self, pages: int) -> dict[str, Any]:
        """``redis_cpu_us_per_page`` (and, after :meth:`idle`, ``redis_cpu_us_per_page_net``),
        ``commandstats`` (the 12 costliest, calls/page and µs/call)
        and, profiled, ``profile`` (per script and command: calls/page, µs/call, µs/page, share)."""
        cpu, cmds = self.after
        spent = cpu - self.before[0]
        delta = {
            k: (c - self.before[1].get(k, (0, 0))[0], u - self.before[1].get(k, (0, 0))[1])
            for k, (c, u) in cmds.items()
        }
        delta = {k: v for k, v in delta.items() if v[0] > 0}
        idle = getattr(self, "idle_us_per_s", None)
        out: dict[str, Any] = {
            "redis_cpu_us_per_page": round(spent / pages * 1e6, 1) if pages else None,
            # what is left once Redis's own idle work over the run's duration is taken out
            "redis_idle_us_per_s": round(idle, 1) if idle is not None else None,
            "redis_cpu_us_per_page_net": round((spent * 1e6 - idle * self.seconds) / pages, 1)
            if pages and idle is not None
            else None,
            "commandstats": {
                k: {"calls_per_page": round(c / pages, 3), "us_per_call": round(u / c, 1)}
                for k, (c, u) in sorted(delta.items(), key=lambda kv: -kv[1][1])[:20]
            },
        }
        if self.profile:
            names = script_names()
            per: dict[str, list[float]] = {}
            for entry in self.log:
                if entry[4] == b"?:0":
                    continue  # a command run by a script: in the script's time already
                args = entry[3]
                cmd = args[0].decode().lower()
                if cmd in ("evalsha", "evalsha_ro") and len(args) > 1:
                    cmd = "script " + names.get(args[1].decode(), args[1].decode()[:10])
                if cmd in ("slowlog", "info", "config"):
                    continue
                calls_us = per.setdefault(cmd, [0, 0.0])
                calls_us[0] += 1
                calls_us[1] += entry[2]
            total = sum(u for _, u in per.values()) or 1
            out["logged_us_per_page"] = round(total / pages, 1)
            out["profile"] = {
                k: {
                    "calls_per_page": round(c / pages, 3),
                    "us_per_call": round(u / c, 1),
                    "us_per_page": round(u / pages, 2),
                    "share": round(u / total, 3),
                }
                for k, (c, u) in sorted(per.items(), key=lambda kv: -kv[1][1])
            }
        return out


class CallgrindRedis:
    """A throwaway ``redis-server`` on a free loopback port, run by valgrind's callgrind, which
    counts the instructions it executes (user space: its commands, scripts and protocol, not the
    kernel's network work) only inside :meth:`instructions`. The count is the same run after run
    for the same code and work, where a time moves with the machine's speed; Redis runs many
    times slower meanwhile. Needs valgrind (``apt-get install valgrind``)."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="callgrind-redis-"))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc = subprocess.Popen(
            [
                "valgrind",
                "--tool=callgrind",
                "--instr-atstart=no",
                f"--callgrind-out-file={self.dir}/out.%p",
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_port("127.0.0.1", self.port, timeout=60)

    def control(self, *args: str) -> None:
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], check=True, capture_output=True)

    def instructions(self, fn: Any) -> tuple[Any, int]:
        """(what ``fn()`` returns, the instructions Redis executed meanwhile)."""
        self.control("-z")
        self.control("-i", "on")
        out = fn()
        self.control("-i", "off")
        before = len(list(self.dir.glob("out.*.*")))
        self.control("-d")
        for _ in range(100):
            dumps = sorted(self.dir.glob("out.*.*"), key=lambda p: int(p.suffix[1:]))
            if len(dumps) > before:
                break
            time.sleep(0.1)
        for line in dumps[-1].read_text().splitlines():
            if line.startswith("totals:"):
                return out, int(line.split()[1])
        raise RuntimeError(f"no totals in {dumps[-1]}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
