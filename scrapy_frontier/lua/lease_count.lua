-- lease_count: the leases a node's lease hash holds, its mark left out (frontier_queue's
-- leases_held: frontier_lease writes the field '@' beside the leases). Read by `scrapy status`
-- and the metrics.
-- KEYS[1] a lease hash (<spider>:leases:<node>, a shard's or the start URLs')
-- Returns the count.
--! include frontier_queue
return leases_held(KEYS[1])
