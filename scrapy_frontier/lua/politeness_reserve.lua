-- politeness_reserve: book the next send to a host, just before the request is sent: the send
-- time is max(now, next_send, pause_until), and next_send moves on by 1 / rate (a generic cell
-- rate algorithm with a burst of one).
-- KEYS[1] the host's politeness hash, KEYS[2] rates hash (the shard's copy of <spider>:rates)
-- ARGV[1] host, ARGV[2] default rate (requests/second, 0 = none)
-- Returns the ms to wait before sending (the times are the server's: redis_time).
--! include politeness_policy
--! include redis_time
local now = redis_now_ms()
local rate, next_send, pause = policy(KEYS[1], KEYS[2], ARGV[1], tonumber(ARGV[2]), 'next_send')
local t = math.max(now, next_send, pause)
if rate > 0 then redis.call('HSET', KEYS[1], 'next_send', t + math.ceil(1000 / rate)) end
return t - now
