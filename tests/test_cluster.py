"""Past one Redis server: a sharded frontier on a real Redis Cluster (six redis-server processes
on loopback, three masters with a replica each), sharding on a single Redis, and the Redis
server's time instead of the workers' clocks."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import urlsplit

import pytest
import redis
import redis.asyncio
from scrapy.settings import Settings

from scrapy_frontier.connection import ConfigError, async_redis, ready, sync_redis
from scrapy_frontier.frontier import Entry, Frontier
from scrapy_frontier.keys import Keys, hash_tag, shard_of_host
from scrapy_frontier.reclaim import reclaim_dead
from scrapy_frontier.status import read_status
from tests.loopback import free_port
from tests.servers import DOCS, HttpServer

SHARDS = 16


def keys(shards: int = SHARDS) -> Keys:
    return Keys.for_spider(Settings(), "site").with_shards(shards)


def entry(url: str, host: str) -> Entry:
    return Entry(url, host, 0, json.dumps({"url": url}, separators=(",", ":")))


def test_every_script_key_of_a_shard_is_in_one_slot():
    from redis.crc import key_slot

    k = keys()
    for sh in k.all_shards():
        names = (
            sh.queue,
            sh.queue_prefix + "example.com",
            sh.queue_prefix + "example.com#0",
            sh.dupefilter,
            sh.forgotten,
            sh.bloom,
            sh.bloom_bits_prefix + "0:0",
        )
        names += (sh.leases("n1"), sh.politeness_prefix + "example.com", sh.rates, sh.limited)
        slots = {key_slot(key.encode()) for key in names}
        assert len(slots) == 1, sh
    assert key_slot(k.start_leases("n1").encode()) == key_slot(k.start_urls.encode())
    assert key_slot(k.items_replaying("n1").encode()) == key_slot(k.items_pending.encode())
    assert hash_tag("{a}b") == "a" and hash_tag("a{}b") is None and hash_tag("ab") is None
    # hosts spread over the shards
    counts = [0] * SHARDS
    for i in range(1600):
        counts[shard_of_host(f"host{i}.example", SHARDS)] += 1
    assert min(counts) > 60


def test_settings_find_the_cluster(redis_cluster):
    client = sync_redis(Settings({"REDIS_URL": redis_cluster.url}))
    assert isinstance(client, redis.RedisCluster)
    client.close()
    plain = sync_redis(Settings({"REDIS_URL": redis_cluster.url, "REDIS_CLUSTER": "False"}))
    assert isinstance(plain, redis.Redis)
    plain.close()
    # Several nodes to start from: the first that answers is used (here the first is down).
    live = urlsplit(redis_cluster.url).port
    several = Settings({"REDIS_URL": f"redis://127.0.0.1:{free_port('127.0.0.1')},127.0.0.1:{live}/0"})
    client = sync_redis(several)
    assert isinstance(client, redis.RedisCluster)
    client.set("several-nodes", "1")
    assert client.get("several-nodes") == b"1"
    client.close()

    async def go():
        client = async_redis(several)
        await ready(client)
        assert await client.get("several-nodes") == b"1"
        await client.aclose()

    asyncio.run(go())
    with pytest.raises(ConfigError, match="several nodes, which only a Redis Cluster has"):
        sync_redis(Settings({"REDIS_URL": f"redis://127.0.0.1:1,127.0.0.1:{live}", "REDIS_CLUSTER": "False"}))


def test_frontier_on_a_cluster_pushes_leases_acks_and_reclaims(redis_cluster):
    k = keys()
    hosts = [f"127.1.0.{i}" for i in range(1, 41)]

    async def go():
        client = redis.asyncio.RedisCluster.from_url(redis_cluster.url)
        await client.initialize()
        try:
            f = Frontier(client, k, "n1")
            # one page's links to 40 hosts: one push per shard touched
            assert await f.push([entry(f"http://{h}/", h) for h in hosts]) == 40
            assert await f.push([entry(f"http://{h}/", h) for h in hosts]) == 0  # deduplicated per shard
            taken: list = []
            for _ in range(40):
                taken += await f.lease(8)
                if len(taken) == 40:
                    break
            assert len(taken) == 40 and len(set(taken)) == 40
            # children in other shards, then the parents' acknowledgements
            added = await f.push([entry(f"http://{h}/child", h) for h in hosts[:5]], acks=taken[:10])
            assert added == 5
            status = await f.status(deep=True)
            # nodes are not registered here: the leases count only for registered nodes
            assert (status.hosts, status.depth) == (5, 5)
            await client.zadd(k.nodes, {"n1": 1})  # a heartbeat long ago: n1 is dead
            await client.lpush(k.start_urls, b"http://s/1")
            assert await f.take_start_urls(5) == [b"http://s/1"]
        finally:
            await client.aclose()

    asyncio.run(go())
    sync = redis.RedisCluster.from_url(redis_cluster.url)
    try:
        status = read_status(sync, k)
        assert status.inflight == 31 and status.nodes == 1  # 30 requests and a start URL
        restored, nodes = reclaim_dead(sync, k, 1000)
        assert (restored, nodes) == (31, 1)
        status = read_status(sync, k)
        assert status.inflight == 0 and status.depth == 35 and status.start_urls == 1 and status.nodes == 0
        assert sync.lrange(k.start_urls, 0, -1) == [b"http://s/1"]
    finally:
        sync.close()


@pytest.mark.slow
def test_two_workers_crawl_the_docs_on_a_cluster(
    redis_cluster, docs_site, expected_pages, start_worker, mysql_url, mysql_query
):
    from tests.test_crawl import two_workers_share_the_docs

    client = redis.RedisCluster.from_url(redis_cluster.url)
    env = {"REDIS_URL": redis_cluster.url, "MYSQL_URL": mysql_url}
    workers = two_workers_share_the_docs(
        start_worker,
        env,
        lambda path: client.lpush("site:start_urls", docs_site.url + path),
        expected_pages,
        mysql_query,
    )
    assert "16 frontier shards" in workers[0].output
    client.close()


@pytest.mark.slow
def test_a_sharded_crawl_on_a_single_redis(
    docs_site, expected_pages, start_worker, redis_url, redis_client, mysql_url, mysql_query
):
    from tests.test_crawl import DISTRIBUTED, stored_urls_mysql

    env = {"REDIS_URL": redis_url, "MYSQL_URL": mysql_url}
    workers = [start_worker(settings={**DISTRIBUTED, "FRONTIER_SHARDS": "4"}, env=env) for _ in range(2)]
    for w in workers:
        w.wait_for("Joined the crawl")
    redis_client.lpush("site:start_urls", f"{docs_site.url}index.html")
    for w in workers:
        assert w.wait() == 0, w.output[-3000:]
    urls = stored_urls_mysql(mysql_query)
    assert len(urls) == len(set(urls)) and set(urls) == expected_pages
    assert not list(redis_client.scan_iter(match="site:*leases*"))


def test_a_worker_refuses_another_shard_count(start_worker, redis_url, redis_client):
    redis_client.hset("site:dupefilter:meta", "shards", 4)
    worker = start_worker(
        settings={"FRONTIER_SHARDS": "8", "MAX_IDLE_TIME_BEFORE_CLOSE": "1"}, env={"REDIS_URL": redis_url}
    )
    assert worker.wait(60) == 1
    assert "FRONTIER_SHARDS=8 differs from the crawl's recorded layout" in worker.output
    assert "Traceback" not in worker.output


def test_heartbeats_use_the_server_clock(redis_url, redis_client):
    """A node's heartbeat score is the server's time, whatever this process's clock says."""
    from scrapy_frontier.nodes import Heartbeat

    k = keys(0)
    hb = Heartbeat(redis.Redis.from_url(redis_url), k, "n-clock", interval=1, timeout=5)
    hb.beat()
    seconds, micros = redis_client.time()
    score = redis_client.zscore(k.nodes, "n-clock")
    assert abs(score - (seconds * 1000 + micros // 1000)) < 1000
    assert abs(hb.clock.offset) < 1
    hb.client.close()


@pytest.fixture
def sentinel(throwaway_redis, tmp_path):
    """``(primary, replica, url)``: a primary, a replica in sync with it and one Sentinel
    watching them (master name ``frontier``, down after 1 s), and the ``redis+sentinel://`` URL."""
    import subprocess

    from tests.loopback import free_port, wait_port

    primary, replica = _primary_and_replica(throwaway_redis)
    port = free_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\nsentinel monitor frontier 127.0.0.1 {primary.port} 1\n"
        "sentinel down-after-milliseconds frontier 1000\nsentinel failover-timeout frontier 5000\n"
    )
    proc = subprocess.Popen(
        ["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_port("127.0.0.1", port)
        yield primary, replica, f"redis+sentinel://127.0.0.1:{port}/frontier/0"
    finally:
        proc.kill()
        proc.wait()


def test_sentinel_url_follows_a_failover(sentinel):
    """``redis+sentinel://`` reaches the primary, and the primary again after a failover."""
    import time

    primary, replica, url = sentinel
    client = sync_redis(Settings({"REDIS_URL": url}))
    client.set("probe:sentinel", "before")
    deadline = time.monotonic() + 10
    while redis.Redis(port=replica.port).get("probe:sentinel") != b"before" and time.monotonic() < deadline:
        time.sleep(0.1)
    primary.proc.kill()
    primary.proc.wait()
    deadline = time.monotonic() + 30
    while True:
        try:
            client.set("probe:sentinel", "after")
            break
        except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    assert redis.Redis(port=replica.port).get("probe:sentinel") == b"after"
    assert redis.Redis(port=replica.port).info("replication")["role"] == "master"
    client.close()


def test_a_malformed_sentinel_url_is_named():
    from scrapy_frontier.connection import ConfigError

    for url in ("redis+sentinel://:s3cret@h:x/master", "redis+sentinel://h:26379"):
        with pytest.raises(ConfigError) as exc:
            sync_redis(Settings({"REDIS_URL": url}))
        assert "REDIS_URL" in str(exc.value) and "s3cret" not in str(exc.value)


def _crawl_with_fault(cluster_url, site, start_worker, mysql_url, mysql_query, fault, *, pages_before: int = 120):
    """Two workers crawl ``site`` on a cluster; ``fault()`` runs once ``pages_before`` pages are
    stored. Returns (stored URLs, workers)."""
    from tests.test_crawl import stored_urls_mysql
    from tests.test_faults import wait_stored

    env = {"REDIS_URL": cluster_url, "MYSQL_URL": mysql_url}
    settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": "6", "CONCURRENT_REQUESTS": "4", "DOWNLOAD_DELAY": "0.015"}
    workers = [start_worker(settings=settings, env=env) for _ in range(2)]
    for w in workers:
        w.wait_for("Joined the crawl")
    client = redis.RedisCluster.from_url(cluster_url)
    client.lpush("site:start_urls", f"{site.url}index.html")
    client.close()
    wait_stored(lambda: len(stored_urls_mysql(mysql_query)), pages_before)
    fault()
    for w in workers:
        assert w.wait(240) == 0, w.output[-3000:]
    return stored_urls_mysql(mysql_query), workers


def _assert_nothing_lost(name: str, site, urls: list[str], workers, client) -> None:
    """Every page of ``site`` stored once, no lease left, no traceback; the figures printed."""
    from tests.test_faults import expected, report

    figures = report(name, site, urls, client)
    assert set(urls) == expected(site)
    assert figures["duplicate_rows"] == 0 and figures["leases_left"] == 0
    assert all("Traceback" not in w.output for w in workers)


def _shard_master(cluster, host: str):
    """The cluster node (RedisServer) that holds the frontier shard of ``host``."""
    client = redis.RedisCluster.from_url(cluster.url)
    try:
        node = client.get_node_from_key(keys().shard_of(host).queue)
    finally:
        client.close()
    return next(n for n in cluster.nodes if n.port == node.port)


@pytest.mark.slow
def test_a_master_killed_mid_crawl_loses_nothing(redis_cluster, tmp_path, start_worker, mysql_url, mysql_query):

    site = HttpServer(DOCS, "127.0.0.13", log=tmp_path / "access.log")
    try:
        victim = _shard_master(redis_cluster, "127.0.0.13")
        if victim is redis_cluster.nodes[0]:
            # the workers' REDIS_URL names node 0: a worker needs it up to start, not to go on
            redis_cluster.nodes.append(redis_cluster.nodes.pop(0))

        def kill_master():
            victim.proc.kill()
            victim.proc.wait()
            redis_cluster.wait_ok()  # its replica promoted

        urls, workers = _crawl_with_fault(redis_cluster.url, site, start_worker, mysql_url, mysql_query, kill_master)
        client = redis.RedisCluster.from_url(redis_cluster.url)
        _assert_nothing_lost("cluster_master_killed", site, urls, workers, client)
        client.close()
    finally:
        site.stop()


@pytest.mark.slow
def test_slots_migrated_mid_crawl_lose_nothing(redis_cluster, tmp_path, start_worker, mysql_url, mysql_query):
    import subprocess

    site = HttpServer(DOCS, "127.0.0.14", log=tmp_path / "access.log")
    try:
        source = _shard_master(redis_cluster, "127.0.0.14")
        target = next(m for m in redis_cluster.masters() if m.port != source.port)

        def node_id(server):
            return redis_cluster.client(server.port).execute_command("CLUSTER", "MYID").decode()

        def reshard():
            # every slot of the master holding the site's shard moves to another master, keys and all
            subprocess.run(
                ["redis-cli", "--cluster", "reshard", f"127.0.0.1:{source.port}",
                 "--cluster-from", node_id(source), "--cluster-to", node_id(target),
                 "--cluster-slots", "16384", "--cluster-yes"],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=180,
            )  # fmt: skip

        urls, workers = _crawl_with_fault(redis_cluster.url, site, start_worker, mysql_url, mysql_query, reshard)
        client = redis.RedisCluster.from_url(redis_cluster.url)
        assert client.get_node_from_key(keys().shard_of("127.0.0.14").queue).port == target.port
        _assert_nothing_lost("cluster_slots_migrated", site, urls, workers, client)
        client.close()
    finally:
        site.stop()


def test_pushes_wait_for_a_replica_before_other_shards_acknowledge(redis_cluster, redis_url):
    k = keys()
    hosts = [f"127.1.1.{i}" for i in range(1, 21)]

    async def go(url, cluster, wait_timeout):
        client = (redis.asyncio.RedisCluster if cluster else redis.asyncio.Redis).from_url(url)
        if cluster:
            await client.initialize()
        try:
            f = Frontier(client, k, "n-wait", wait_replicas=1, wait_timeout=wait_timeout)
            await f.push([entry(f"http://{h}/", h) for h in hosts])
            taken: list = []
            for _ in range(20):
                taken += await f.lease(20)
                if len(taken) == 20:
                    break
            # children on many shards, acknowledgements on others: pushes WAIT first
            added = await f.push([entry(f"http://{h}/c", h) for h in hosts], acks=taken, failed=['{"reason":"x"}'])
            return added, f.wait_short, await client.llen(k.failed)
        finally:
            await client.delete(k.failed)
            await client.aclose()

    # three masters with a replica each: every WAIT is answered
    assert asyncio.run(go(redis_cluster.url, True, 2.0)) == (20, 0, 1)
    # a single Redis without replicas: each WAIT times out and is counted, nothing is lost
    added, short, failed = asyncio.run(go(redis_url, False, 0.05))
    assert (added, failed) == (20, 1) and short > 0


def _primary_and_replica(throwaway_redis):
    """A primary and a replica in sync with it (a replica promoted before its first sync
    would start the crawl over from nothing)."""
    import time

    primary = throwaway_redis(**{"repl-diskless-sync-delay": "0"})
    replica = throwaway_redis(replicaof=f"127.0.0.1 {primary.port}")
    deadline = time.monotonic() + 30
    while redis.Redis(port=replica.port).info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "the replica did not sync"
        time.sleep(0.1)
    return primary, replica


@pytest.mark.slow
def test_sentinel_primary_killed_mid_crawl_loses_nothing(sentinel, tmp_path, start_worker, mysql_url, mysql_query):
    from tests.test_crawl import stored_urls_mysql
    from tests.test_faults import wait_stored

    primary, replica, url = sentinel
    site = HttpServer(DOCS, "127.0.0.15", log=tmp_path / "access.log")
    try:
        env = {"REDIS_URL": url, "MYSQL_URL": mysql_url}
        settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": "6", "CONCURRENT_REQUESTS": "4", "DOWNLOAD_DELAY": "0.015"}
        workers = [start_worker(settings=settings, env=env) for _ in range(2)]
        for w in workers:
            w.wait_for("Joined the crawl")
        redis.Redis(port=primary.port).lpush("site:start_urls", f"{site.url}index.html")
        wait_stored(lambda: len(stored_urls_mysql(mysql_query)), 120)
        primary.proc.kill()
        primary.proc.wait()
        for w in workers:
            assert w.wait(240) == 0, w.output[-3000:]
        urls = stored_urls_mysql(mysql_query)
        client = redis.Redis(port=replica.port)
        assert client.info("replication")["role"] == "master"
        _assert_nothing_lost("sentinel_primary_killed", site, urls, workers, client)
    finally:
        site.stop()


@pytest.mark.slow
def test_items_cached_and_stored_on_a_cluster(redis_cluster, tutorial_site, start_worker, mysql_url, mysql_query):
    """The cache pipeline writes one script call per shard its keys fall in (a cache write of
    keys in many hash slots is refused by a cluster); a second crawl finds every page unchanged."""
    from tests.test_crawl import DISTRIBUTED

    server, expected = tutorial_site
    env = {"REDIS_URL": redis_cluster.url, "MYSQL_URL": mysql_url}
    for run in range(2):
        worker = start_worker(settings={**DISTRIBUTED, "SCHEDULER_PERSIST": "False"}, env=env)
        worker.wait_for("Joined the crawl")
        client = redis.RedisCluster.from_url(redis_cluster.url)
        client.lpush("site:start_urls", f"{server.url}tutorial/index.html")
        assert worker.wait() == 0, worker.output[-3000:]
        assert "cache writes fail" not in worker.output and "Could not mark" not in worker.output, worker.output[-3000:]
        cached = sum(client.hlen(b) for b in client.scan_iter(match="site:{site/*}:items:cache:@*"))
        stored = mysql_query("SELECT COUNT(*) FROM pages")[0][0]
        assert stored == len(expected) and cached == stored  # a marker each, in the lean cache's buckets
        if run == 1:
            assert worker.stat("cache/unchanged") == stored
        client.close()


def test_commands_on_a_cluster(redis_cluster, tmp_path):
    """push, status, requeue, forget and replay on a sharded crawl of a Redis Cluster."""
    from tests.test_commands import GOOD_PAGE, run

    env = {"REDIS_URL": redis_cluster.url}
    client = redis.RedisCluster.from_url(redis_cluster.url)
    k = keys()
    client.hset(k.dupefilter_meta, mapping={"shards": SHARDS, "layout": "set"})
    try:
        pushed = run(["push", "site", "http://127.1.2.3/a", "--json"], env)
        assert pushed.returncode == 0, pushed.stderr
        assert client.lrange(k.start_urls, 0, -1) == [b"http://127.1.2.3/a"]
        # a dead letter back in its host's shard
        record = json.dumps(
            {"reason": "retries_exhausted", "request": {"url": "http://127.1.2.3/x", "meta": {"retry_times": 2}}}
        )
        client.lpush(k.failed, record)
        assert (
            json.loads(run(["status", "site", "--json"], env).stdout)["frontier"]["queued"] == 0
        )  # a dead letter is not queued
        requeued = run(["requeue", "site", "--json"], env)
        assert requeued.returncode == 0, requeued.stderr
        assert json.loads(requeued.stdout) == {"requeued": 1, "unreadable": 0, "left": 0}
        sh = k.shard_of("127.1.2.3")
        assert client.llen(sh.queue_prefix + "127.1.2.3#0") == 1 and client.zscore(sh.queue, "127.1.2.3") is not None
        status = run(["status", "site", "--json"], env)
        assert status.returncode == 0, status.stderr
        figures = json.loads(status.stdout)
        assert figures["frontier"]["queued"] == 1 and figures["frontier"]["start_urls_waiting"] == 1
        # forget: the fingerprint leaves the URL's own shard
        from scrapy import Request
        from scrapy.utils.request import RequestFingerprinter

        fp = RequestFingerprinter().fingerprint(Request("http://127.1.2.3/seen")).hex()
        client.sadd(sh.dupefilter, fp)
        forgot = run(["forget", "site", "http://127.1.2.3/seen", "--json"], env)
        assert forgot.returncode == 0, forgot.stderr
        assert json.loads(forgot.stdout)["known"] == 1 and not client.sismember(sh.dupefilter, fp)
        # replay: pending items through their node's replaying list, in the pending list's slot
        client.lpush(k.items_pending, json.dumps({"item_class": "crawler.items.Page", "item": GOOD_PAGE}))
        replayed = run(["replay", "site", "--json", "-s", f"SQLITE_PATH={tmp_path / 'r.sqlite3'}"], env)
        assert replayed.returncode == 0, replayed.stderr
        assert json.loads(replayed.stdout) == {"written": 1, "refused": 0, "left": 0}
    finally:
        client.close()


@pytest.mark.parametrize("url_db", ["0", "8"])
def test_redis_cluster_declared_on_a_single_redis_gives_one_line(url_db, start_worker, tmp_path):
    from tests.conftest import REDIS_HOST, REDIS_PORT

    url = f"redis://{REDIS_HOST}:{REDIS_PORT}/{url_db}"  # nothing is written: the worker stops at open
    worker = start_worker(
        settings={"REDIS_CLUSTER": "True", "SQLITE_PATH": str(tmp_path / "x.sqlite3")},
        env={"REDIS_URL": url},
        args=["-a", "url=http://127.0.0.9:1/"],
    )
    assert worker.wait(60) == 1
    errors = [line for line in worker.output.splitlines() if " ERROR: " in line]
    assert len(errors) == 1 and "REDIS_URL" in errors[0], worker.output[-3000:]
    assert "Traceback" not in worker.output


@pytest.mark.slow
def test_a_master_that_loses_its_data_mid_crawl_stops_the_crawl_in_one_line(
    redis_cluster, tmp_path, start_worker, mysql_url, mysql_query
):
    """One Redis Cluster master loses its data (FLUSHALL: a master restarted without persistence,
    its replica following it) while the crawl's meta, on another master, stays: each worker finds
    its shards' epoch gone, says so in one ERROR line naming the shard, never says the crawl
    finished, and exits with status 1."""
    from tests.test_crawl import stored_urls_mysql
    from tests.test_faults import wait_stored

    site = HttpServer(DOCS, "127.0.0.14")
    try:
        env = {"REDIS_URL": redis_cluster.url, "MYSQL_URL": mysql_url}
        settings = {"MAX_IDLE_TIME_BEFORE_CLOSE": "6", "CONCURRENT_REQUESTS": "4", "DOWNLOAD_DELAY": "0.015"}
        workers = [start_worker(settings=settings, env=env) for _ in range(2)]
        for w in workers:
            w.wait_for("Joined the crawl")
        client = redis.RedisCluster.from_url(redis_cluster.url)
        client.lpush("site:start_urls", f"{site.url}index.html")
        meta_port = client.get_node_from_key("site:dupefilter:meta").port
        shard_ports = {client.get_node_from_key(sh.epoch).port for sh in keys().all_shards()}
        client.close()
        victim = next(m for m in redis_cluster.masters() if m.port != meta_port and m.port in shard_ports)
        wait_stored(lambda: len(stored_urls_mysql(mysql_query)), 40)
        redis_cluster.client(victim.port).flushall()
        for w in workers:
            assert w.wait(120) == 1, w.output[-3000:]
            assert w.output.count("The crawl's state in Redis is gone (site:{site/") == 1, w.output[-3000:]
            assert "'finish_reason': 'state_lost'" in w.output and "Crawl finished" not in w.output
    finally:
        site.stop()
