-- hash_set_if_exists: set a field of a hash only while the hash exists (a node's info hash,
-- <spider>:nodes:<node>: the heartbeat owns it and its TTL; an HSET after it expired would
-- leave it forever).
-- KEYS[1] the hash
-- ARGV[1] field, ARGV[2] value
-- Returns HSET's answer (1 new field, 0 updated), or -1 when the hash does not exist.
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return -1
