-- redis_time (library): the Redis server's time, never a worker's clock, so that workers whose
-- clocks disagree still agree on every due time, heartbeat and recrawl age.
-- Defines: redis_now_ms() -> the server's time (TIME) in Unix ms, as an integer and as its
-- decimal text (pass the text to redis.call: Redis formats a number with '%.17g' each time).
local function redis_now_ms()
  local t = redis.call('TIME')
  local us = t[2]
  -- the ms: the first 3 of the 6 digits of the us (TIME writes them without leading zeros)
  local text = t[1] .. (#us == 6 and string.sub(us, 1, 3) or string.sub(string.rep('0', 6 - #us) .. us, 1, 3))
  return tonumber(text), text
end
