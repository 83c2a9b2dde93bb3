-- revisit_count: a shard's revisit schedule at a glance (scrapy status, the metrics).
-- KEYS[1] the shard's wheel, KEYS[2] its meta hash (lib/revisit_wheel.lua), KEYS[3] the former
-- layout's due times (sorted set: fingerprint -> due, Unix ms)
-- Returns {pages scheduled, pages due now (Redis time), ms the earliest is overdue (negative:
-- due in that many ms; 0 with nothing scheduled)}.
--! include redis_time
local now, now_text = redis_now_ms()
local scheduled = tonumber(redis.call('HGET', KEYS[2], 'n') or '0') + redis.call('ZCARD', KEYS[3])
local due = redis.call('ZCOUNT', KEYS[3], '-inf', now_text)
local parts = redis.call('ZRANGE', KEYS[1], '-inf', now_text, 'BYSCORE')
for j = 1, #parts, 1000 do
  local names = {}
  for k = j, math.min(j + 999, #parts) do names[#names + 1] = 'c:' .. parts[k] end
  for _, c in ipairs(redis.call('HMGET', KEYS[2], unpack(names))) do due = due + tonumber(c or '0') end
end
local late, earliest = 0, nil
for _, key in ipairs({KEYS[1], KEYS[3]}) do
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first > 0 and (not earliest or tonumber(first[2]) < earliest) then earliest = tonumber(first[2]) end
end
if earliest then late = now - earliest end
return {scheduled, due, late}
