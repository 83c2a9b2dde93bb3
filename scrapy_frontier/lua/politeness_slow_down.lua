-- politeness_slow_down: halve a host's rate for every worker (after a 429 or 503), down to a
-- minimum factor; a host without a rate gets a base rate first. With a pause, the host gets
-- nothing before then. The host joins the limited set and is published on the events channel.
-- KEYS[1] the host's politeness hash, KEYS[2] rates hash, KEYS[3] limited hosts set
-- ARGV[1] host, ARGV[2] default rate (requests/second), ARGV[3] minimum factor, ARGV[4] pause
-- (ms from now, 0 = none; now is the server's time), ARGV[5] base rate for a host that had no
-- rate (requests/second), ARGV[6] events channel
-- Returns the new factor (a string).
--! include politeness_policy
--! include redis_time
local now = redis_now_ms()
local live = rate_num(redis.call('HGET', KEYS[2], ARGV[1]))
local rate, _, pause, factor = policy_of(KEYS[1], live, tonumber(ARGV[2]), false, false, false)
factor = math.max(tonumber(ARGV[3]), factor / 2)
redis.call('HSET', KEYS[1], 'factor', factor)
if rate <= 0 then redis.call('HSETNX', KEYS[1], 'base_rate', ARGV[5]) end
local wait = tonumber(ARGV[4])
if wait > 0 and now + wait > pause then redis.call('HSET', KEYS[1], 'pause_until', now + wait) end
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('PUBLISH', ARGV[6], ARGV[1])
return tostring(factor)
