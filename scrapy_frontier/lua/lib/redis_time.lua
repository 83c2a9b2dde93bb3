-- redis_time: not a script of its own, included (--! include redis_time) by every script whose
-- decision depends on the time: heartbeats and the dead-node cutoff, host due times, send-time
-- booking, pauses, the recrawl age. The time is the Redis server's (TIME), never a worker's
-- clock, so workers whose clocks disagree by minutes still agree on it. Allowed in a script
-- that writes since Redis 5 (effects replication, the only mode of Redis 7).
-- Defines: redis_now_ms() -> the server's time, Unix ms (an integer), and the same as text,
-- written from TIME's digits: a number given to redis.call is formatted with '%.17g' (about as
-- costly as the command it is given to), so a script that writes the time many times (scores
-- of an index) passes the text.
local function redis_now_ms()
  local t = redis.call('TIME')
  local us = t[2]
  -- the ms: the first 3 of the 6 digits of the us (TIME writes them without leading zeros)
  local text = t[1] .. (#us == 6 and string.sub(us, 1, 3) or string.sub(string.rep('0', 6 - #us) .. us, 1, 3))
  return tonumber(text), text
end
