-- frontier_status: the counts of one frontier shard, for idle detection, metrics and `scrapy
-- status` (the caller adds the crawl-wide counts: nodes, start URLs, dead letters).
-- KEYS[1] the shard's hosts index (<spider>:requests), KEYS[2] dupefilter, KEYS[3] Bloom layout hash
-- ARGV[1] queue prefix (+ host), ARGV[2] lease prefix (+ node), ARGV[3] deep (1: the queued
-- requests too), ARGV[4...] the registered nodes
-- Returns {hosts, queued requests (0 unless deep), leases, fingerprints seen}. A deep call on a shard
-- that has queues but no count yet (<queue prefix>@queued, frontier_queue) counts every host's lists
-- once and writes the count, which the scripts keep from then on.
--! include frontier_queue
local hosts = redis.call('ZCARD', KEYS[1])
local depth = 0
if ARGV[3] == '1' then
  local counter = ARGV[1] .. '@queued'
  local kept = redis.call('GET', counter)
  if kept then
    depth = math.max(0, tonumber(kept))
  else
    for _, host in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
      depth = depth + queue_len(ARGV[1], host)
    end
    -- kept from now on, once the shard has queues: a status call writes nothing to an empty one
    if hosts > 0 then redis.call('SET', counter, depth) end
  end
end
local inflight = 0
for i = 4, #ARGV do inflight = inflight + leases_held(ARGV[2] .. ARGV[i]) end
local kind, seen = redis.call('TYPE', KEYS[2]).ok, 0
if kind == 'set' then seen = redis.call('SCARD', KEYS[2])
elseif kind == 'zset' then seen = redis.call('ZCARD', KEYS[2])
else seen = tonumber(redis.call('GET', KEYS[2] .. ':count') or redis.call('HGET', KEYS[3], 'count') or '0') end
return {hosts, depth, inflight, seen}
