-- frontier_push: queue new requests (skipping those the dupefilter has seen), then acknowledge
-- leases, then push dead letters, atomically and in that order: a lease is never released
-- before the requests it produced are queued.
-- Every key is of one frontier shard (one hash slot on a Redis Cluster): the requests pushed
-- are of the shard's hosts, the leases acknowledged in the shard's lease hash of this node.
-- KEYS[1] dupefilter, KEYS[2] the shard's hosts index (<spider>:requests), KEYS[3] this node's
-- lease hash, KEYS[4] failed list (unsharded; a sharded crawl pushes dead letters apart and
-- passes KEYS[2] here with n_failed 0), KEYS[5] forgotten set, KEYS[6] Bloom layout hash
-- ARGV[1] queue prefix (+ host = the host's queue),
-- ARGV[2] n_push, ARGV[3] n_ack, ARGV[4] n_failed, then
--   n_push x (fingerprint (hex; packed: '<int64>@<bucket>'; '' to skip dedup), host, score, payload),
--   n_ack x lease field, n_failed x dead-letter entry (JSON), then the last six:
--   politeness prefix (+ host = the host's politeness hash), Bloom bits prefix,
--   dedup layout ('packed', 'set', 'zset', 'bloom'), recrawl age (ms), Bloom capacity, Bloom error rate
-- The time (a new host's due time, the recrawl age) is the server's (redis_time).
-- Returns how many requests were queued.
--! include redis_time
--! include frontier_queue
local prefix = ARGV[1]
local D, FORGOTTEN, BLOOM = KEYS[1], KEYS[5], KEYS[6]
local pprefix, BITS = ARGV[#ARGV - 5], ARGV[#ARGV - 4]
local MODE, AGE, CAP0, ERR = ARGV[#ARGV - 3], tonumber(ARGV[#ARGV - 2]), tonumber(ARGV[#ARGV - 1]), tonumber(ARGV[#ARGV])
local NOW = redis_now_ms()
local now = NOW
--! include dupefilter_seen
local np, na, nf = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local added = 0
local i = 5
for _ = 1, np do
  local fp = ARGV[i]
  if fp == '' or seen_add(fp) then
    queue_add(prefix .. ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], false)
    redis.call('ZADD', KEYS[2], 'NX', now, ARGV[i + 1])
    added = added + 1
  end
  i = i + 4
end
bloom_flush()
for _ = 1, na do
  local val = redis.call('HGET', KEYS[3], ARGV[i])
  if val then
    local host = string.sub(val, string.find(val, '\t', 1, true) + 1)
    if host ~= '' then redis.call('HINCRBY', pprefix .. host, 'inflight', -1) end
    redis.call('HDEL', KEYS[3], ARGV[i])
  end
  i = i + 1
end
for _ = 1, nf do
  redis.call('LPUSH', KEYS[4], ARGV[i])
  i = i + 1
end
return added
