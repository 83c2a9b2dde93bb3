-- frontier_unlease: give back some of this node's leases (requests it took but will not start, or
-- leases it does not know it holds: a lease call whose reply was lost) to where they came from: a
-- request to its host's queue, a raw start URL to the start URLs.
-- The keys are of one hash slot: a shard's index and lease hash (KEYS[3] = KEYS[1]), or, in a
-- sharded crawl, the start URLs and this node's start-URL lease hash.
-- KEYS[1] the shard's hosts index (<spider>:requests), KEYS[2] the lease hash, KEYS[3] start
-- URLs (list or set)
-- ARGV[1] queue prefix (+ host), ARGV[2] politeness prefix (+ host), ARGV[3] lease field prefix
-- of a raw start URL, ARGV[4] start URLs as a set (1/0), ARGV[5...] lease fields
-- Returns how many were leased and given back. Fields go back last first, each to the front of its
-- list, so that fields given in the order they were taken are served in it again.
--! include redis_time
--! include frontier_queue
local now = redis_now_ms()
local n = 0
local start_prefix = ARGV[3]
for i = #ARGV, 5, -1 do
  local val = redis.call('HGET', KEYS[2], ARGV[i])
  if val then
    local score, host, payload = lease_of(ARGV[i], val)
    if host == '' then
      local raw = string.sub(ARGV[i], #start_prefix + 1)
      if ARGV[4] == '1' then redis.call('SADD', KEYS[3], raw) else redis.call('RPUSH', KEYS[3], raw) end
    else
      queue_add(ARGV[1], host, score, payload, true)
      redis.call('ZADD', KEYS[1], 'LT', now, host)  -- LT: also a host parked at its cap (frontier_lease)
      inflight_end(ARGV[2], host)
    end
    redis.call('HDEL', KEYS[2], ARGV[i])
    n = n + 1
  end
end
queued_flush(ARGV[1])
return n
