-- cache_mark_stored: record that items were committed to the database.
-- KEYS[1...] cache keys (<spider>:items:cache:<sha1>)
-- ARGV[1...] the stored hash of each ('<store id>:<content hash>')
-- Returns the number of keys.
for i = 1, #KEYS do redis.call('HSET', KEYS[i], 'stored_hash', ARGV[i]) end
return #KEYS
