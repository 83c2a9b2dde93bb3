-- cache_put: write a batch of items to the write-through cache (and to the items list).
-- KEYS[1] items list (<spider>:items), KEYS[2...] one cache key per item
-- (<spider>:items:cache:<sha1>, a hash of content_hash, item, stored_hash)
-- ARGV[1] TTL (seconds, 0 = none), ARGV[2] push to the items list (1/0), then the content hash
-- and the item JSON of each item in turn
-- Returns, per item, the content hash last confirmed as stored in the database (stored_hash,
-- '<store id>:<content hash>'), or nil.
local ttl = tonumber(ARGV[1])
local push = ARGV[2] == '1'
local out = {}
for i = 2, #KEYS do
  local key = KEYS[i]
  local hash, item = ARGV[2 * i - 1], ARGV[2 * i]
  out[i - 1] = redis.call('HGET', key, 'stored_hash')
  redis.call('HSET', key, 'content_hash', hash, 'item', item)
  if ttl > 0 then redis.call('EXPIRE', key, ttl) end
  if push then redis.call('RPUSH', KEYS[1], item) end
end
return out
