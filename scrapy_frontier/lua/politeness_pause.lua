-- politeness_pause: send a host nothing, from any worker, for a while (its robots.txt unreachable,
-- RFC 9309 section 2.3.1.4), its rate untouched. A later pause already recorded stays. The host
-- joins the limited set and is published on the events channel.
-- KEYS[1] the host's politeness hash, KEYS[2] limited hosts set
-- ARGV[1] host, ARGV[2] pause (ms from now; now is the server's time), ARGV[3] events channel
-- Returns the pause's end (Unix ms, the server's time).
--! include redis_time
local now = redis_now_ms()
local until_ms = now + tonumber(ARGV[2])
local pause = tonumber(redis.call('HGET', KEYS[1], 'pause_until') or '') or 0
if until_ms > pause then redis.call('HSET', KEYS[1], 'pause_until', until_ms) else until_ms = pause end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('PUBLISH', ARGV[3], ARGV[1])
return until_ms
