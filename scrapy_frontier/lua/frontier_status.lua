-- frontier_status: the counts of a crawl, for idle detection, metrics and `scrapy status`.
-- KEYS[1] slots index (<spider>:requests), KEYS[2] nodes index, KEYS[3] start URLs (list or
-- set), KEYS[4] dupefilter, KEYS[5] failed list, KEYS[6] Bloom layout hash
-- ARGV[1] queue prefix (+ host), ARGV[2] lease prefix (+ node), ARGV[3] deep (1: count every
-- host's queue, one ZCARD per host), ARGV[4] start URLs as a set (1/0)
-- Returns {hosts, queued requests (0 unless deep), leases, nodes, start URLs, fingerprints seen,
-- failed requests}.
local hosts = redis.call('ZCARD', KEYS[1])
local depth = 0
if ARGV[3] == '1' then
  for _, host in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    depth = depth + redis.call('ZCARD', ARGV[1] .. host)
  end
end
local inflight = 0
local nodes = redis.call('ZRANGE', KEYS[2], 0, -1)
for _, node in ipairs(nodes) do inflight = inflight + redis.call('HLEN', ARGV[2] .. node) end
local starts
if ARGV[4] == '1' then starts = redis.call('SCARD', KEYS[3]) else starts = redis.call('LLEN', KEYS[3]) end
local kind, seen = redis.call('TYPE', KEYS[4]).ok, 0
if kind == 'set' then seen = redis.call('SCARD', KEYS[4])
elseif kind == 'zset' then seen = redis.call('ZCARD', KEYS[4])
else seen = tonumber(redis.call('HGET', KEYS[6], 'count') or '0') end
return {hosts, depth, inflight, #nodes, starts, seen, redis.call('LLEN', KEYS[5])}
