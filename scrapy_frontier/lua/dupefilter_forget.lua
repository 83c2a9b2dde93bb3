-- dupefilter_forget: let fingerprints through the dupefilter once more.
-- KEYS[1] dupefilter, KEYS[2] forgotten set (Bloom layout: a Bloom filter cannot delete)
-- ARGV[1] layout ('set', 'zset', 'bloom'), ARGV[2...] hex fingerprints
-- Returns how many the exact layouts knew (in the Bloom layout, every one counts).
local n = 0
for i = 2, #ARGV do
  if ARGV[1] == 'set' then n = n + redis.call('SREM', KEYS[1], ARGV[i])
  elseif ARGV[1] == 'zset' then n = n + redis.call('ZREM', KEYS[1], ARGV[i])
  else n = n + redis.call('SADD', KEYS[2], ARGV[i]) end
end
return n
