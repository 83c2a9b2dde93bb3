"""The speed-and-scale benchmark, end to end, in one command.

    python -m bench.run [--pages 20000] [--items 100000] [--memory-requests 3000000]
                        [--dedup-urls 10000000] [--cache-items 100000] [--only PART ...]
                        [--skip PART ...]

Parts (in this order; ``--only``/``--skip`` take these names):

- ``crawl``: the ``site`` spider on a generated static site (PAGES pages, 11 links each) served by
  nginx on 127.0.0.31, item pipelines off, 64 concurrent requests, no download delay: plain
  Scrapy (memory scheduler), scrapy-redis 0.9.1 (its scheduler and dupefilter) with one and two
  workers, this project's frontier with one and two workers (bench/speed.py);
- ``storage``: this project, one worker, with the default item pipelines (validation, Redis
  cache, MySQL in a bench database created and dropped here), against the one-worker run above;
- ``mysql``: the MySQL storage pipeline alone, ITEMS Page items of about 1 KB (bench/storage.py);
- ``memory``: one worker's RSS while the frontier grows to MEMORY_REQUESTS requests
  (bench/memory.py);
- ``dedup``: Redis bytes per URL of the exact (packed and scrapy-redis's hex set) and the Bloom
  dupefilter at DEDUP_URLS URLs (bench/dedup_memory.py);
- ``queue``: Redis bytes per queued request at QUEUE_REQUESTS requests over 1,000 hosts and over
  a tenth as many hosts as requests (bench/queue_memory.py);
- ``cache``: Redis bytes per cached item (3 KB pages) of the lean item cache (the default) and
  of the whole-item cache (``REDIS_CACHE_ITEMS``) at CACHE_ITEMS items (bench/item_cache.py);
- ``broad``: a broad crawl, BROAD_HOSTS hosts of BROAD_PAGES pages, at most 2 requests in flight
  per host: plain Scrapy against this project with one and two workers, rounds interleaved
  (``--repeat``), and one profiled run: Redis's time per script (bench/broad.py).

Every crawl with a Redis also reports Redis's CPU per page (``INFO cpu``; and net of what Redis
spends idle over the same seconds) and its costliest commands (bench/redis_cpu.py).

Redis: a throwaway ``redis-server`` on a free loopback port (or ``--redis URL``: its ``site:*``
keys are deleted before each run). MySQL: ``--mysql`` (database created and dropped; its name
must end in ``_bench``). Prints the results as Markdown tables (also bench/out/results.md),
writes every figure with the machine's description to bench/out/results.json, draws
bench/out/results.png, and writes each part's figures, with the machine, to
bench/results/<part>.json (committed: the figures of bench/README.md's tables). Targets are
printed, not asserted. Needs nginx, redis-server, a MariaDB/MySQL server and
requirements-bench.txt. Run from the repository root.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import memory, speed, storage
from bench.speed import OUT, ROOT
from tests.servers import RedisServer

#: Where each part's latest figures are kept (bench/README.md's tables).
KEPT = ROOT / "bench" / "results"

PARTS = ("crawl", "storage", "mysql", "memory", "dedup", "queue", "cache", "broad")
#: (name, mode, workers) of the crawl part; the first is the baseline of every ratio.
CRAWLS = (
    ("plain Scrapy", "plain", 1),
    ("scrapy-redis 0.9.1, 1 worker", "scrapy-redis", 1),
    ("scrapy-redis 0.9.1, 2 workers", "scrapy-redis", 2),
    ("this project, 1 worker", "frontier", 1),
    ("this project, 2 workers", "frontier", 2),
)
STORAGE_RUN = "this project, 1 worker, storage on"
TARGETS = {
    "this project, 1 worker": ("ratio to plain Scrapy", ">=", 0.95),
    "this project, 2 workers": ("ratio to plain Scrapy", ">=", 1.8),
    STORAGE_RUN: ("pages/s lost to storage", "<=", 0.05),
    "mysql": ("items/s", ">=", 10_000),
    "memory": ("worker RSS growth", "<=", "max(10 MB, 5%)"),
    "bloom": ("bytes/URL at a false-positive rate <= 1e-6", "<=", 4.0),
    "packed": ("bytes/URL, exact", "<=", 16.0),
    "queue": ("bytes per queued request", "<=", 100.0),
    "cache": ("bytes per cached item, lean cache", "<=", 150.0),
    "broad, this project, 1 worker": ("ratio to plain Scrapy", ">=", 1.0),
    "broad, this project, 2 workers": ("ratio to plain Scrapy", ">=", 1.9),
}


def machine() -> dict[str, Any]:
    """Date, CPU, cores, RAM and the versions of everything measured."""
    import pymysql
    import redis
    import scrapy
    import scrapy_redis

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kb = int(
        next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal:"))
    )

    def version(cmd: list[str]) -> str | None:
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else None

    return {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gb": round(mem_kb / 2**20, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "scrapy": scrapy.__version__,
        "scrapy_redis": scrapy_redis.__version__,
        "redis_py": redis.__version__,
        "pymysql": pymysql.__version__,
        "redis_server": version(["redis-server", "--version"]),
        "mariadb": version(["mariadb", "--version"]) or version(["mysql", "--version"]),
        "nginx": version(["nginx", "-v"]),
        "load_at_start": speed.loadavg(),
    }


def mysql_server_version(url: str) -> str | None:
    try:
        conn = storage._server(url)
    except Exception:
        return None
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        (v,) = cur.fetchone()
    conn.close()
    return v


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median pages/s (all runs are kept under ``runs``)."""
    ordered = sorted(runs, key=lambda r: r["pages_per_s"] or 0)
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    if len(runs) > 1:
        chosen["runs"] = runs
    return chosen


def run_crawls(args: argparse.Namespace, redis_url: str, results: dict[str, Any]) -> None:
    site = speed.make_site(args.pages)
    plan = [c for c in CRAWLS if "crawl" in args.parts]
    if "storage" in args.parts:
        if not any(name == "this project, 1 worker" for name, _, _ in plan):
            plan.append(("this project, 1 worker", "frontier", 1))
        plan.append((STORAGE_RUN, "frontier", 1))
    timeout = max(600.0, args.pages / 5)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in plan}
    with speed.Nginx(site) as server:
        # Round after round of every kind (not all runs of one kind, then the next): a machine
        # that slows down or speeds up over the minutes of the benchmark moves every kind alike.
        for _ in range(args.repeat):
            for name, mode, workers in plan:
                mysql_url = None
                if name == STORAGE_RUN:
                    mysql_url = args.mysql
                    storage.create_database(mysql_url)
                try:
                    slug = name.replace(" ", "").replace(",", "-").replace(".", "")
                    r = speed.crawl(
                        slug,
                        mode,
                        workers,
                        server.url + "p0.html",
                        redis_url=redis_url,
                        mysql_url=mysql_url,
                        pipelines=name == STORAGE_RUN,
                        timeout=timeout,
                    )
                    if mysql_url:
                        r["rows"] = storage.count_rows(mysql_url)
                finally:
                    if mysql_url:
                        storage.drop_database(mysql_url)
                runs[name].append(r)
                print(
                    f"{name}: {r['pages']} pages in {r['seconds']} s = {r['pages_per_s']} pages/s (load "
                    f"{r['load_before']} -> {r['load_after']})",
                    flush=True,
                )
    for name, kind in runs.items():
        results["crawls"][name] = median_run(kind)


def run_dedup(args: argparse.Namespace, results: dict[str, Any]) -> None:
    if args.dedup_json:
        # The dedup part alone takes 15 to 25 minutes at 10 million URLs: reuse a run's figures.
        data = json.loads(Path(args.dedup_json).read_text())
        results["dedup"] = {**data.get("dedup", data), "from": str(args.dedup_json)}
        print(f"dedup: figures read from {args.dedup_json}", flush=True)
        return
    out = OUT / "dedup.json"
    out.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "bench.dedup_memory",
        "--urls",
        str(args.dedup_urls),
        "--queries",
        str(args.dedup_queries),
    ]
    print("dedup:", " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT)
    if proc.returncode != 0 or not out.exists():
        print(f"dedup: bench.dedup_memory failed (status {proc.returncode}); skipped", flush=True)
        return
    results["dedup"] = json.loads(out.read_text())


def run_queue(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """bench/queue_memory.py in a process of its own, at QUEUE_REQUESTS over 1,000 hosts and over
    requests / 10 hosts (the per-host keys' share)."""
    results["queue"] = []
    for hosts in (1000, max(1, args.queue_requests // 10)):
        cmd = [
            sys.executable,
            "-m",
            "bench.queue_memory",
            "--requests",
            str(args.queue_requests),
            "--hosts",
            str(hosts),
        ]
        print("queue:", " ".join(cmd[1:]), flush=True)
        started = time.monotonic()
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"queue: bench.queue_memory failed (status {proc.returncode}): {proc.stderr[-2000:]}", flush=True)
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        r["seconds"] = round(time.monotonic() - started, 1)
        print("queue:", r, flush=True)
        results["queue"].append(r)


def run_cache(args: argparse.Namespace, results: dict[str, Any]) -> None:
    """bench/item_cache.py in a process of its own, at CACHE_ITEMS items."""
    cmd = [sys.executable, "-m", "bench.item_cache", "--items", str(args.cache_items)]
    print("cache:", " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"cache: bench.item_cache failed (status {proc.returncode}): {proc.stderr[-2000:]}", flush=True)
        return
    results["cache"] = json.loads(proc.stdout.strip().splitlines()[-1])
    print("cache:", results["cache"], flush=True)


def run_broad(args: argparse.Namespace, results: dict[str, Any]) -> None:
    from bench import broad

    print(f"broad: {args.broad_hosts} hosts x {args.broad_pages} pages, {args.repeat} round(s)", flush=True)
    results["broad"] = broad.run(args.broad_hosts, args.broad_pages, 2, max(1, args.repeat), args.redis)


def verdicts(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target, its measured value and whether it is met (None: not measured)."""
    crawls = results["crawls"]
    base = crawls.get("plain Scrapy", {}).get("pages_per_s")
    out: dict[str, dict[str, Any]] = {}

    def put(key: str, value: Any, met: bool | None) -> None:
        what, op, target = TARGETS[key]
        out[key] = {"what": what, "target": f"{op} {target}", "value": value, "met": met}

    for name in ("this project, 1 worker", "this project, 2 workers"):
        if base and name in crawls:
            ratio = crawls[name]["pages_per_s"] / base
            put(name, round(ratio, 2), ratio >= TARGETS[name][2])
    off = crawls.get("this project, 1 worker", {}).get("pages_per_s")
    if off and STORAGE_RUN in crawls:
        cost = 1 - crawls[STORAGE_RUN]["pages_per_s"] / off
        put(STORAGE_RUN, round(cost, 3), cost <= TARGETS[STORAGE_RUN][2])
    if "mysql" in results:
        v = results["mysql"]["items_per_s"]
        put("mysql", v, v >= TARGETS["mysql"][2])
    if "memory" in results:
        m = results["memory"]
        first = m["checkpoints"][1]["worker_rss_mb"]
        put("memory", m["growth_mb"], m["growth_mb"] <= max(10.0, 0.05 * first))
    packed = results.get("dedup", {}).get("packed")
    if packed:
        put("packed", packed["bytes_per_url"], packed["bytes_per_url"] <= TARGETS["packed"][2])
    if results.get("queue"):
        worst = max(r["bytes_per_request"] for r in results["queue"])
        put("queue", worst, worst <= TARGETS["queue"][2])
    if "cache" in results:
        lean = results["cache"]["lean"]["bytes_per_item"]
        put("cache", lean, lean <= TARGETS["cache"][2])
    if "broad" in results:
        for name in ("this project, 1 worker", "this project, 2 workers"):
            ratio = results["broad"]["ratio"].get(name)
            if ratio is not None:
                put(f"broad, {name}", ratio, ratio >= TARGETS[f"broad, {name}"][2])
    bloom = results.get("dedup", {}).get("bloom")
    if bloom:
        # The filter's configured rate; the measured one is shown beside it (with a million
        # queries, one or two false positives are within the noise of a 1e-6 rate).
        rate = bloom.get("error_rate", 1.0)
        put("bloom", bloom["bytes_per_url"], bloom["bytes_per_url"] <= 4.0 and rate <= 1e-6)
    return out


def _lean(value: Any) -> Any:
    """``value`` without its ``commandstats`` (every command's count and time, at any depth)."""
    if isinstance(value, dict):
        return {k: _lean(v) for k, v in value.items() if k != "commandstats"}
    if isinstance(value, list):
        return [_lean(v) for v in value]
    return value


def keep_parts(results: dict[str, Any]) -> list[Path]:
    """Write each part measured to ``bench/results/<part>.json``: the machine, the part's figures
    and its verdicts, without ``commandstats``. Returns the files written."""
    crawl_names = [name for name, _, _ in CRAWLS]
    v = results["verdicts"]
    parts: dict[str, dict[str, Any]] = {}
    crawls = results["crawls"]
    if any(name in crawls for name in crawl_names) and "crawl" in results["settings"]["parts"]:
        parts["crawl"] = {
            "crawls": {k: crawls[k] for k in crawl_names if k in crawls},
            "verdicts": {k: v[k] for k in crawl_names if k in v},
        }
    if STORAGE_RUN in crawls:
        names = ("this project, 1 worker", STORAGE_RUN)
        parts["storage"] = {
            "crawls": {k: crawls[k] for k in names if k in crawls},
            "verdicts": {k: v[k] for k in (STORAGE_RUN,) if k in v},
        }
    for part, keys in (
        ("mysql", ("mysql",)),
        ("memory", ("memory",)),
        ("dedup", ("packed", "bloom")),
        ("queue", ("queue",)),
        ("cache", ("cache",)),
    ):
        if results.get(part):
            parts[part] = {part: results[part], "verdicts": {k: v[k] for k in keys if k in v}}
    if "broad" in results:
        parts["broad"] = {"broad": results["broad"], "verdicts": {k: x for k, x in v.items() if k.startswith("broad")}}
    settings = {k: results["settings"][k] for k in ("pages", "repeat", "crawl_settings")}
    KEPT.mkdir(exist_ok=True)
    written = []
    for part, figures in parts.items():
        path = KEPT / f"{part}.json"
        body = {"machine": results["machine"], "settings": settings, **_lean(figures)}
        path.write_text(json.dumps(body, indent=1, default=str, ensure_ascii=False) + "\n")
        written.append(path)
    return written


def markdown(results: dict[str, Any]) -> str:
    """The results as the README's tables."""
    lines = []
    crawls = results["crawls"]
    v = results["verdicts"]
    base = crawls.get("plain Scrapy", {}).get("pages_per_s")
    if crawls:
        lines += [
            "| run | pages | seconds | pages/s | ratio to plain Scrapy | worker CPU ms/page | Redis CPU µs/page (net "
            "of idle) | target |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, r in crawls.items():
            ratio = f"{r['pages_per_s'] / base:.2f}" if base and r["pages_per_s"] else "-"
            target = ""
            if name in v:
                t = v[name]
                shown = f"{t['value']:.1%} lost" if name == STORAGE_RUN else t["value"]
                target = f"{t['target'].replace('0.05', '5%')}: {shown} {'met' if t['met'] else 'NOT met'}"
            lines.append(
                f"| {name} | {r['pages']} | {r['seconds']} | {r['pages_per_s']} | {ratio} | "
                f"{r.get('worker_cpu_ms_per_page')} | {redis_cpu(r)} | {target} |"
            )
        lines.append("")
    b = results.get("broad")
    if b:
        lines += [
            f"Broad crawl: {b['hosts']} hosts x {b['pages_per_host']} pages, at most {b['cap']} requests in flight "
            f"per host, median of {b['rounds']} interleaved round(s):",
            "",
        ]
        lines += [
            "| run | pages | pages/s | ratio to plain Scrapy (each round) | worker CPU ms/page | Redis CPU µs/page "
            "(net of idle) | target |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, r in b["median"].items():
            t = v.get(f"broad, {name}")
            target = f"{t['target']}: {t['value']} {'met' if t['met'] else 'NOT met'}" if t else ""
            each = ", ".join(str(x) for x in b["ratio_per_round"][name])
            lines.append(
                f"| {name} | {r['pages']} | {r['pages_per_s']} | {b['ratio'][name]} ({each}) | "
                f"{r.get('worker_cpu_ms_per_page')} | {redis_cpu(r)} | {target} |"
            )
        lines.append("")
        prof = b.get("profiled", {}).get("profile")
        if prof:
            lines += [
                "Where Redis's time goes (the profiled two-worker broad run, every command logged; µs of execution "
                "per page):",
                "",
            ]
            lines += ["| script or command | calls/page | µs/call | µs/page | share |", "|---|---|---|---|---|"]
            for k, p in list(prof.items())[:8]:
                lines.append(
                    f"| {k} | {p['calls_per_page']} | {p['us_per_call']} | {p['us_per_page']} | {p['share']:.0%} |"
                )
            lines.append("")
    rows = []
    if "mysql" in results:
        m = results["mysql"]
        t = v["mysql"]
        rows.append(
            f"| MySQL storage pipeline alone | {m['items_per_s']:,.0f} items/s ({m['items']:,} items of "
            f"{m['row_bytes']} bytes, batches of {m['batch_size']}) | >= 10,000 items/s: "
            f"{'met' if t['met'] else 'NOT met'} |"
        )
    if "memory" in results:
        m = results["memory"]
        t = v["memory"]
        points = ", ".join(f"{c['worker_rss_mb']:.0f} MB at {c['frontier'] / 1e6:.2f}M" for c in m["checkpoints"])
        rows.append(
            f"| worker RSS as the frontier grows ({m['source']}) | {points} | flat: {m['growth_mb']:+} MB "
            f"{'met' if t['met'] else 'NOT met'} |"
        )
    d = results.get("dedup")
    if d:
        if "packed" in d:
            p, t = d["packed"], v.get("packed", {})
            rows.append(
                f"| dedup, exact, packed (the default) | {p['bytes_per_url']} bytes/URL at {p['urls']:,} URLs | <= 16 "
                f"bytes/URL: {'met' if t.get('met') else 'NOT met'} |"
            )
        e, b = d.get("set") or d["exact"], d["bloom"]
        rows.append(
            f"| dedup, exact, scrapy-redis's hex set | {e['bytes_per_url']} bytes/URL at {e['urls']:,} URLs | |"
        )
        fp = b.get("false_positive_rate") or 0.0
        t = v.get("bloom", {})
        rows.append(
            f"| dedup, Bloom filter (error rate {b.get('error_rate', '?')}) | {b['bytes_per_url']} bytes/URL at "
            f"{b['urls']:,} URLs;"
            f" false positives {b.get('false_positives')} of {b.get('fresh_queries', 0):,} ({fp:.1e}) | <= 4 "
            f"bytes/URL at <= 1e-6: {'met' if t.get('met') else 'NOT met'} |"
        )
    for q in results.get("queue") or ():
        t = v.get("queue", {})
        rows.append(
            f"| Redis bytes per queued request | {q['bytes_per_request']} at {q['requests']:,} requests over "
            f"{q['hosts']:,} hosts | <= 100: {'met' if q['bytes_per_request'] <= 100 else 'NOT met'} |"
        )
    c = results.get("cache")
    if c:
        met = "met" if v.get("cache", {}).get("met") else "NOT met"
        rows.append(
            f"| Redis bytes per cached item, lean cache (the default) | {c['lean']['bytes_per_item']} at "
            f"{c['items']:,} items | <= 150: {met} |"
        )
        rows.append(
            f"| Redis bytes per cached item, whole items (`REDIS_CACHE_ITEMS`, {c['text_bytes']:,}-byte texts) | "
            f"{c['full']['bytes_per_item']:,} at {c['items']:,} items | |"
        )
    if rows:
        lines += ["| measure | result | target |", "|---|---|---|", *rows, ""]
    return "\n".join(lines)


def redis_cpu(r: dict[str, Any]) -> str:
    """A run's Redis CPU per page for the tables: 'raw (net)', or '' without a Redis."""
    if r.get("redis_cpu_us_per_page") is None:
        return ""
    net = r.get("redis_cpu_us_per_page_net")
    return f"{r['redis_cpu_us_per_page']}" + (f" ({net})" if net is not None else "")


def chart(results: dict[str, Any], path: Path) -> None:
    """Draw the four panels (crawl speed, MySQL, memory, dedup) with matplotlib's Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    m = results["machine"]
    fig.suptitle(
        f"crawler benchmark, {m['date'][:10]}: {m['cores']} cores ({m['cpu']}), {m['ram_gb']} GB RAM, Scrapy "
        f"{m['scrapy']}",
        fontsize=11,
    )
    ax = axes[0][0]
    crawls = results["crawls"]
    if crawls:
        names = list(crawls)
        values = [crawls[n]["pages_per_s"] or 0 for n in names]
        colors = [
            "#888888" if n.startswith("plain") else "#d98c3f" if n.startswith("scrapy-redis") else "#3f7fd9"
            for n in names
        ]
        bars = ax.barh(names[::-1], values[::-1], color=colors[::-1])
        base = crawls.get("plain Scrapy", {}).get("pages_per_s")
        if base:
            for bar, value in zip(bars, values[::-1]):
                ax.text(
                    bar.get_width(),
                    bar.get_y() + bar.get_height() / 2,
                    f" {value:.0f} ({value / base:.2f}x)",
                    va="center",
                    fontsize=8,
                )
            ax.set_xlim(0, max(values) * 1.3)
    ax.set_xlabel("pages/s (first to last response)")
    ax.set_title("Crawl speed, same spider and site", fontsize=10)
    ax.tick_params(axis="y", labelsize=8)
    ax = axes[0][1]
    if "mysql" in results:
        r = results["mysql"]
        ax.bar(["storage pipeline"], [r["items_per_s"]], color="#3f7fd9")
        ax.axhline(10_000, color="red", linestyle="--", label="target 10,000 items/s")
        ax.text(0, r["items_per_s"], f"{r['items_per_s']:,.0f}", ha="center", va="bottom")
        ax.set_ylim(0, max(r["items_per_s"], 10_000) * 1.2)
        ax.legend(fontsize=8)
    ax.set_ylabel("items/s")
    ax.set_title("MySQL write-through, ~1 KB items", fontsize=10)
    ax = axes[1][0]
    if "memory" in results:
        r = results["memory"]
        xs = [s[1] / 1e6 for s in r["samples"]]
        ax.plot(xs, [s[2] for s in r["samples"]], ".", markersize=3, color="#3f7fd9", label="worker RSS")
        ax.plot(xs, [s[3] for s in r["samples"]], ".", markersize=3, color="#d98c3f", label="Redis used memory")
        ax.set_xlabel("requests in the frontier (millions)")
        ax.set_ylabel("MB")
        ax.legend(fontsize=8)
    ax.set_title("Memory as the frontier grows", fontsize=10)
    ax = axes[1][1]
    d = results.get("dedup")
    if d:
        layouts = [
            (k, label)
            for k, label in (
                ("packed", "exact, packed"),
                ("set", "exact, hex set"),
                ("exact", "exact set"),
                ("bloom", "Bloom filter"),
            )
            if k in d
        ]
        ax.bar(
            [label for _, label in layouts],
            [d[k]["bytes_per_url"] for k, _ in layouts],
            color=["#3f7fd9" if k != "set" else "#888888" for k, _ in layouts],
        )
        ax.axhline(4, color="red", linestyle="--", label="target 4 bytes/URL (Bloom)")
        for i, (key, _) in enumerate(layouts):
            ax.text(i, d[key]["bytes_per_url"], f"{d[key]['bytes_per_url']}", ha="center", va="bottom")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
        urls = next(iter(d[k]["urls"] for k, _ in layouts))
        ax.set_title(f"Dupefilter memory at {urls:,} URLs", fontsize=10)
    else:
        ax.set_title("Dupefilter memory (not measured)", fontsize=10)
    ax.set_ylabel("Redis bytes per URL")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(__doc__.splitlines()[2:]),
    )
    parser.add_argument("--pages", type=int, default=20_000, help="pages of the generated site")
    parser.add_argument("--repeat", type=int, default=1, help="crawl runs of each kind; the median is reported")
    parser.add_argument("--items", type=int, default=100_000, help="items written by the MySQL part")
    parser.add_argument("--memory-requests", type=int, default=3_000_000, help="frontier size the memory part grows to")
    parser.add_argument("--memory-source", choices=("push", "links"), default="push", help="see bench/memory.py")
    parser.add_argument("--dedup-urls", type=int, default=10_000_000, help="URLs added by the dedup part")
    parser.add_argument(
        "--dedup-json",
        metavar="FILE",
        help="take the dedup figures from FILE (bench/out/dedup.json or bench/results/dedup.json of an earlier run)",
    )
    parser.add_argument(
        "--dedup-queries", type=int, default=1_000_000, help="fresh URLs asked of the dedup filters (false positives)"
    )
    parser.add_argument("--queue-requests", type=int, default=10_000_000, help="requests queued by the queue part")
    parser.add_argument(
        "--cache-items", type=int, default=100_000, help="items sent through the item cache by the cache part"
    )
    parser.add_argument("--broad-hosts", type=int, default=300, help="hosts of the broad crawl")
    parser.add_argument("--broad-pages", type=int, default=40, help="pages per host of the broad crawl")
    parser.add_argument(
        "--redis",
        default=None,
        help="Redis database URL for the crawls (its site:* keys are deleted); default: a throwaway redis-server",
    )
    parser.add_argument(
        "--mysql",
        default=storage.DEFAULT_MYSQL,
        help="MySQL URL of a bench database (created and dropped; name ending in _bench)",
    )
    parser.add_argument("--only", nargs="+", choices=PARTS, default=None, help="run only these parts")
    parser.add_argument("--skip", nargs="+", choices=PARTS, default=(), help="skip these parts")
    args = parser.parse_args()
    args.parts = [p for p in (args.only or PARTS) if p not in args.skip]
    OUT.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    results: dict[str, Any] = {
        "machine": machine(),
        "settings": {**vars(args), "crawl_settings": speed.COMMON},
        "crawls": {},
    }
    results["machine"]["mariadb_server"] = mysql_server_version(args.mysql)
    print(json.dumps(results["machine"], indent=1), flush=True)
    if "crawl" in args.parts or "storage" in args.parts:
        throwaway = None if args.redis else RedisServer()
        try:
            run_crawls(args, args.redis or throwaway.url, results)
        finally:
            if throwaway:
                throwaway.stop()
    if "mysql" in args.parts:
        print(f"mysql: {args.items:,} items through the storage pipeline", flush=True)
        results["mysql"] = storage.run(args.mysql, args.items)
        print("mysql:", results["mysql"], flush=True)
    if "memory" in args.parts:
        print(f"memory: growing the frontier to {args.memory_requests:,} requests ({args.memory_source})", flush=True)
        results["memory"] = memory.run(args.memory_requests, args.memory_source)
        memory.print_table(results["memory"])
    if "dedup" in args.parts:
        run_dedup(args, results)
    if "queue" in args.parts:
        run_queue(args, results)
    if "cache" in args.parts:
        run_cache(args, results)
    if "broad" in args.parts:
        run_broad(args, results)
    results["verdicts"] = verdicts(results)
    results["seconds"] = round(time.monotonic() - started)
    results["machine"]["load_at_end"] = speed.loadavg()
    table = markdown(results)
    (OUT / "results.json").write_text(json.dumps(results, indent=1, default=str) + "\n")
    (OUT / "results.md").write_text(table + "\n")
    chart(results, OUT / "results.png")
    kept = keep_parts(results)
    print("\n" + table)
    print(
        f"Written: {OUT / 'results.json'}, {OUT / 'results.md'}, {OUT / 'results.png'}"
        f" and {', '.join(str(p.relative_to(ROOT)) for p in kept)} in {results['seconds']} s"
    )


if __name__ == "__main__":
    main()
