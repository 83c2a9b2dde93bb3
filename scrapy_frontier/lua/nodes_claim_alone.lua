-- nodes_claim_alone: register a node that starts a crawl alone (SCHEDULER_FLUSH_ON_START), at
-- the server's time, only when no live node is registered: a second worker starting at the same
-- moment then finds this one live and clears nothing. Dead nodes are dropped from the registry:
-- the caller clears what they held.
-- KEYS[1] nodes index (<spider>:nodes, score = last heartbeat, Unix ms)
-- ARGV[1] node timeout (ms)
-- ARGV[2] node id
-- Returns {live nodes (0: registered alone), the dropped dead nodes' ids}.
--! include redis_time
local now = redis_now_ms()
local live = redis.call('ZCOUNT', KEYS[1], now - tonumber(ARGV[1]), '+inf')
if live > 0 then
    return {live, {}}
end
local dead = redis.call('ZRANGE', KEYS[1], 0, -1)
redis.call('DEL', KEYS[1])
redis.call('ZADD', KEYS[1], now, ARGV[2])
return {0, dead}
