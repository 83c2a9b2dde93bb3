-- nodes_forget: drop from the registry the given nodes that are still silent for longer than
-- the timeout (one that beat again meanwhile stays: it rejoins, see scrapy_frontier.nodes).
-- KEYS[1] nodes index (<spider>:nodes)
-- ARGV[1] timeout (ms), ARGV[2...] node ids
-- Returns the node ids dropped.
--! include redis_time
local cutoff = redis_now_ms() - tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV do
  local beat = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if beat and tonumber(beat) < cutoff then
    redis.call('ZREM', KEYS[1], ARGV[i])
    out[#out + 1] = ARGV[i]
  end
end
return out
