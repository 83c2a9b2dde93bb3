#!lua flags=allow-oom
-- frontier_restore: put every lease of some lease hashes (a node leaving, or nodes found dead) back
-- where it came from, in the order it was taken: a request at the front of its host's queue, a raw
-- start URL in the start URLs; the hashes are deleted.
-- The keys are of one hash slot: a shard's index and lease hashes (KEYS[2] = KEYS[1]), or, in a
-- sharded crawl, the start URLs and start-URL lease hashes.
-- KEYS[1] the shard's hosts index (<spider>:requests), KEYS[2] start URLs (list or set),
-- KEYS[3...] lease hashes
-- ARGV[1] queue prefix (+ host), ARGV[2] politeness prefix (+ host), ARGV[3] start URLs as a
-- set (1/0), ARGV[4] lease field prefix of a raw start URL
-- Returns how many leases were restored.
--! include redis_time
--! include frontier_queue
local now = redis_now_ms()
local prefix, pprefix, as_set, start_prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local restored = 0
-- the order a lease was taken in, from its lease id: {call, place, index in the hash}; a start
-- URL's lease has no lease id and keeps the hash's order (a hashtable's: none in particular)
local function taken_at(member, j)
  local call, place = string.match(member, '^(%x+)%.(%d+)\t')
  if call then return {tonumber(call, 16), tonumber(place), j} end
  return {-1, 0, j}
end
local function before(a, b)
  if a.at[1] ~= b.at[1] then return a.at[1] < b.at[1] end
  if a.at[2] ~= b.at[2] then return a.at[2] < b.at[2] end
  return a.at[3] < b.at[3]
end
for k = 3, #KEYS do
  local all = redis.call('HGETALL', KEYS[k])
  local leases = {}
  for j = 1, #all - 1, 2 do
    if all[j] ~= HASH_MARK then leases[#leases + 1] = {member = all[j], val = all[j + 1], at = taken_at(all[j], j)} end
  end
  table.sort(leases, before)
  for j = #leases, 1, -1 do
    local member = leases[j].member
    local score, host, payload = lease_of(member, leases[j].val)
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
