-- frontier_lease: take up to n requests from the hosts that are due, moving them under this
-- node's lease. Walks the due hosts, an equal share from each; a host with fewer requests than
-- its share leaves the rest to the hosts after it, and a second round fills what is still missing.
-- Politeness, shared by every worker (the rate rule: politeness_policy): a host with a rate
-- gives one request per 1/rate seconds (the host's 'next' time), a paused host (Retry-After)
-- nothing before 'pause_until', a host at its concurrency cap nothing until a lease of it ends.
-- Such a host is re-scored to the time it is due, so it never holds back the others; a host at
-- its cap is parked PARK_MS ahead, and the acknowledgement that takes it below the cap
-- (frontier_push) brings it back at once, so no call walks over capped hosts.
-- Every key is of one frontier shard (one hash slot on a Redis Cluster); times are the server's.
-- KEYS[1] the shard's hosts index (<spider>:requests), KEYS[2] this node's lease hash,
-- KEYS[3] rates hash (the shard's copy of <spider>:rates), KEYS[4] the shard's seen feed
-- ARGV[1] queue prefix (+ host = the host's queue), ARGV[2] n,
-- ARGV[3] default rate (requests/second, 0 = none), ARGV[4] concurrency cap per host (0 = none),
-- ARGV[5] politeness prefix (+ host = the host's politeness hash), ARGV[6] the last seen-feed
-- entry this node read ('': no feed; '$': none yet, start from the newest), ARGV[7] this node's
-- id, ARGV[8] feed entries to read at most
-- Returns: first, in how many ms the earliest queued host is due (0: now, -1: nothing queued),
-- so an idle worker can sleep until then instead of polling (a duration, not a time: a worker's
-- clock is never compared with the server's); then the seen feed (frontier_push): the id of the
-- last entry read ('' without a feed), k, and the k fingerprint lists that other nodes pushed
-- since ARGV[6]; then, for each host leased from, the host, how many, and its payloads.
--! include politeness_policy
--! include redis_time
--! include frontier_queue
local PARK_MS = 30000
local prefix, now, want = ARGV[1], redis_now_ms(), tonumber(ARGV[2])
local default_rate, cap, pprefix = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local hosts = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, want)
-- no live rate at all (the usual case): no HGET of the rates per host
local rates_key = redis.call('EXISTS', KEYS[3]) == 1 and KEYS[3]
-- the seen feed: what the other nodes queued since this node last looked
local feed_last, feed = ARGV[6], {}
if feed_last == '$' then
  local newest = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)
  feed_last = newest[1] and newest[1][1] or '0-0'
elseif feed_last ~= '' then
  for _, entry in ipairs(redis.call('XRANGE', KEYS[4], '(' .. feed_last, '+', 'COUNT', tonumber(ARGV[8]))) do
    feed_last = entry[1]
    local f = entry[2]
    -- fields n (node), f (fingerprints), as frontier_push writes them
    if f[2] ~= ARGV[7] then feed[#feed + 1] = f[4] end
  end
end
local out = {'', feed_last, #feed}
for _, fps in ipairs(feed) do out[#out + 1] = fps end
local head = #out
local fields = {}
local left = hosts
while want > 0 and #left > 0 do
  local next_round = {}
  for idx, host in ipairs(left) do
    local take = math.ceil(want / (#left - idx + 1))
    local rate, next_lease, pause, _, inflight = policy(pprefix .. host, rates_key, host, default_rate, 'next')
    local due = math.max(next_lease, pause)
    if due > now then
      redis.call('ZADD', KEYS[1], due, host)
      take = 0
    elseif cap > 0 and inflight >= cap then
      redis.call('ZADD', KEYS[1], now + PARK_MS, host)
      take = 0
    end
    if take > 0 then
      if rate > 0 then take = 1 end
      if cap > 0 then take = math.min(take, cap - inflight) end
      local q = prefix .. host
      local groups, got, empty = queue_pop(q, host, take)
      if got > 0 then
        out[#out + 1] = host
        out[#out + 1] = got
      end
      for _, group in ipairs(groups) do
        local value = group[1] .. '\t' .. host
        for _, payload in ipairs(group[2]) do
          fields[#fields + 1] = payload
          fields[#fields + 1] = value
          out[#out + 1] = payload
        end
      end
      want = want - got
      local held = inflight + got
      -- inflight was read above, in this same atomic call: one HSET sets it with the due time
      local ready = now
      if rate > 0 then
        ready = now + math.ceil(1000 / rate)
        redis.call('HSET', pprefix .. host, 'inflight', held, 'next', ready)
      elseif got > 0 then
        redis.call('HSET', pprefix .. host, 'inflight', held)
      end
      if cap > 0 and held >= cap then ready = math.max(ready, now + PARK_MS) end
      if empty then
        redis.call('ZREM', KEYS[1], host)
      else
        redis.call('ZADD', KEYS[1], ready, host)
        if ready <= now then next_round[#next_round + 1] = host end
      end
    end
    if want <= 0 then break end
  end
  if #next_round == #left and want > 0 and #out == head then break end
  left = next_round
end
-- every lease of the call in one HSET (unpack takes a few thousand values at most: in chunks)
for j = 1, #fields, 2000 do
  redis.call('HSET', KEYS[2], unpack(fields, j, math.min(j + 1999, #fields)))
end
queued_flush(prefix)
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local due_in = -1
if first[2] then due_in = math.max(0, tonumber(first[2]) - now) end
out[1] = tostring(due_in)
return out
