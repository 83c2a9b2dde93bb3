-- frontier_push: queue new requests (those the dupefilter has not seen), then acknowledge leases,
-- then push dead letters, atomically and in that order: no lease ends before its children are queued.
-- Every key but KEYS[8] is of one frontier shard (one hash slot on a Redis Cluster).
-- KEYS[1] dupefilter, KEYS[2] the shard's hosts index (<spider>:requests), KEYS[3] this node's lease
-- hash, KEYS[4] failed list (a sharded crawl pushes dead letters apart: KEYS[2] here, n_failed 0),
-- KEYS[5] forgotten set, KEYS[6] Bloom layout hash, KEYS[7] the shard's seen feed (a stream),
-- KEYS[8] (optional, only on a Redis that is not a cluster) the nodes index (<spider>:nodes): while
-- it holds one node, the seen feed is not written
-- ARGV[1] queue prefix (+ host = the host's queue), ARGV[2] n_groups, ARGV[3] n_ack_groups,
-- ARGV[4] n_failed, then
--   n_groups x (host, score, k, then k x (dedup key, member, payload)): the requests of one host and
--     priority, oldest first; (dedup key, member) is, packed, a bucket's key and the fingerprint's
--     int64, in the other layouts (hex fingerprint, ''), and ('', '') skips dedup;
--   n_ack_groups x (host ('' for start URLs' leases), k, then k lease fields), one group a host;
--   n_failed x dead-letter entry (JSON);
--   the shared AutoThrottle's latency samples: n_at_hosts, and when it is not 0, the target
--   concurrency, the minimum, maximum and start delays (µs), then n_at_hosts x (host, k, then
--   k samples, oldest first: a response's download latency in µs, as -1 - latency for a response
--   that is not a 200); then the last ten:
--   politeness prefix (+ host), Bloom bits prefix, dedup layout ('packed', 'set', 'zset', 'bloom'),
--   recrawl age (ms), Bloom capacity, Bloom error rate, concurrency cap per host (0 = none), report
--   duplicates (1/0), this node's id, seen feed length (entries kept, about; 0 = no feed)
-- The seen feed gets one entry a call: n = node id, f = the new fingerprints (packed members, or
-- hex) joined by ','.
-- Placeholders SEGMENT_BITS (dupefilter_seen) and QUEUE_ORDER: empty, or the frontier_queue_lifo
-- library for a last-in, first-out crawl.
-- Returns how many requests were queued; with report 1, {queued, then the ARGV index of each
-- duplicate's payload}.
--! include redis_time
--! include frontier_queue
@QUEUE_ORDER@
local prefix = ARGV[1]
local D, FORGOTTEN, BLOOM = KEYS[1], KEYS[5], KEYS[6]
local pprefix, BITS = ARGV[#ARGV - 9], ARGV[#ARGV - 8]
local MODE, AGE = ARGV[#ARGV - 7], tonumber(ARGV[#ARGV - 6])
local CAP0, ERR = tonumber(ARGV[#ARGV - 5]), tonumber(ARGV[#ARGV - 4])
local CAP = tonumber(ARGV[#ARGV - 3])
local duplicates = ARGV[#ARGV - 2] == '1' and {} or nil
local NODE, FEED = ARGV[#ARGV - 1], ARGV[#ARGV]
local fed = FEED ~= '0' and {} or nil
-- the server's time, read when first needed: most pushes of a crawl under way need none
local NOW, now_text = false, false
local function clock()
  if not now_text then NOW, now_text = redis_now_ms() end
  return now_text
end
if MODE == 'zset' then clock() end
--! include dupefilter_seen
local ng, na, nf = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local packed = MODE == 'packed'
local added, nfed = 0, 0
local argv, call = ARGV, redis.call
local i = 5
for _ = 1, ng do
  local host, score, k = argv[i], argv[i + 1], int_of(argv[i + 2])
  i = i + 3
  local new, nnew = {}, 0
  for _ = 1, k do
    -- fresh: new to the dupefilter (or not checked); fp: what the seen feed carries (false: nothing)
    local a = argv[i]
    local fresh, fp
    if a == '' then
      fresh, fp = true, false
    elseif packed then
      -- seen_add's packed check, inline: one SADD of the member to its bucket a
      fp = argv[i + 1]
      fresh = call('SADD', a, fp) == 1
      if fresh then packed_added = packed_added + 1 end
    else
      fresh, fp = seen_add(a), a
    end
    if fresh then
      nnew = nnew + 1
      new[nnew] = argv[i + 2]
      if fp and fed then
        nfed = nfed + 1
        fed[nfed] = fp
      end
    elseif duplicates then
      duplicates[#duplicates + 1] = i + 2
    end
    i = i + 3
  end
  if nnew > 0 then
    if queue_add_all(prefix, host, score, new) then call('ZADD', KEYS[2], 'NX', clock(), host) end
    added = added + nnew
  end
end
bloom_flush()
queued_flush(prefix)
if nfed > 0 and not (KEYS[8] and call('ZCARD', KEYS[8]) < 2) then
  call('XADD', KEYS[7], 'MAXLEN', '~', FEED, '*', 'n', NODE, 'f', table.concat(fed, ','))
end
-- the acknowledgements: one HDEL (and, for several hosts, one HMGET first: a lease reclaimed
-- meanwhile is gone and ends nothing), then the in-flight counts in one HMGET and one HSET
local INFLIGHT = pprefix .. '@inflight'
local ended = {}
if na == 1 then
  -- one host's leases (most pushes: the page's own lease): one HDEL straight from ARGV
  local host, k = argv[i], int_of(argv[i + 1])
  i = i + 2
  local n = 0
  for j = i, i + k - 1, 1000 do n = n + call('HDEL', KEYS[3], unpack(argv, j, math.min(j + 999, i + k - 1))) end
  if host ~= '' and n > 0 then ended[host] = n end
  i = i + k
elseif na > 1 then
  local named, owner, nnamed = {}, {}, 0
  for _ = 1, na do
    local host, k = argv[i], int_of(argv[i + 1])
    i = i + 2
    for j = i, i + k - 1 do
      nnamed = nnamed + 1
      named[nnamed], owner[nnamed] = argv[j], host
    end
    i = i + k
  end
  for j = 1, nnamed, 1000 do
    local vals = call('HMGET', KEYS[3], unpack(named, j, math.min(j + 999, nnamed)))
    for k = 1, #vals do
      local h = owner[j + k - 1]
      if vals[k] and h ~= '' then ended[h] = (ended[h] or 0) + 1 end
    end
  end
  for j = 1, nnamed, 1000 do call('HDEL', KEYS[3], unpack(named, j, math.min(j + 999, nnamed))) end
end
local hs = {}
for h in pairs(ended) do hs[#hs + 1] = h end
if #hs > 0 then
  local counts, zeroed, unparked = {}, {}, {}
  for j = 1, #hs, 1000 do
    local part = #hs <= 1000 and hs or {unpack(hs, j, math.min(j + 999, #hs))}
    local was = call('HMGET', INFLIGHT, unpack(part))
    for k, h in ipairs(part) do
      local before = was[k] and int_of(was[k]) or 0
      local left = before - ended[h]
      if left > 0 then
        counts[#counts + 1] = h
        counts[#counts + 1] = int_text[left]
      else
        zeroed[#zeroed + 1] = h
      end
      if CAP > 0 and left < CAP and before >= CAP then unparked[#unparked + 1] = h end
    end
  end
  for j = 1, #counts, 2000 do redis.call('HSET', INFLIGHT, unpack(counts, j, math.min(j + 1999, #counts))) end
  for j = 1, #zeroed, 1000 do redis.call('HDEL', INFLIGHT, unpack(zeroed, j, math.min(j + 999, #zeroed))) end
  -- below the cap again: back in the hosts index (frontier_lease parked it), due when its
  -- politeness lets it send next (a rate's booking, a pause), else now: a lease that found it
  -- due too early would only read its state and park it again
  if #unparked > 0 then
    clock()
    local back = {}
    for j = 1, #unparked, 1000 do
      local part = #unparked <= 1000 and unparked or {unpack(unparked, j, math.min(j + 999, #unparked))}
      local nexts = call('HMGET', pprefix .. '@next', unpack(part))
      local limited = call('SMISMEMBER', pprefix .. '@limited', unpack(part))
      for k, h in ipairs(part) do
        local pause = limited[k] == 1 and call('HGET', pprefix .. h, 'pause_until')
        local due = math.max(NOW, tonumber(nexts[k] or '') or 0, tonumber(pause or '') or 0)
        back[#back + 1] = due == NOW and now_text or string.format('%d', due)
        back[#back + 1] = h
      end
    end
    for j = 1, #back, 2000 do redis.call('ZADD', KEYS[2], 'XX', 'LT', unpack(back, j, math.min(j + 1999, #back))) end
  end
end
for _ = 1, nf do
  redis.call('LPUSH', KEYS[4], ARGV[i])
  i = i + 1
end
-- AutoThrottle's delay rule (Scrapy's scrapy.extensions.throttle.AutoThrottle._adjust_delay), once
-- per response of any worker, on the host's delay for the whole crawl (its entry in @at_delay, µs): the mean
-- of the delay and latency / target, or the latter when larger, within the bounds; a response
-- that is not a 200 may raise the delay, never lower it
local nat = int_of(argv[i])
if nat > 0 then
  local target, lo, hi, start = tonumber(argv[i + 1]), tonumber(argv[i + 2]), tonumber(argv[i + 3]), tonumber(argv[i + 4])
  i = i + 5
  -- each host's delay and last latency, read for every host in one HMGET and written in one HSET
  -- each (the HASH_MARK keeps the hashes in the hashtable encoding: a listpack's HMGET is a scan)
  local hosts, first = {}, {}
  local j = i
  for n = 1, nat do
    hosts[n], first[n] = argv[j], j
    j = j + 2 + int_of(argv[j + 1])
  end
  i = j
  local AT_DELAY, LATENCY = pprefix .. '@at_delay', pprefix .. '@latency'
  local delays, latencies = {}, {}
  for lo_n = 1, nat, 1000 do
    local hi_n = math.min(lo_n + 999, nat)
    local was = call('HMGET', AT_DELAY, unpack(hosts, lo_n, hi_n))
    for n = lo_n, hi_n do
      local delay = tonumber(was[n - lo_n + 1] or '') or start
      local at = first[n]
      local last = at + 1 + int_of(argv[at + 1])
      for s = at + 2, last do
        local sample = tonumber(argv[s])
        local ok = sample >= 0
        local want = (ok and sample or -1 - sample) / target
        -- max(want, (delay + want) / 2) within [lo, hi], with no call out of Lua
        local new = (delay + want) / 2
        if want > new then new = want end
        if new < lo then new = lo end
        if new > hi then new = hi end
        if ok or new > delay then delay = new end
      end
      delays[#delays + 1], delays[#delays + 2] = hosts[n], string.format('%d', math.floor(delay + 0.5))
      -- the last sample as the worker wrote it: no number formatted
      latencies[#latencies + 1], latencies[#latencies + 2] = hosts[n], argv[last]
    end
    call('HSET', AT_DELAY, HASH_MARK, HASH_MARK_VALUE, unpack(delays))
    call('HSET', LATENCY, HASH_MARK, HASH_MARK_VALUE, unpack(latencies))
    delays, latencies = {}, {}
  end
end
if duplicates then
  table.insert(duplicates, 1, added)
  return duplicates
end
return added
