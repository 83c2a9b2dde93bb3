-- revisit_schedule: put pages in the shard's revisit schedule, each due a number of ms from now
-- (Redis time). A page already scheduled (the same fingerprint) is rescheduled: its entry is
-- replaced, never doubled. A page `scrapy forget` took out of the schedule while its revisit was
-- queued or in flight (its fingerprint in KEYS[3]) is not scheduled again by that revisit; a
-- first fetch of it is.
-- KEYS[1] the shard's due times (sorted set: fingerprint -> due, Unix ms), KEYS[2] the shard's
-- scheduled requests (hash: fingerprint -> '<host>\t<score>\t<payload>'), KEYS[3] the shard's
-- forgotten revisits (set of fingerprints)
-- ARGV: n x (fingerprint, ms from now, host, score (-priority, as text), payload, revisit: '1' for
-- a page that was scheduled before this fetch, '0' for its first fetch)
-- Returns how many pages the schedule holds now.
--! include redis_time
local now = redis_now_ms()
local due, data = {}, {}
for i = 1, #ARGV, 6 do
  local fp = ARGV[i]
  local forgotten = redis.call('SREM', KEYS[3], fp) == 1
  if not (forgotten and ARGV[i + 5] == '1') then
    due[#due + 1] = now + tonumber(ARGV[i + 1])
    due[#due + 1] = fp
    data[#data + 1] = fp
    data[#data + 1] = ARGV[i + 2] .. '\t' .. ARGV[i + 3] .. '\t' .. ARGV[i + 4]
  end
end
for j = 1, #due, 1000 do redis.call('ZADD', KEYS[1], unpack(due, j, math.min(j + 999, #due))) end
for j = 1, #data, 1000 do redis.call('HSET', KEYS[2], unpack(data, j, math.min(j + 999, #data))) end
return redis.call('ZCARD', KEYS[1])
