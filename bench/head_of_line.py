"""Head-of-line benchmark: does a host limited to 1 request/s slow down an unlimited host?

Runs one distributed worker (``scrapy crawl site``) against two local hosts served by
tests/flaky_server.py: first the fast host alone, then the fast host together with a slow host
limited to 1 request/s (``DOMAIN_RATE_LIMITS``). Prints the fast host's pages/s in both runs and
their ratio (target: at least 0.90), and writes them to bench/out/head_of_line.json.

    python -m bench.head_of_line [--redis redis://127.0.0.1:6379/12] [--pages 400]

It uses the given Redis database and deletes the keys ``site:*`` there before each run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import redis

from tests.loopback import free_port

ROOT = Path(__file__).resolve().parent.parent


def serve(host: str, pages: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port(host)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "flaky_server.py"), host, str(port), str(log)],
        env={**os.environ, "SITE_PAGES": str(pages)},
    )
    for _ in range(100):
        try:
            socket.create_connection((host, port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return proc, f"http://{host}:{port}"


def times(log: Path) -> list[float]:
    return sorted(float(line.split(" ", 1)[0]) for line in log.read_text().splitlines() if " /site/" in line)


def crawl(redis_url: str, urls: list[str], fast_log: Path, pages: int, settings: dict[str, str]) -> float:
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match="site:*"))
    if keys:
        client.delete(*keys)
    cmd = [
        sys.executable,
        "-m",
        "scrapy",
        "crawl",
        "site",
        "-a",
        "url=" + " ".join(urls),
        "-s",
        "LOG_LEVEL=WARNING",
        "-s",
        "AUTOTHROTTLE_ENABLED=False",
        "-s",
        "ROBOTSTXT_OBEY=False",
        "-s",
        "STORAGE_ENABLED=False",
        "-s",
        "TELNETCONSOLE_ENABLED=False",
        "-s",
        "MAX_IDLE_TIME_BEFORE_CLOSE=1",
    ]
    for k, v in settings.items():
        cmd += ["-s", f"{k}={v}"]
    worker = subprocess.Popen(
        cmd, cwd=ROOT, env={**os.environ, "REDIS_URL": redis_url}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while len(times(fast_log)) < pages and time.monotonic() < deadline and worker.poll() is None:
        time.sleep(0.2)
    worker.terminate()
    worker.wait(60)
    got = times(fast_log)
    fast_log.write_text("")
    return (len(got) - 1) / (got[-1] - got[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/12")
    parser.add_argument("--pages", type=int, default=400)
    args = parser.parse_args()
    out = ROOT / "bench" / "out"
    out.mkdir(parents=True, exist_ok=True)
    fast_log, slow_log = out / "fast.log", out / "slow.log"
    fast_log.write_text("")
    slow_log.write_text("")
    fast, fast_url = serve("127.0.0.21", args.pages, fast_log)
    slow, slow_url = serve("127.0.0.22", args.pages, slow_log)
    try:
        alone = crawl(args.redis, [f"{fast_url}/site/0"], fast_log, args.pages, {})
        together = crawl(
            args.redis,
            [f"{fast_url}/site/0", f"{slow_url}/site/0"],
            fast_log,
            args.pages,
            {"DOMAIN_RATE_LIMITS": json.dumps({"127.0.0.22": 1})},
        )
    finally:
        fast.terminate()
        slow.terminate()
    slow_rate = len(times(slow_log))
    result = {
        "fast_alone_pages_per_s": round(alone, 1),
        "fast_beside_1rps_host_pages_per_s": round(together, 1),
        "ratio": round(together / alone, 3),
    }
    print(f"{'run':<42}{'pages/s':>10}")
    print(f"{'fast host alone':<42}{alone:>10.1f}")
    print(f"{'fast host beside a host limited to 1/s':<42}{together:>10.1f}")
    print(f"{'ratio (target >= 0.90)':<42}{together / alone:>10.3f}")
    print(f"(the slow host got {slow_rate} requests meanwhile)")
    (out / "head_of_line.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
