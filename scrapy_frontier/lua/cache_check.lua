-- cache_check: the lean cache (REDIS_CACHE_ITEMS off): read the stored markers of a batch of
-- items. An item's entry is one field of a bucket hash, the field 10 bytes of the SHA-1 of its
-- unique key, the value 8 bytes of the SHA-1 of '<store id>:<content hash>' last committed to
-- the database (cache_mark_lean writes it); nothing else is kept.
-- KEYS[1...] the bucket of each item (<spider>:items:cache:@<n>, one hash slot per call)
-- ARGV[1...] the field of each item
-- Returns, per item, the marker, or nil.
local out = {}
for i = 1, #KEYS do out[i] = redis.call('HGET', KEYS[i], ARGV[i]) end
return out
