-- revisit_supersede: mark pages' fingerprints as superseded in the shard's revisit schedule
-- (`scrapy forget`, `scrapy push --now`), at the Redis time: their records scheduled before now
-- are dropped when due (lua/revisit_due.lua), and a revisit of them under way does not schedule
-- them again (lua/revisit_schedule.lua).
-- KEYS[1] the shard's superseded fingerprints (sorted set: first 8 bytes -> Unix ms)
-- ARGV the first 8 bytes of each fingerprint
-- Returns how many were marked.
--! include redis_time
local _, now_text = redis_now_ms()
local args = {}
for i = 1, #ARGV do
  args[#args + 1] = now_text
  args[#args + 1] = ARGV[i]
end
for j = 1, #args, 1000 do redis.call('ZADD', KEYS[1], unpack(args, j, math.min(j + 999, #args))) end
return #ARGV
