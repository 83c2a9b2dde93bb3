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
--   n_ack x (host of the lease ('' for a start URL's, '?' if unknown: read from the lease), lease field),
--   n_failed x dead-letter entry (JSON), then the last seven:
--   politeness prefix (+ host = the host's politeness hash), Bloom bits prefix,
--   dedup layout ('packed', 'set', 'zset', 'bloom'), recrawl age (ms), Bloom capacity, Bloom
--   error rate, concurrency cap per host (0 = none)
-- An acknowledgement lowers its host's in-flight count once per host and call; the one that takes
-- a host below its cap brings it back in the hosts index now (frontier_lease parked it).
-- The time (a new host's due time, the recrawl age) is the server's (redis_time).
-- Returns how many requests were queued.
--! include redis_time
--! include frontier_queue
local prefix = ARGV[1]
local D, FORGOTTEN, BLOOM = KEYS[1], KEYS[5], KEYS[6]
local pprefix, BITS = ARGV[#ARGV - 6], ARGV[#ARGV - 5]
local MODE, AGE, CAP0, ERR = ARGV[#ARGV - 4], tonumber(ARGV[#ARGV - 3]), tonumber(ARGV[#ARGV - 2]), tonumber(ARGV[#ARGV - 1])
local CAP = tonumber(ARGV[#ARGV])
local NOW = redis_now_ms()
local now = NOW
--! include dupefilter_seen
local np, na, nf = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local added = 0
local i = 5
for _ = 1, np do
  local fp = ARGV[i]
  if fp == '' or seen_add(fp) then
    if queue_add(prefix .. ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], false) then
      redis.call('ZADD', KEYS[2], 'NX', now, ARGV[i + 1])
    end
    added = added + 1
  end
  i = i + 4
end
bloom_flush()
queued_flush(prefix)
local ended, order = {}, {}
for _ = 1, na do
  local host, field = ARGV[i], ARGV[i + 1]
  if host == '?' then
    local val = redis.call('HGET', KEYS[3], field)
    host = val and string.sub(val, string.find(val, '\t', 1, true) + 1)
  end
  if host and redis.call('HDEL', KEYS[3], field) == 1 and host ~= '' then
    if not ended[host] then ended[host] = 0; order[#order + 1] = host end
    ended[host] = ended[host] + 1
  end
  i = i + 2
end
for _, host in ipairs(order) do
  local k = ended[host]
  local left = redis.call('HINCRBY', pprefix .. host, 'inflight', -k)
  if CAP > 0 and left < CAP and left + k >= CAP then redis.call('ZADD', KEYS[2], 'XX', 'LT', now, host) end
end
for _ = 1, nf do
  redis.call('LPUSH', KEYS[4], ARGV[i])
  i = i + 1
end
return added
