-- frontier_restore: put every lease of some lease hashes (a node leaving, or nodes found dead)
-- back where it came from: a request in its host's queue, a raw start URL in the start URLs;
-- the hashes are deleted. The keys are of one hash slot: a shard's index and lease hashes
-- (KEYS[2] = KEYS[1]), or, in a sharded crawl, the start URLs and start-URL lease hashes.
-- KEYS[1] the shard's hosts index (<spider>:requests), KEYS[2] start URLs (list or set),
-- KEYS[3...] lease hashes
-- ARGV[1] queue prefix (+ host), ARGV[2] politeness prefix (+ host), ARGV[3] start URLs as a
-- set (1/0), ARGV[4] lease field prefix of a raw start URL
-- Returns how many leases were restored. Leases are put back last first, each to the front of
-- its list: a lease hash small enough for Redis's listpack keeps the order its leases were
-- written in (frontier_lease: the order they were taken), so they are served in it again.
--! include redis_time
--! include frontier_queue
local now = redis_now_ms()
local prefix, pprefix, as_set, start_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local restored = 0
for k = 3, #KEYS do
  local all = redis.call('HGETALL', KEYS[k])
  for j = #all - 1, 1, -2 do
    local member, val = all[j], all[j + 1]
    local score, host, payload = lease_of(member, val)
    if host == '' then
      local raw = string.sub(member, #start_prefix + 1)
      if as_set == '1' then redis.call('SADD', KEYS[2], raw) else redis.call('RPUSH', KEYS[2], raw) end
    else
      queue_add(prefix, host, score, payload, true)
      redis.call('ZADD', KEYS[1], 'LT', now, host)  -- LT: also a host parked at its cap (frontier_lease)
      inflight_end(pprefix, host)
    end
    restored = restored + 1
  end
  redis.call('DEL', KEYS[k])
end
queued_flush(prefix)
return restored
