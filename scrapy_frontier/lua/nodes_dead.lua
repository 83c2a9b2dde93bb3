-- nodes_dead: the nodes whose last heartbeat is older than a timeout, at the server's time.
-- Read only: they stay registered until their leases are back (nodes_forget), so a reclaim cut
-- off halfway is done again by the next one.
-- KEYS[1] nodes index (<spider>:nodes)
-- ARGV[1] timeout (ms)
-- Returns the node ids.
--! include redis_time
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (redis_now_ms() - tonumber(ARGV[1])))
