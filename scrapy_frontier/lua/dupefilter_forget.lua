-- dupefilter_forget: let fingerprints through the dupefilter once more.
-- KEYS[1] dupefilter, KEYS[2] forgotten set (Bloom layout: a Bloom filter cannot delete)
-- ARGV[1] layout ('packed', 'set', 'zset', 'bloom'), ARGV[2...] hex fingerprints (packed:
-- '<int64>@<bucket>', removed from their bucket)
-- Returns how many the exact layouts knew (in the Bloom layout, every one counts).
local n = 0
for i = 2, #ARGV do
  if ARGV[1] == 'packed' then
    local at = string.find(ARGV[i], '@', 1, true)
    local gone = redis.call('SREM', KEYS[1] .. ':' .. string.sub(ARGV[i], at + 1), string.sub(ARGV[i], 1, at - 1))
    if gone == 1 then redis.call('DECR', KEYS[1] .. ':count') end
    n = n + gone
  elseif ARGV[1] == 'set' then n = n + redis.call('SREM', KEYS[1], ARGV[i])
  elseif ARGV[1] == 'zset' then n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  else n = n + redis.call('SADD', KEYS[2], ARGV[i]) end
end
return n
