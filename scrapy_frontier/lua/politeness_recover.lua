-- politeness_recover: after a successful response, raise a host's slow-down factor by a step
-- (up to 1); a host back at full rate, not paused and without a Crawl-delay leaves the limited set.
-- KEYS[1] the host's politeness hash, KEYS[2] limited hosts set
-- ARGV[1] step (0-1), ARGV[2] host
-- Returns the new factor (a string).
--! include redis_time
local factor = tonumber(redis.call('HGET', KEYS[1], 'factor') or '') or 1
if factor < 1 then
  factor = math.min(1, factor + tonumber(ARGV[1]))
  redis.call('HSET', KEYS[1], 'factor', factor)
end
local pause = tonumber(redis.call('HGET', KEYS[1], 'pause_until') or '') or 0
local robots = tonumber(redis.call('HGET', KEYS[1], 'robots_delay') or '') or 0
if factor >= 1 and pause <= redis_now_ms() and robots <= 0 then redis.call('SREM', KEYS[2], ARGV[2]) end
return tostring(factor)
