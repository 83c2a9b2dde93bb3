#!lua flags=allow-oom
-- nodes_beat: one heartbeat of a node, at the server's time (redis_time): workers whose clocks
-- disagree by minutes never see each other as dead.
-- KEYS[1] nodes index (<spider>:nodes, score = last heartbeat, Unix ms)
-- ARGV[1] node id
-- allow-oom (the shebang, Redis 7): it runs when Redis is at maxmemory, so that no live node is
-- taken for dead while Redis refuses writes; it rewrites the score of a registered node (memory
-- stays the same) and adds one member for a joining node.
-- Returns {1 if the node was not registered (joining, or declared dead meanwhile), now (Unix ms)}.
--! include redis_time
local now = redis_now_ms()
return {redis.call('ZADD', KEYS[1], now, ARGV[1]), now}
