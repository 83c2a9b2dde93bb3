-- revisit_schedule: put pages in the shard's revisit schedule, each due a number of ms from now
-- (Redis time). A page already scheduled (the same fingerprint) is rescheduled: its entry is
-- replaced, never doubled.
-- KEYS[1] the shard's due times (sorted set: fingerprint -> due, Unix ms), KEYS[2] the shard's
-- scheduled requests (hash: fingerprint -> '<host>\t<score>\t<payload>')
-- ARGV: n x (fingerprint, ms from now, host, score (-priority, as text), payload)
-- Returns how many pages the schedule holds now.
--! include redis_time
local now = redis_now_ms()
local due, data = {}, {}
for i = 1, #ARGV, 5 do
  due[#due + 1] = now + tonumber(ARGV[i + 1])
  due[#due + 1] = ARGV[i]
  data[#data + 1] = ARGV[i]
  data[#data + 1] = ARGV[i + 2] .. '\t' .. ARGV[i + 3] .. '\t' .. ARGV[i + 4]
end
for j = 1, #due, 1000 do redis.call('ZADD', KEYS[1], unpack(due, j, math.min(j + 999, #due))) end
for j = 1, #data, 1000 do redis.call('HSET', KEYS[2], unpack(data, j, math.min(j + 999, #data))) end
return redis.call('ZCARD', KEYS[1])
