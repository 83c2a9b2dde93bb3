-- cache_mark_lean: the lean cache (REDIS_CACHE_ITEMS off): record that items were committed to
-- the database (fields and markers: cache_check). A bucket expires REDIS_CACHE_TTL seconds after
-- its last write.
-- KEYS[1...] the bucket of each item (one hash slot per call)
-- ARGV[1] TTL (seconds, 0 = none), then the field and the marker of each item in turn
-- Returns the number of items.
local ttl = tonumber(ARGV[1])
for i = 1, #KEYS do
  redis.call('HSET', KEYS[i], ARGV[2 * i], ARGV[2 * i + 1])
  if ttl > 0 then redis.call('EXPIRE', KEYS[i], ttl) end
end
return #KEYS
