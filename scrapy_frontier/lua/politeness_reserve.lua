-- politeness_reserve: book sends to hosts whose requests are about to leave without a send time
-- booked at lease time that still holds (frontier_lease books those): each send time is
-- max(now, next, pause_until), and next moves on by 1 / rate (a generic cell rate algorithm with
-- a burst of one; lease-time and send-time bookings share the host's one entry in @next).
-- Every key is of one frontier shard (one hash slot on a Redis Cluster): KEYS[1] the shard's rates
-- hash (its copy of <spider>:rates); the hosts' politeness state is under ARGV[1]
-- (politeness_policy).
-- ARGV[1] politeness prefix (+ host), ARGV[2] default rate (requests/second, 0 = none), ARGV[3]
-- the shared AutoThrottle's start delay (µs; '': off), then the hosts, one per send (a host
-- named twice books two sends, one after the other)
-- Returns, per host in ARGV order, the ms to wait before sending (the times are the server's:
-- redis_time).
--! include politeness_policy
--! include redis_time
local now = redis_now_ms()
local pprefix, default_rate = ARGV[1], tonumber(ARGV[2])
local at_start = ARGV[3] ~= '' and tonumber(ARGV[3])
local waits = {}
for i = 4, #ARGV do
  local host = ARGV[i]
  local rate, next_send, pause = policy(pprefix, host, KEYS[1], default_rate, at_start)
  local t = math.max(now, next_send, pause)
  if rate > 0 then redis.call('HSET', pprefix .. '@next', host, t + math.ceil(1000 / rate)) end
  waits[#waits + 1] = t - now
end
return waits
