"""JSON logs, Prometheus metrics, cluster totals and ``scrapy status``, with real ``scrapy crawl``
processes, the real Redis and MariaDB."""

from __future__ import annotations

import json
import re
import signal
import socket
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from scrapy_frontier.observability.metrics import METRIC_NAMES
from tests.conftest import scrapy_command as run
from tests.servers import queued_requests

NODE = re.compile(r"^[^:]+:(\d+):[0-9a-f]{6}$")


def scrape(address: str) -> dict[tuple[str, frozenset], float]:
    """The samples of a worker's /metrics: (name, labels) -> value."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(samples: dict, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset({"spider": "site", **labels}.items())))


def metrics_addresses(redis_client, workers) -> dict[int, str]:
    """pid -> the ``metrics`` address each worker recorded in the node registry."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = {}
        for node in redis_client.zrange("site:nodes", 0, -1):
            address = redis_client.hget(b"site:nodes:" + node, "metrics")
            if address:
                found[int(NODE.match(node.decode()).group(1))] = address.decode()
        if all(w.proc.pid in found for w in workers):
            return found
        time.sleep(0.2)
    raise AssertionError(f"metrics addresses not in the node registry: {found}")


def test_json_logs_every_line_with_spider_node_and_url(docs_site, start_worker, redis_url, redis_client):
    # A port taken by someone else: the worker serves its metrics elsewhere and says so.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        worker = start_worker(
            settings={
                "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
                "CLOSESPIDER_PAGECOUNT": "12",
                "CONCURRENT_REQUESTS": "4",
                "LOG_LEVEL": "DEBUG",
                "METRICS_PORT": str(taken),
            },
            env={"REDIS_URL": redis_url, "LOG_JSON": "1"},
        )
        worker.wait_for("Joined the crawl")
        redis_client.lpush("site:start_urls", f"{docs_site.url}library/json.html")
        assert worker.wait() == 0, worker.output[-3000:]
    # Scrapy's start-up lines, logged before the extensions are made, stay plain (Scrapy's own crawl command)
    lines = worker.output.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith('{"'))
    assert "Joined the crawl" not in "\n".join(lines[:first])
    records = []
    for line in lines[first:]:
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}") from None
    nodes = {r["node"] for r in records}
    assert len(nodes) == 1 and NODE.match(nodes.pop()).group(1) == str(worker.proc.pid)
    for r in records:
        assert r["spider"] == "site" and r["level"] and r["logger"] and r["time"], r
    crawled = [r for r in records if r["message"].startswith("Crawled (")]
    assert len(crawled) >= 12
    assert all(r["url"] in r["message"] for r in crawled)
    scraped = [r for r in records if r["message"].startswith("Scraped from")]
    assert scraped and all(r["item"] == f"Page(url={r['url']!r})" for r in scraped)
    moved = next(r for r in records if "METRICS_PORT" in r["message"])
    assert moved["level"] == "WARNING" and f"{taken} is in use" in moved["message"]
    assert "Traceback" not in worker.output


def test_two_workers_metrics_status_and_cluster_totals(
    docs_site, start_workers, redis_url, redis_client, mysql_url, mysql_query
):
    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    settings = {
        "MAX_IDLE_TIME_BEFORE_CLOSE": "2",
        "SCHEDULER_PERSIST": "True",
        "CLOSESPIDER_PAGECOUNT": "40",  # each worker: a capped crawl
        "CONCURRENT_REQUESTS": "4",
        "DOWNLOAD_DELAY": "0.02",
        "METRICS_REFRESH_INTERVAL": "0.5",
        "LOGSTATS_INTERVAL": "2",
        # the workers are frozen for a moment below: nobody must reclaim their leases meanwhile
        "FRONTIER_NODE_TIMEOUT": "60",
    }
    workers = start_workers(2, settings=settings, env=env)
    addresses = metrics_addresses(redis_client, workers)
    assert len({a.rsplit(":", 1)[1] for a in addresses.values()}) == 2, addresses
    redis_client.lpush("site:start_urls", f"{docs_site.url}index.html")

    # /metrics of each worker, scraped repeatedly while it crawls: pages_total rises.
    pages: dict[int, list[float]] = {w.proc.pid: [] for w in workers}
    site_host = docs_site.url.split("/")[2].split(":")[0]
    busy_seen = []  # the docs site's host among the busy hosts: (in flight, held back by)
    deadline = time.monotonic() + 90
    while not (busy_seen and all(len(p) >= 2 and p[-1] > p[0] for p in pages.values())) and time.monotonic() < deadline:
        for w in workers:
            samples = scrape(addresses[w.proc.pid])
            if value(samples, "crawler_frontier_depth") is None:
                continue  # not refreshed from Redis yet
            for name in ("crawler_leases_inflight", "crawler_throttled_hosts"):
                assert value(samples, name) is not None, name
            assert value(samples, "crawler_dead_letters", kind="requests") == 0
            pages[w.proc.pid].append(value(samples, "crawler_pages_total") or 0)
            if value(samples, "crawler_host_in_flight", host=site_host):
                reasons = [dict(labels)["reason"] for (name, labels) in samples if name == "crawler_host_held_back"]
                busy_seen.append((value(samples, "crawler_host_in_flight", host=site_host), reasons))
        time.sleep(0.3)
    assert all(len(p) >= 2 and p[-1] > p[0] for p in pages.values()), pages
    # DOWNLOAD_DELAY 0.02 is the crawl's rate: 50/s, the host's delay between sends
    assert busy_seen and all(reasons[:1] == ["rate"] for _, reasons in busy_seen), busy_seen
    while int(redis_client.hget("site:stats", "items_stored") or 0) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)

    # Freeze both workers, then `scrapy status` must agree with Redis and MySQL exactly.
    for w in workers:
        w.signal(signal.SIGSTOP)
    try:
        for w in workers:
            while Path(f"/proc/{w.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
                time.sleep(0.01)
        time.sleep(0.3)  # what they had sent before stopping reaches Redis
        during = json.loads(run(["status", "site", "--json"], {"REDIS_URL": redis_url}).stdout)
        hosts = redis_client.zrange("site:requests", 0, -1)
        assert during["frontier"]["hosts"] == len(hosts)
        assert during["frontier"]["queued"] == queued_requests(redis_client)
        leases = {
            w["node"]: redis_client.hlen(f"site:leases:{w['node']}")
            - redis_client.hexists(f"site:leases:{w['node']}", "@")
            for w in during["workers"]
        }
        assert {w["node"]: w["leases"] for w in during["workers"]} == leases
        assert during["frontier"]["in_flight"] == sum(leases.values()) > 0
        (busy,) = during["busy_hosts"]  # the docs site's host, at the crawl's rate (DOWNLOAD_DELAY)
        assert busy["in_flight"] == int(redis_client.hget("site:politeness:@inflight", busy["host"]))
        assert (busy["delay_s"], busy["held_back_by"][:1]) == (0.02, ["rate"])
        assert {w["pid"]: w["metrics"] for w in during["workers"]} == addresses
        totals = {k.decode(): int(v) for k, v in redis_client.hgetall("site:stats").items()}
        assert during["totals"] == totals and totals["pages"] > 0
        stored = mysql_query("SELECT COUNT(*) FROM pages")[0][0]
        assert 0 < totals["items_stored"] <= stored  # the last commits' counts are pushed within 0.5 s
        assert not during["idle"]
    finally:
        for w in workers:
            w.signal(signal.SIGCONT)

    for w in workers:
        assert w.wait() == 0, w.output[-3000:]
    after = json.loads(run(["status", "site", "--json"], {"REDIS_URL": redis_url}).stdout)
    assert after["workers"] == [] and after["frontier"]["in_flight"] == 0
    assert after["frontier"]["queued"] == queued_requests(redis_client) > 0  # capped
    stored = mysql_query("SELECT COUNT(*) FROM pages")[0][0]
    assert stored >= 79  # 40 responses each; the docs site's one 404 (whatsnew/changelog.html) is not stored
    # The cluster totals are the sum of what the workers' own stats say.
    reported = {
        "pages": "response_received_count",
        "items_scraped": "item_scraped_count",
        "items_stored": "item_stored_count",
        "responses/200": "downloader/response_status_count/200",
        "responses/404": "downloader/response_status_count/404",
    }
    expected = {field: sum(w.stat(stat) for w in workers) for field, stat in reported.items()}
    assert {field: after["totals"].get(field, 0) for field in reported} == expected
    assert after["totals"]["items_stored"] == stored
    assert after["totals"] == {k.decode(): int(v) for k, v in redis_client.hgetall("site:stats").items()}
    for w in workers:
        assert re.search(
            r"Crawled \d+ pages .*; cluster: \d+ pages \(at \d+ pages/min\), \d+ items written, \d+ queued, 2 workers",
            w.output,
        )
        assert w.output.startswith("20")  # plain text log without LOG_JSON
        assert "Traceback" not in w.output and " ERROR: " not in w.output


def test_dropped_items_by_reason_and_dead_letter_gauge(start_worker, redis_url, redis_client, tmp_path):
    from tests.servers import HttpServer

    root = tmp_path / "site"
    root.mkdir()
    # a URL longer than the url column (2048): the validation pipeline drops its item
    long_name = "/".join(["p" * 202] * 10) + "/page.html"
    (root / long_name).parent.mkdir(parents=True)
    (root / long_name).write_text("<html><head><title>long url</title></head><body></body></html>")
    (root / "index.html").write_text(
        f'<html><head><title>i</title></head><body><a href="/{long_name}">x</a></body></html>'
    )
    server = HttpServer(root, "127.0.0.5")
    try:
        worker = start_worker(
            settings={"MAX_IDLE_TIME_BEFORE_CLOSE": "3", "METRICS_REFRESH_INTERVAL": "0.3"},
            env={"REDIS_URL": redis_url},
        )
        address = metrics_addresses(redis_client, [worker])[worker.proc.pid]
        redis_client.lpush("site:start_urls", f"{server.url}index.html")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and worker.proc.poll() is None:
            samples = scrape(address)
            if (
                value(samples, "crawler_dead_letters", kind="items") == 1
                and value(samples, "crawler_items_dropped_total", reason="too_long") == 1
            ):
                break
            time.sleep(0.2)
        assert value(samples, "crawler_items_dropped_total", reason="too_long") == 1, samples
        assert value(samples, "crawler_dead_letters", kind="items") == 1 == redis_client.llen("site:items:invalid")
        assert worker.wait() == 0, worker.output[-3000:]
    finally:
        server.stop()
    assert int(redis_client.hget("site:stats", "items_dropped")) == worker.stat("item_dropped_count") == 1


def test_embedded_worker_serves_counters_without_redis_gauges(docs_site, start_worker):
    worker = start_worker(
        settings={
            "CLOSESPIDER_PAGECOUNT": "10",
            "CONCURRENT_REQUESTS": "2",
            "DOWNLOAD_DELAY": "0.2",
            "METRICS_PORT": "0",
        },
        args=["-a", f"url={docs_site.url}library/json.html"],
    )
    worker.wait_for(r"Serving Prometheus metrics on http://127\.0\.0\.1:\d+/metrics")
    address = re.search(r"metrics on http://(127\.0\.0\.1:\d+)/metrics", worker.output).group(1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        samples = scrape(address)
        if (value(samples, "crawler_items_stored_total") or 0) > 0:
            break
        time.sleep(0.2)
    assert value(samples, "crawler_pages_total") >= 2
    assert value(samples, "crawler_responses_total", status="200") >= 1
    assert value(samples, "crawler_download_latency_seconds_count") >= 2
    assert not [
        key
        for key in samples
        if key[0] in ("crawler_frontier_depth", "crawler_leases_inflight", "crawler_dead_letters")
    ]
    assert worker.wait() == 0
    assert worker.stat("item_stored_count") == worker.stat("item_scraped_count") > 0
    assert f"'metrics/address': '{address}'" in worker.output


def test_bad_observability_settings_fail_at_start_with_one_line(tmp_path):
    base = [
        "crawl",
        "site",
        "-a",
        "url=http://127.0.0.1:9/",
        "-s",
        f"SQLITE_PATH={tmp_path / 'x.sqlite3'}",
        "-s",
        "TELNETCONSOLE_ENABLED=False",
    ]
    done = run([*base, "-s", "METRICS_PORT=9430-9410"], {})
    assert done.returncode == 1, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and "Setting METRICS_PORT='9430-9410' is not a port" in errors[0]
    done = run([*base, "-s", "METRICS_HOST=256.1.1.1"], {})
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and "METRICS_HOST='256.1.1.1'" in errors[0] and "cannot serve metrics there" in errors[0]
    done = run(base, {"LOG_JSON": "maybe"})
    assert done.returncode == 1
    assert "Setting LOG_JSON='maybe' is not a valid bool" in done.stderr and "Traceback" not in done.stderr


def test_metrics_port_values():
    from scrapy_frontier.observability.server import parse_ports

    assert parse_ports("9410-9412") == [9410, 9411, 9412]
    assert parse_ports(9410) == [9410] and parse_ports("0") == [0] and parse_ports(" 65535 ") == [65535]
    for bad in ("", "abc", "65536", "0-5", "9412-9410", "1-2-3", "-1", "9410,9411", None):
        try:
            parse_ports(bad)
        except ValueError as exc:
            assert f"METRICS_PORT={bad!r}" in str(exc)
        else:
            raise AssertionError(f"{bad!r} accepted")


def test_metric_names_are_what_a_worker_exposes():
    from scrapy_frontier.observability.metrics import Metrics

    metrics = Metrics()
    for name, kind in (("pages", "counter"), ("download_latency_seconds", "histogram"), ("frontier_depth", "gauge")):
        assert getattr(metrics, name)._type == kind
    exposed = {family.name for family in metrics.registry.collect()}
    # prometheus-client names counter families without _total
    assert {n.removesuffix("_total") for n in METRIC_NAMES} == exposed
    assert len(METRIC_NAMES) == 19


def test_the_progress_line_of_a_lone_worker_says_1_worker(start_worker, redis_url):
    worker = start_worker(
        settings={"LOGSTATS_INTERVAL": "0.5", "MAX_IDLE_TIME_BEFORE_CLOSE": "2"}, env={"REDIS_URL": redis_url}
    )
    assert worker.wait(60) == 0, worker.output[-3000:]
    # Scrapy's own part as Scrapy writes it (log readers parse it), the cluster's in words
    assert re.search(
        r"Crawled 0 pages \(at 0 pages/min\), scraped 0 items \(at 0 items/min\); cluster: 0 pages \(at 0 "
        r"pages/min\), 0 items written, 0 queued, 1 worker\n",
        worker.output,
    ), worker.output[-3000:]
