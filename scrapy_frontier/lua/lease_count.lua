-- lease_count: the leases a node's lease hash holds, its mark left out (frontier_lease writes the
-- field '@' beside the leases: see there). Read by `scrapy status` and the metrics.
-- KEYS[1] a lease hash (<spider>:leases:<node>, a shard's or the start URLs')
-- Returns the count.
return redis.call('HLEN', KEYS[1]) - redis.call('HEXISTS', KEYS[1], '@')
