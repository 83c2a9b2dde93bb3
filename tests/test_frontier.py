"""The frontier's Lua scripts against the real Redis."""

import asyncio
import json
import time

import pytest
import redis
import redis.asyncio
from scrapy.settings import Settings

from scrapy_frontier.frontier import Entry, Frontier
from scrapy_frontier.keys import Keys, queue_host
from scrapy_frontier.nodes import Heartbeat
from scrapy_frontier.payload import START_PREFIX, compact_payload
from scrapy_frontier.reclaim import reclaim_dead

KEYS = Keys.for_spider(Settings(), "site")


def run(coro):
    return asyncio.run(coro)


async def with_client(redis_url, fn):
    """``fn(client)``, an asyncio client of ``redis_url`` closed after."""
    client = redis.asyncio.Redis.from_url(redis_url)
    try:
        return await fn(client)
    finally:
        await client.aclose()


async def with_frontier(redis_url, fn, node="n1", **kw):
    return await with_client(redis_url, lambda client: fn(Frontier(client, KEYS, node, **kw), client))


def payloads(leases):
    """The requests' JSON of some leases (Frontier.lease)."""
    return [lease.payload for lease in leases]


def entry(url, host="h", fp=None, score=0):
    return Entry(fp if fp is not None else url, host, score, json.dumps({"url": url}, separators=(",", ":")))


def test_push_dedups_across_calls_and_bypasses_for_dont_filter(redis_url):
    async def go(f, r):
        assert await f.push([entry("a"), entry("b"), entry("a")]) == 2
        assert await f.push([entry("a"), entry("c")]) == 1
        # dont_filter requests skip the dupefilter
        assert await f.push([Entry("", "h", 0, '{"url":"a","dont_filter":true}')]) == 1
        return await r.llen(KEYS.queue_prefix + "h#0"), await r.scard(KEYS.dupefilter)

    assert run(with_frontier(redis_url, go)) == (4, 3)


def test_push_reports_the_duplicates_it_dropped_when_asked(redis_url):
    async def go(f, r):
        await f.push([entry("a"), entry("b")])
        duplicates: list = []
        assert await f.push([entry("a"), entry("c"), entry("b", host="other")], duplicates=duplicates) == 1
        return duplicates

    assert run(with_frontier(redis_url, go)) == ['{"url":"a"}', '{"url":"b"}']  # by fingerprint, whatever the host


def test_lease_moves_to_the_node_and_ack_releases_after_pushes(redis_url):
    async def go(f, r):
        await f.push([entry("a"), entry("b")])
        taken = await f.lease(10)
        assert sorted(payloads(taken)) == [b'{"url":"a"}', b'{"url":"b"}']
        # the two leases and the mark that keeps the hash a hashtable (frontier_lease)
        assert await r.hlen(f.lease_key) == 3 and await r.hexists(f.lease_key, "@")
        assert await r.object("encoding", f.lease_key) == b"hashtable"
        assert await r.exists(KEYS.queue_prefix + "h") == 0
        assert await r.zcard(KEYS.slots) == 0
        # a page's children and its acknowledgement arrive in one call
        assert await f.push([entry("child")], acks=[taken[0]], failed=['{"reason":"x"}']) == 1
        assert await r.hlen(f.lease_key) == 2
        assert await r.llen(KEYS.failed) == 1
        return payloads(await f.lease(10))

    assert run(with_frontier(redis_url, go)) == [b'{"url":"child"}']


def test_push_lease_pushes_acknowledges_and_leases_in_one_round_trip(redis_url):
    async def go(f, r):
        assert f.one_call
        await f.push([entry("a")])
        (taken,) = await f.lease(10)
        # the children of the page leased, its acknowledgement, a dead letter, and the next lease
        added, leases = await f.push_lease([entry("b"), entry("a"), entry("c")], [taken], ['{"reason":"x"}'], None, 10)
        assert added == 2
        assert sorted(payloads(leases)) == [b'{"url":"b"}', b'{"url":"c"}']
        assert await r.hexists(f.lease_key, taken.field) == 0
        assert await r.llen(KEYS.failed) == 1
        # a Redis that lost its scripts (restarted): both are loaded and made again, in order
        await r.script_flush()
        duplicates: list = []
        added, leases = await f.push_lease([entry("d"), entry("b")], leases, [], duplicates, 10)
        assert (added, duplicates, payloads(leases)) == (1, ['{"url":"b"}'], [b'{"url":"d"}'])
        assert set(await r.hkeys(f.lease_key)) == {b"@", leases[0].field}
        # a call that fails alone gives its exception; the other's outcome stands
        assert await f.push([entry("e")]) == 1
        await r.rename(KEYS.dupefilter, KEYS.dupefilter + ":aside")
        await r.set(KEYS.dupefilter, "not a set")
        added, more = await f.push_lease([entry("f")], leases, [], None, 10)
        assert isinstance(added, redis.exceptions.ResponseError) and "WRONGTYPE" in str(added)
        assert payloads(more) == [b'{"url":"e"}']
        # the push was refused at its first command: the lease of d is still held
        assert set(await r.hkeys(f.lease_key)) == {b"@", leases[0].field, more[0].field}
        await r.rename(KEYS.dupefilter + ":aside", KEYS.dupefilter)
        return f.next_due_in

    assert run(with_frontier(redis_url, go)) == 0  # the last call leased: ask again at once


def test_lease_takes_from_every_due_host(redis_url):
    async def go(f, r):
        await f.push([entry(f"a{i}", host="a") for i in range(20)] + [entry(f"b{i}", host="b") for i in range(2)])
        taken = await f.lease(6)
        return sorted(t.decode()[8] for t in payloads(taken))

    hosts = run(with_frontier(redis_url, go))
    assert hosts.count("b") == 2 and hosts.count("a") == 4


def test_priority_orders_within_a_host(redis_url):
    async def go(f, r):
        await f.push([entry("low", score=0), entry("high", score=-10)])
        return payloads(await f.lease(1))

    assert run(with_frontier(redis_url, go)) == [b'{"url":"high"}']


def test_first_in_first_out_within_a_priority(redis_url):
    """Requests of one priority and host are served in the order they were pushed (not in the
    order of their bytes: z, y, x stays z, y, x), and requests given back (not started, or a
    node leaving) are served again first, in the order they were taken."""
    names = ["z", "y", "x", "w"]

    async def go(f, r):
        for name in names[:2]:
            await f.push([entry(name)])
        await f.push([entry(name) for name in names[2:]])
        await f.push([entry("high", score=-1)])
        served = [json.loads(p)["url"] for p in payloads(await f.lease(1))]
        taken = await f.lease(3)
        assert await f.unlease(taken) == 3
        served_again = [json.loads(p)["url"] for p in payloads(await f.lease(2))]
        assert await f.release() == 3  # and "high", still held
        after_release = [json.loads(p)["url"] for p in payloads(await f.lease(10))]
        return served, served_again, after_release

    assert run(with_frontier(redis_url, go)) == (["high"], ["z", "y"], ["high", "z", "y", "x", "w"])


def test_a_queued_request_is_stored_without_its_host_and_leased_as_its_json(redis_url):
    """The queue's key holds the host, so the payload in the list does not; priority 0 (the
    default) needs no entry in the host's sorted set of priorities; what a lease, the lease
    hash and a duplicate report give is the request's JSON, byte for byte."""
    requests = {
        "https://www.example.com/a?b=1": '{"url":"https://www.example.com/a?b=1","meta":{"depth":2}}',
        "http://www.example.com:8080/p": '{"url":"http://www.example.com:8080/p","callback":"parse_item"}',
        "https://www.example.com": '{"url":"https://www.example.com"}',
        "https://www.example.com.evil/": '{"url":"https://www.example.com.evil/"}',  # not this host: kept whole
    }
    host = "www.example.com"
    q = KEYS.queue_prefix + host

    async def go(f, r):
        assert await f.push([Entry(url, host, 0, payload) for url, payload in requests.items()]) == 4
        stored = await r.lrange(q + "#0", 0, -1)
        assert not await r.exists(q)  # no sorted set for priority 0
        duplicates: list = []
        assert (
            await f.push(
                [Entry("https://www.example.com/a?b=1", host, 0, requests["https://www.example.com/a?b=1"])],
                duplicates=duplicates,
            )
            == 0
        )
        taken = await f.lease(10)
        # the lease hash holds each request as its queue stored it, under a short field
        held = await r.hgetall(f.lease_key)
        assert held.pop(b"@")  # the hash's mark, no lease
        assert sorted(held) == sorted(t.field for t in taken)
        assert sorted(held.values()) == sorted(stored) and all(len(t.field) < 40 for t in taken)
        assert not await r.exists(q + "#0") and not await r.exists(q) and await r.zcard(KEYS.slots) == 0
        return stored, duplicates, payloads(taken)

    stored, duplicates, taken = run(with_frontier(redis_url, go))
    assert stored == [
        b'/a?b=1","meta":{"depth":2}}',
        b'h:8080/p","callback":"parse_item"}',
        b'"}',
        b'{"url":"https://www.example.com.evil/"}',
    ]
    assert duplicates == [requests["https://www.example.com/a?b=1"]]
    assert taken == [p.encode() for p in requests.values()]


def test_compact_payload_keeps_whatever_it_cannot_write_back():
    assert compact_payload('{"url":"https://h.example/x"}', "h.example") == '/x"}'
    assert (
        compact_payload('{"url":"https://H.example/x"}', "h.example") == '{"url":"https://H.example/x"}'
    )  # the host as written
    assert compact_payload('{"url":"http://[::1]:80/x"}', "::1") == '{"url":"http://[::1]:80/x"}'
    assert compact_payload('{"url":"https://h.examples/x"}', "h.example") == '{"url":"https://h.examples/x"}'
    assert compact_payload('{"url":"ftp://h.example/x"}', "h.example") == '{"url":"ftp://h.example/x"}'
    assert (
        compact_payload('{"meta":{},"url":"https://h.example/x"}', "h.example")
        == '{"meta":{},"url":"https://h.example/x"}'
    )


def test_priorities_around_the_default_are_served_in_order(redis_url):
    """Priority 0's list is looked at between the higher priorities (negative scores, in the
    host's sorted set) and the lower ones."""

    async def go(f, r):
        await f.push([entry("low", score=3), entry("default"), entry("high", score=-5), entry("default2")])
        assert await r.zrange(KEYS.queue_prefix + "h", 0, -1) == [b"-5", b"3"]
        served = [json.loads(p)["url"] for p in payloads(await f.lease(1))]
        served += [json.loads(p)["url"] for p in payloads(await f.lease(1))]
        served += [json.loads(p)["url"] for p in payloads(await f.lease(10))]
        keys_left = await r.keys(KEYS.queue_prefix + "h*")
        return served, keys_left

    assert run(with_frontier(redis_url, go)) == (["high", "default", "default2", "low"], [])


def test_priorities_put_a_host_in_the_ranked_set_until_they_are_served(redis_url):
    async def go(f, r):
        ranked = KEYS.shard(0).ranked
        await f.push([entry("a0", host="a"), entry("b0", host="b"), entry("b2", host="b", score=-2)])
        before = await r.smembers(ranked)
        served = [json.loads(p)["url"] for p in payloads(await f.lease(10))]
        return before, served, await r.smembers(ranked)

    before, served, after = run(with_frontier(redis_url, go))
    assert before == {b"b"}
    assert served.index("b2") < served.index("b0") and "a0" in served
    assert after == set()


def test_release_returns_leases_and_start_urls(redis_url):
    async def go(f, r):
        await f.push([entry("a")])
        await r.lpush(KEYS.start_urls, b"http://s/1")
        assert await f.take_start_urls(5) == [b"http://s/1"]
        assert payloads(await f.lease(5)) == [b'{"url":"a"}']
        assert await f.release() == 2
        assert await r.exists(f.lease_key) == 0
        return await r.lrange(KEYS.start_urls, 0, -1), payloads(await f.lease(5))

    assert run(with_frontier(redis_url, go)) == ([b"http://s/1"], [b'{"url":"a"}'])


def test_a_dead_nodes_leases_are_given_back_whole(redis_url):
    """An unlease and the reclaim of a dead node put each lease back in its host's queue, at its
    priority, in the order it was taken, and end its in-flight count."""

    async def go(f, r):
        await f.push([entry(f"https://h/{u}", host="h", score=-5 if u == "high" else 0) for u in ("a", "b", "high")])
        taken = await f.lease(5)
        assert [json.loads(p)["url"] for p in payloads(taken)] == ["https://h/high", "https://h/a", "https://h/b"]
        assert await f.unlease(taken[:1]) == 1
        restored, _ = reclaim_dead(redis.Redis.from_url(redis_url), KEYS, 0)
        served = [json.loads(p)["url"] for p in payloads(await Frontier(r, KEYS, "n2").lease(10))]
        return restored, served, await r.hget(KEYS.politeness_prefix + "@inflight", "h")

    redis.Redis.from_url(redis_url).zadd(KEYS.nodes, {"n1": 0})  # a node whose last heartbeat is long past
    restored, served, inflight = run(with_frontier(redis_url, go))
    assert restored == 2
    assert served == ["https://h/high", "https://h/a", "https://h/b"]
    assert inflight == b"3"  # n2's three leases; n1's were all ended


def test_reclaim_takes_back_only_dead_nodes_leases(redis_url):
    sync = redis.Redis.from_url(redis_url)
    dropped = []
    dead_hb = Heartbeat(sync, KEYS, "dead", interval=0.1, timeout=60, on_dropped=lambda: dropped.append(1))
    live_hb = Heartbeat(sync, KEYS, "live", interval=0.1, timeout=60)

    async def go(f_dead, r):
        f_live = Frontier(r, KEYS, "live")
        await f_dead.push([entry("a"), entry("b")])
        dead_hb.beat()
        await f_dead.lease(1)
        live_hb.beat()
        await f_live.lease(1)
        assert live_hb.reclaim() == (0, 0)
        await asyncio.sleep(0.3)
        live_hb.beat()
        live_hb.timeout = 0.2
        assert live_hb.reclaim() == (1, 1)
        assert await r.zrange(KEYS.nodes, 0, -1) == [b"live"]
        assert not dead_hb.beat()  # the dead node learns it was dropped
        return await r.hlen(f_live.lease_key) - await r.hexists(f_live.lease_key, "@"), await f_live.status(deep=True)

    held, status = run(with_frontier(redis_url, go, node="dead"))
    assert dropped == [1]
    assert held == 1
    assert (status.depth, status.inflight, status.seen) == (1, 1, 2)
    sync.close()


def test_heartbeat_thread_keeps_beating_while_the_loop_is_busy(redis_url):
    sync = redis.Redis.from_url(redis_url)
    hb = Heartbeat(sync, KEYS, "busy", interval=0.1, timeout=1)
    hb.beat()
    hb.start()
    try:
        first = sync.zscore(KEYS.nodes, "busy")
        time.sleep(0.5)  # the calling thread is blocked, as a reactor busy in a callback
        assert sync.zscore(KEYS.nodes, "busy") > first
    finally:
        hb.stop()
        sync.close()


def test_start_urls_as_set(redis_url):
    async def go(f, r):
        await r.sadd(KEYS.start_urls, b"http://s/1")
        assert await f.take_start_urls(5) == [b"http://s/1"]
        assert await r.hget(f.lease_key, START_PREFIX + b"http://s/1") == b"\t"
        await f.release()
        return await r.smembers(KEYS.start_urls)

    assert run(with_frontier(redis_url, go, start_urls_as_set=True)) == {b"http://s/1"}


def test_queue_host_keeps_the_dead_letter_key_free():
    assert queue_host("Example.COM") == "example.com"
    assert queue_host("failed") == "failed."


def test_unlease_returns_only_the_given_requests(redis_url):
    async def go(f, r):
        await f.push([entry("a"), entry("b")])
        taken = await f.lease(5)
        assert await f.unlease([taken[0], b"not-a-lease"]) == 1
        return [k for k in await r.hkeys(f.lease_key) if k != b"@"], await f.lease(5)

    held, again = run(with_frontier(redis_url, go))
    assert len(held) == 1 and len(again) == 1 and held[0] != again[0].field


def test_unlease_gives_an_orphaned_start_url_back(redis_url):
    # A start URL taken by a script whose reply was lost: the worker finds it among its lease
    # fields without knowing it, and gives it back to the start URLs.
    async def go(f, r):
        await r.lpush(KEYS.start_urls, b"http://s/1")
        await f.take_start_urls(5)
        held = await f.lease_fields()
        assert held == {START_PREFIX + b"http://s/1"}
        assert await f.unlease(sorted(held)) == 1
        return await r.lrange(KEYS.start_urls, 0, -1), await f.lease_fields()

    assert run(with_frontier(redis_url, go)) == ([b"http://s/1"], set())


def test_the_lease_reads_the_politeness_of_limited_hosts_only(redis_url):
    """A host paused (Retry-After) or with a Crawl-delay is in the limited set, and its politeness
    hash is read at lease time: nothing of the paused one, nothing of the one whose robots.txt
    request took the send Crawl-delay seconds before, one request of a delayed one not sent to yet
    (its rate, 1/10 s, allows one in the next second). A host without either is leased from its
    queue alone and gets no politeness state."""
    from scrapy_frontier.politeness import Politeness

    async def go(f, r):
        await f.push([entry(f"{h}{i}", host=h) for h in "abcd" for i in range(2)])
        politeness = Politeness(r, KEYS)
        await politeness.slow_down("a", pause=30)
        await politeness.set_robots_delay("b", 10)
        await r.hset(KEYS.politeness_prefix + "d", "robots_delay", 10)
        await r.sadd(KEYS.shard_of("d").limited, "d")
        leases = await f.lease(10)
        return leases, await r.hexists(KEYS.shard_of("c").next_send, "c") + await r.exists(KEYS.politeness_prefix + "c")

    leases, c_state = run(with_frontier(redis_url, go))
    assert sorted(payloads(leases)) == [b'{"url":"c0"}', b'{"url":"c1"}', b'{"url":"d0"}']
    assert [(lease.send_in, lease.interval, lease.strict) for lease in leases if lease.payload.endswith(b'd0"}')] == [
        (0.0, 10.0, True)
    ]
    assert c_state == 0


def test_a_host_paused_for_its_robots_txt_keeps_its_requests_and_its_rate(redis_url):
    """A host whose robots.txt is unreachable is paused (RFC 9309, 2.3.1.4): the lease gives none of
    its requests, they stay queued (the crawl is not idle), its rate is untouched, and a shorter
    pause does not end a longer one."""
    from scrapy_frontier.politeness import Politeness

    async def go(f, r):
        await f.push([entry(f"a{i}", host="a") for i in range(2)] + [entry("b0", host="b")])
        politeness = Politeness(r, KEYS)
        await politeness.pause("a", 30)
        await politeness.pause("a", 1)
        taken = payloads(await f.lease(10))
        state = await r.hgetall(KEYS.politeness_prefix + "a")
        return taken, state, await f.status(deep=True)

    taken, state, status = run(with_frontier(redis_url, go))
    assert taken == [b'{"url":"b0"}']
    assert int(state.pop(b"pause_until")) > time.time() * 1000 + 25_000 and state == {}
    assert status.depth == 2 and not status.idle


def test_acknowledgements_of_many_hosts_count_only_the_leases_still_held(redis_url):
    """Acknowledgements of several hosts in one call lower each host's in-flight count by the
    leases still in the lease hash: one given back meanwhile (here by another frontier object
    of the same node, as a reconcile or a reclaim does) was counted back already."""

    async def go(f, r):
        await f.push([entry(f"a{i}", host="a") for i in range(3)] + [entry("b0", host="b")])
        taken = await f.lease(10)
        assert sorted(payloads(taken)) == [b'{"url":"a0"}', b'{"url":"a1"}', b'{"url":"a2"}', b'{"url":"b0"}']
        inflight = KEYS.politeness_prefix + "@inflight"
        counts = await r.hgetall(inflight)
        assert counts.pop(b"@")  # the hash's mark (frontier_lease), no host
        assert counts == {b"a": b"3", b"b": b"1"}
        assert await r.object("encoding", inflight) == b"hashtable"
        lease = {json.loads(t.payload)["url"]: t for t in taken}
        assert await Frontier(r, KEYS, f.node_id).unlease([lease["a0"].field]) == 1
        assert await r.hget(inflight, "a") == b"2"
        await f.push([], acks=[lease["a0"], lease["a1"], lease["b0"]])
        return {host: n for host, n in (await r.hgetall(inflight)).items() if host != b"@"}

    assert run(with_frontier(redis_url, go, concurrency_cap=3)) == {b"a": b"1"}  # a2 still out


def test_a_host_at_its_cap_is_parked_and_back_with_the_acknowledgement_below_it(redis_url):
    async def go(f, r):
        await f.push([entry(f"a{i}", host="a") for i in range(5)] + [entry("b0", host="b")])
        first = await f.lease(10)
        assert len(first) == 3  # two of a (the cap), one of b
        parked = await r.zscore(KEYS.slots, "a")
        assert parked is not None and parked > time.time() * 1000 + 20_000  # not walked over meanwhile
        assert await f.lease(10) == []
        a_leases = [p for p in first if p.payload.startswith(b'{"url":"a')]
        # one acknowledgement takes a below its cap: it is due at once, and gives one more
        await f.push([], acks=a_leases[:1])
        assert await r.zscore(KEYS.slots, "a") <= time.time() * 1000 + 1000
        assert len(await f.lease(10)) == 1
        return int(await r.hget(KEYS.politeness_prefix + "@inflight", "a"))

    assert run(with_frontier(redis_url, go, concurrency_cap=2)) == 2  # a_leases[1] and the one just taken


def test_a_capped_lease_takes_the_cap_from_each_host_and_more_hosts_for_what_is_missing(redis_url):
    """With a cap, a lease call walks as many due hosts as can give the requests asked for (cap
    each), not one host per request; hosts that give fewer (a short queue, leases still in
    flight) leave the rest to the next due hosts."""

    async def go(f, r):
        hosts = [f"h{i}" for i in range(8)]
        await f.push([entry(f"{h}-{k}", host=h) for k in range(4) for h in hosts])
        first = await f.lease(6)
        by_host = sorted({json.loads(p)["url"].split("-")[0] for p in payloads(first)})
        assert len(first) == 6 and len(by_host) == 3  # 2 from each of 3 hosts, not 1 from 6
        # h0-h2 at their cap; one acknowledgement each brings them back with 1 free slot, due
        # after h3-h7 (their index score is the acknowledgement's time, a few ms after the push's)
        await asyncio.sleep(0.005)
        await f.push([], acks=[p for p in first if p.payload.endswith(b'-0"}')])
        # 12 asked: 6 hosts walked (12 / cap), h3-h7 (due first) give 2 each, h0 its one free
        # slot; the one missing comes from a second batch of hosts (h1)
        second = await f.lease(12)
        return by_host, sorted(json.loads(p)["url"].split("-")[0] for p in payloads(second))

    by_host, second = run(with_frontier(redis_url, go, concurrency_cap=2))
    assert len(second) == 12
    fresh = sorted(set(second) - set(by_host))
    assert len(fresh) == 5 and all(second.count(h) == 2 for h in fresh)
    assert [h for h in by_host if h in second] == by_host[:2] and all(second.count(h) == 1 for h in by_host[:2])


def test_the_queued_count_is_made_by_the_first_deep_status_and_follows_pushes_leases_and_returns(redis_url):
    counter = KEYS.queue_prefix + "@queued"

    async def go(f, r):
        await f.push([entry(f"a{i}", host="a") for i in range(4)] + [entry("b0", host="b")])
        # a shard has no count until its first deep status counts it host by host; then it is kept
        assert not await r.exists(counter)
        assert (await f.status(deep=True)).depth == 5
        assert int(await r.get(counter)) == 5
        taken = await f.lease(3)
        assert (await f.status(deep=True)).depth == 2
        await f.unlease(taken[:1])
        await f.push([entry("c0", host="c"), entry("a0", host="a")], acks=taken[1:])  # a0: seen
        assert (await f.status(deep=True)).depth == 4
        await f.lease(10)
        await f.release()
        return (await f.status(deep=True)).depth, int(await r.get(counter))

    assert run(with_frontier(redis_url, go)) == (4, 4)


def test_clear_removes_the_queued_count_and_keeps_the_dead_letters(redis_url):
    counter = KEYS.queue_prefix + "@queued"

    async def go(f, r):
        await f.push([entry("a0", host="a"), entry("b0", host="b")])
        await f.status(deep=True)
        await r.lpush(KEYS.failed, b"{}")
        assert int(await r.get(counter)) == 2
        await f.clear()
        assert (await f.status(deep=True)).depth == 0  # `scrapy status` after the crawl: writes nothing back
        return bool(await r.exists(counter)), await r.llen(KEYS.failed)

    assert run(with_frontier(redis_url, go)) == (False, 1)


def test_the_seen_feed_tells_each_node_what_the_others_queued(redis_url):
    """Node b's lease calls hand it the fingerprints node a queued since b last looked (not
    its own, not the duplicates a pushed, nothing before b's first look), in one list per push."""
    import hashlib

    from scrapy_frontier.dupefilter import DedupConfig

    packed = DedupConfig()
    fp = {u: hashlib.sha1(u.encode()).hexdigest() for u in "abcde"}

    async def go(r):
        await r.zadd(KEYS.nodes, {"a": 1, "b": 1})  # both in the crawl (their heartbeats)
        a = Frontier(r, KEYS, "a", seen_feed=100, dedup=packed)
        b = Frontier(r, KEYS, "b", seen_feed=100, dedup=packed)
        await a.push([entry("a", fp=fp["a"])])
        await b.lease(1)  # b's first look: it starts from the newest entry
        first = list(b.fed)
        await a.push([entry("b", fp=fp["b"]), entry("c", fp=fp["c"]), entry("a", fp=fp["a"])])
        await b.push([entry("d", fp=fp["d"])])
        await a.push([entry("e", fp=fp["e"])])
        b.fed.clear()
        await b.lease(1)
        after = list(b.fed)
        await b.lease(1)  # nothing new since
        again = list(b.fed)
        await a.lease(1)
        return first, after, again, a.fed, await r.xlen(KEYS.shard(0).seen_feed)

    first, after, again, a_fed, entries = run(with_client(redis_url, go))
    member = {u: str(packed.packed_bucket(f)[1]).encode() for u, f in fp.items()}
    assert first == []
    assert after == [member["b"] + b"," + member["c"], member["e"]]
    assert again == after
    assert a_fed == []  # a's first look starts from the newest too
    assert entries == 4


def test_a_node_alone_neither_writes_nor_reads_the_seen_feed(redis_url):
    """While the nodes index holds one node, its pushes write no feed entry and its lease calls
    read none; its place in the feed is kept, so that once another node is there it reads all
    that node wrote."""
    import hashlib

    from scrapy_frontier.dupefilter import DedupConfig

    packed = DedupConfig()
    fp = {u: hashlib.sha1(u.encode()).hexdigest() for u in "abcd"}
    member = {u: str(packed.packed_bucket(f)[1]).encode() for u, f in fp.items()}
    sync = redis.Redis.from_url(redis_url)
    a_beat = Heartbeat(sync, KEYS, "a", interval=1, timeout=6)
    b_beat = Heartbeat(sync, KEYS, "b", interval=1, timeout=6)
    feed = KEYS.shard(0).seen_feed

    async def go(r):
        a = Frontier(r, KEYS, "a", seen_feed=100, dedup=packed)
        b = Frontier(r, KEYS, "b", seen_feed=100, dedup=packed)
        a_beat.beat()
        await a.lease(1)  # a's first look
        await a.push([entry("a", fp=fp["a"])])
        written_alone = await r.xlen(feed)
        b_beat.beat()  # b joins: in the index before its first call
        await b.lease(1)
        await b.push([entry("b", fp=fp["b"])])
        await a.push([entry("c", fp=fp["c"])])
        written_two = await r.xlen(feed)
        await b.push([entry("d", fp=fp["d"])])
        await r.zrem(KEYS.nodes, "b")  # b gone: a is alone again
        await a.lease(1)
        fed_alone = list(a.fed)
        b_beat.beat()
        await a.lease(1)
        return written_alone, written_two, fed_alone, list(a.fed)

    try:
        written_alone, written_two, fed_alone, fed = run(with_client(redis_url, go))
    finally:
        sync.close()
    assert written_alone == 0
    assert written_two == 2
    assert fed_alone == []
    assert fed == [member["b"], member["d"]]


def test_no_seen_feed_is_written_or_read_when_off(redis_url):
    async def go(f, r):
        await f.push([entry("a"), entry("b")])
        await f.lease(2)
        return f.fed, await r.exists(KEYS.shard(0).seen_feed)

    assert run(with_frontier(redis_url, go)) == ([], 0)


def test_the_shared_autothrottle_moves_a_hosts_delay_by_scrapys_rule(redis_url):
    """Latencies sent with a push move the host's delay in Redis exactly as Scrapy's AutoThrottle
    moves a download slot's (its own ``_adjust_delay``, run here on the same responses): a 200
    pulls the delay toward latency / target, an error page only ever raises it, within the bounds.
    A node that joins later (or restarts) leases the host at that delay."""
    from types import SimpleNamespace

    from scrapy.extensions.throttle import AutoThrottle
    from scrapy.http import Response

    from scrapy_frontier.politeness import SharedAutoThrottle

    shared = SharedAutoThrottle(target_concurrency=4.0, start_delay=0.5, min_delay=0.01, max_delay=2.0)
    # (latency in seconds, status): falling latencies, an error page answering fast, a slow spell
    responses = [(0.4, 200), (0.2, 200), (0.2, 200), (0.01, 500), (0.1, 200), (9.0, 200), (0.3, 503)]
    responses += [(0.2, 200), (0.1, 200), (0.1, 200), (0.1, 200)]
    scrapy_at = AutoThrottle.__new__(AutoThrottle)
    scrapy_at.target_concurrency, scrapy_at.mindelay, scrapy_at.maxdelay = 4.0, 0.01, 2.0
    slot = SimpleNamespace(delay=0.5)
    expected = []
    for latency, status in responses:
        scrapy_at._adjust_delay(slot, latency, Response("http://h/", status=status))
        expected.append(slot.delay)
    samples = [int(lat * 1e6) if status == 200 else -1 - int(lat * 1e6) for lat, status in responses]

    async def go(f, r):
        got = []
        for sample in samples:
            await f.push([], samples={"h": [sample]})
            got.append(float(await r.hget(KEYS.shard_of("h").at_delay, "h")) / 1e6)
        await f.push([entry(f"u{i}") for i in range(10)])
        later = Frontier(r, KEYS, "n2", autothrottle=shared)
        return got, await later.lease(10)

    got, leases = run(with_frontier(redis_url, go, autothrottle=shared))
    assert got == pytest.approx(expected)
    delay = expected[-1]
    # the next second's worth of requests, one every `delay` seconds, booked from now, but no more
    # than AutoThrottle's target concurrency
    assert len(leases) == min(4, max(1, int(1 / delay)))
    assert [lease.send_in for lease in leases] == pytest.approx([k * delay for k in range(len(leases))], abs=1e-3)
    assert [(lease.interval, lease.strict) for lease in leases] == [(pytest.approx(delay, abs=1e-3), False)] * len(
        leases
    )
    assert len(leases) > 1


def test_autothrottle_samples_in_one_push_apply_in_order(redis_url):
    """Several responses' latencies in one push are applied one after the other, as they came."""
    from scrapy_frontier.politeness import SharedAutoThrottle

    shared = SharedAutoThrottle(target_concurrency=2.0, start_delay=1.0, min_delay=0.0, max_delay=10.0)

    async def go(f, r):
        await f.push([], samples={"h": [400_000, 400_000], "g": [-1 - 4_000_000]})
        sh = KEYS.shard_of("h")
        return (await r.hget(sh.at_delay, "h"), await r.hget(sh.latency, "h")), await r.hget(sh.at_delay, "g")

    (h_delay, h_latency), g_delay = run(with_frontier(redis_url, go, autothrottle=shared))
    # 1.0 -> (1.0 + 0.2) / 2 = 0.6 -> (0.6 + 0.2) / 2 = 0.4; an error page of 4 s raises g's to 2.0 (in µs)
    assert (int(h_delay), int(h_latency), int(g_delay)) == (400_000, 400_000, 2_000_000)


def test_a_host_back_under_its_cap_is_due_when_its_rate_lets_it_send(redis_url):
    """An acknowledgement that brings a parked host under its concurrency cap puts it back in
    the hosts index due at its next booked send (a rate of 1/s), not now: a lease in between
    would find it too early, read its state and park it again."""

    async def go(f, r):
        await f.push([entry(f"u{i}") for i in range(5)])
        [lease] = await f.lease(5)  # cap 1: the host is parked
        parked = await r.zscore(KEYS.queue, "h")
        now_s, now_us = await r.time()
        await f.push([], [lease])
        back = await r.zscore(KEYS.queue, "h")
        booked = float(await r.hget(KEYS.shard_of("h").next_send, "h"))
        return parked, back, booked, now_s * 1000 + now_us // 1000

    parked, back, booked, now = run(with_frontier(redis_url, go, default_rate=1.0, concurrency_cap=1))
    assert parked > now + 20_000
    assert back == booked and now + 900 <= back <= now + 1100, (back, now)


def test_latency_samples_wait_for_a_batch_or_a_second_and_an_urgent_one_goes_at_once():
    """A worker sends a host's latencies for the shared AutoThrottle once it holds 4, once the
    oldest is a second old, or with one that would move the host's pace (a new host, a host
    slowing down) or an error response's: fewer writes of the host's delay, the same delay in
    the end (each write applies its samples in order)."""
    from scrapy_frontier.politeness import LatencySamples, moves_pace

    samples = LatencySamples(batch=4, hold=1.0)
    for k in range(3):
        samples.add("a", 100 + k, 10.0)
    samples.add("b", 500, 10.5)
    assert samples.take(10.9) is None
    samples.add("a", 103, 10.9)
    assert samples.take(10.9) == {"a": [100, 101, 102, 103]}
    samples.add("c", -1 - 2000, 11.0)  # a 503: at once
    assert samples.take(11.0) == {"c": [-2001]}
    samples.add("e", 40, 11.0, urgent=True)
    assert samples.take(11.0) == {"e": [40]}
    assert samples.take(11.4) is None and len(samples) == 1
    assert samples.take(11.5) == {"b": [500]}
    samples.add("d", 7, 12.0)
    assert samples.take(12.0) is None and samples.take(12.0, everything=True) == {"d": [7]}
    assert samples.take(99.0) is None
    # a host's pace from its last lease: AutoThrottle's own, or a rate's (strict)
    assert moves_pace(0.04, None)  # a new host
    assert moves_pace(0.04, (5.0, False)) and moves_pace(0.9, (0.5, True))  # its start delay; slower than the rate
    assert not moves_pace(0.045, (0.04, False)) and not moves_pace(0.0001, (0.5, True))


@pytest.mark.parametrize("bad", ["-3", "abc", "nan", "inf"])
def test_a_live_rate_that_is_not_a_number_from_0_up_is_ignored(bad, redis_url):
    """A live rate (``<spider>:rates``) that is negative, not a number, NaN or infinite does not lift the
    host's limit: the host keeps DOMAIN_RATE_LIMIT (2/s: a second's worth is 2 requests, 0.5 s apart)."""

    async def go(f, r):
        await f.push([entry(f"u{i}") for i in range(10)])
        await r.hset(KEYS.rates, "h", bad)
        return await f.lease(10)

    leases = run(with_frontier(redis_url, go, default_rate=2.0))
    assert [(lease.send_in, lease.interval, lease.strict) for lease in leases] == [(0.0, 0.5, True), (0.5, 0.5, True)]


def test_send_bookings_of_one_turn_go_in_one_call_and_follow_each_other(redis_url):
    """Bookings asked for together (requests that could not leave at their lease-time booking)
    are made in one politeness_reserve call: three sends to a host at 4/s wait 0, 0.25 and 0.5 s,
    a host without a rate waits for nothing and gets no politeness state, and the host's next
    send time is past the last booking."""
    from scrapy_frontier.politeness import Politeness

    async def go(f, r):
        politeness = Politeness(r, KEYS, default_rate=4.0)
        await r.hset(KEYS.rates, "free", "0")
        script, calls = politeness._reserve, []

        async def counted(**kwargs):  # the script's calls, counted here: Redis's commandstats are the server's
            calls.append(kwargs)
            return await script(**kwargs)

        politeness._reserve = counted
        waits = await asyncio.gather(*(politeness.reserve(h) for h in ("h", "free", "h", "h")))
        seconds, micros = await r.time()
        now_ms = seconds * 1000 + micros // 1000
        return (
            waits,
            calls,
            int(await r.hget(KEYS.shard_of("h").next_send, "h")) - now_ms,
            await r.hexists(KEYS.shard_of("free").next_send, "free") + await r.exists(KEYS.politeness_prefix + "free"),
        )

    waits, calls, next_in, free_state = run(with_frontier(redis_url, go))
    assert waits[1] == 0.0 and free_state == 0
    assert [waits[0], waits[2], waits[3]] == pytest.approx([0.0, 0.25, 0.5], abs=0.02)
    assert len(calls) == 1
    assert 700 <= next_in <= 750
