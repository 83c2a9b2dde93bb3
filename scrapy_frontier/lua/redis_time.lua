-- redis_time: not a script of its own, included (--! include redis_time) by every script whose
-- decision depends on the time: heartbeats and the dead-node cutoff, host due times, send-time
-- booking, pauses, the recrawl age. The time is the Redis server's (TIME), never a worker's
-- clock, so workers whose clocks disagree by minutes still agree on it. Allowed in a script
-- that writes since Redis 5 (effects replication, the only mode of Redis 7).
-- Defines: redis_now_ms() -> the server's time, Unix ms (an integer).
local function redis_now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
