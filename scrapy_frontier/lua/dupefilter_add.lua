-- dupefilter_add: check and record fingerprints, outside the frontier's push (the forget
-- command, benchmarks, tests).
-- KEYS[1] dupefilter, KEYS[2] forgotten set, KEYS[3] Bloom layout hash
-- ARGV[1] layout ('packed', 'set', 'zset', 'bloom'), ARGV[2] now (Unix ms; 0: the server's time, as the
-- frontier's push always uses; tests give one), ARGV[3] recrawl age (ms),
-- ARGV[4] first Bloom filter's capacity, ARGV[5] its error rate, ARGV[6] Bloom bits prefix,
-- ARGV[7...] hex fingerprints
-- Returns, per fingerprint in order, 1 (new, now recorded) or 0 (seen before).
local D, FORGOTTEN, BLOOM = KEYS[1], KEYS[2], KEYS[3]
--! include redis_time
local MODE, NOW, AGE, CAP0, ERR = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local BITS = ARGV[6]
if NOW <= 0 then NOW = redis_now_ms() end
--! include dupefilter_seen
local out = {}
for i = 7, #ARGV do out[#out + 1] = seen_add(ARGV[i]) and 1 or 0 end
bloom_flush()
return out
