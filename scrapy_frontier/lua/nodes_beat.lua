#!lua flags=allow-oom
-- nodes_beat: one heartbeat of a node, at the server's time (redis_time). It runs when Redis is at
-- maxmemory (allow-oom), so that no live node is taken for dead while Redis refuses writes.
-- KEYS[1] nodes index (<spider>:nodes, score = last heartbeat, Unix ms)
-- ARGV[1] node id
-- Returns {1 if the node was not registered (joining, or declared dead meanwhile), now (Unix ms),
-- the nodes registered (this one included)}.
--! include redis_time
local now = redis_now_ms()
return {redis.call('ZADD', KEYS[1], now, ARGV[1]), now, redis.call('ZCARD', KEYS[1])}
