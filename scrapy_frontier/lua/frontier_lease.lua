-- frontier_lease: take up to n requests from the hosts that are due, under this node's lease, an
-- equal share from each, within every host's politeness (politeness_policy) and concurrency cap.
-- Every key but KEYS[5] is of one frontier shard (one hash slot on a Redis Cluster).
-- KEYS[1] the shard's hosts index (<spider>:requests, score = when the host is due, Unix ms),
-- KEYS[2] this node's lease hash, KEYS[3] rates hash (the shard's copy of <spider>:rates),
-- KEYS[4] the shard's seen feed, KEYS[5] (optional, only on a Redis that is not a cluster) the nodes
-- index (<spider>:nodes): while it holds one node, the feed is not read
-- ARGV[1] queue prefix (+ host), ARGV[2] n, ARGV[3] default rate (requests/second, 0 = none),
-- ARGV[4] concurrency cap per host (0 = none), ARGV[5] politeness prefix (+ host), ARGV[6] the last
-- seen-feed entry this node read ('': no feed; '$': none yet, start from the newest), ARGV[7] this
-- node's id, ARGV[8] feed entries to read at most, ARGV[9] this call's lease id prefix (unique among
-- this node's calls: its count of calls, in hexadecimal, and a '.'), ARGV[10] the shared
-- AutoThrottle's start delay (µs; '': off; with it on, every host has a rate), ARGV[11] its
-- target concurrency
-- A host with a rate (politeness_policy) gives at most the requests it may send in the next
-- HORIZON_MS, one every 1 / rate seconds from now, and when AutoThrottle sets the rate, at most
-- its target concurrency (about one latency's worth: a delay that grows applies within one
-- latency): their send times are booked here (the host's entry in @next moves past the last, one
-- HSET for the call), so a worker sends them without another call (politeness_reserve books afresh
-- one that could not leave on time).
-- Returns {due_in, feed_last, k, then k fingerprint lists, then for each host and priority leased
-- from: host, score, m, pace, then m payloads as stored}:
--   due_in: in how many ms the earliest queued host is due (0: now, and always after a call that
--     leased; -1: nothing queued): a duration, as a worker's clock is never compared with the server's
--   feed_last: the id of the last seen-feed entry read ('' without a feed); the k lists: the
--     fingerprints that other nodes pushed since ARGV[6] (as frontier_push writes them)
--   pace: '0' for a host without a rate, else the µs between two of its sends (the n-th payload of
--     the host in the reply, over its priorities, may be sent (n - 1) x pace µs from now), followed
--     by 'a' when only AutoThrottle sets its rate (politeness_policy's strict): then it is the
--     host's AutoThrottle delay as @at_delay holds it
-- Each payload is leased as the field ARGV[9] .. place .. '\t' .. score .. '\t' .. host -> the payload,
-- place being its rank among its host's payloads in the reply (1, 2, ...).
--! include politeness_policy
--! include redis_time
--! include frontier_queue
local PARK_MS = 30000
local HORIZON_MS = 1000
local now, now_text = redis_now_ms()
local prefix, want = ARGV[1], tonumber(ARGV[2])
local default_rate, cap, pprefix = tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[5]
local at_start = ARGV[10] ~= '' and tonumber(ARGV[10])
local at_ahead = at_start and math.max(1, math.ceil(tonumber(ARGV[11])))
-- a parked host's score, as text: formatted once a call (only with a cap), not once a host
local park_text = cap > 0 and string.format('%d', now + PARK_MS)
local INFLIGHT, NEXT, AT_DELAY = pprefix .. '@inflight', pprefix .. '@next', pprefix .. '@at_delay'
-- most crawls have no live rate, no host limited and none with priorities: one EXISTS for the
-- three, and no HMGET or SMISMEMBER of them a batch
local rates_key, limited_key, ranked_key = false, false, false
if redis.call('EXISTS', KEYS[3], pprefix .. '@limited', prefix .. '@ranked') > 0 then
  rates_key = redis.call('EXISTS', KEYS[3]) == 1 and KEYS[3]
  limited_key = redis.call('EXISTS', pprefix .. '@limited') == 1 and pprefix .. '@limited'
  ranked_key = redis.call('EXISTS', prefix .. '@ranked') == 1 and prefix .. '@ranked'
end
-- the seen feed: what the other nodes queued since this node last looked
local feed_last, feed = ARGV[6], {}
if feed_last == '$' then
  local newest = redis.call('XREVRANGE', KEYS[4], '+', '-', 'COUNT', 1)
  feed_last = newest[1] and newest[1][1] or '0-0'
elseif feed_last ~= '' and not (KEYS[5] and redis.call('ZCARD', KEYS[5]) < 2) then
  for _, entry in ipairs(redis.call('XRANGE', KEYS[4], '(' .. feed_last, '+', 'COUNT', ARGV[8])) do
    feed_last = entry[1]
    local f = entry[2]
    -- fields n (node), f (fingerprints), as frontier_push writes them
    if f[2] ~= ARGV[7] then feed[#feed + 1] = f[4] end
  end
end
local out = {'', feed_last, #feed}
for _, fps in ipairs(feed) do out[#out + 1] = fps end
-- out's and fields' lengths, counted (a # is a search of the table each time)
local nout, nfields = #out, 0
-- one command for every host of the call (in chunks: unpack takes a few thousand values at most)
local function each(cmd, key, list)
  if #list <= 1000 then return redis.call(cmd, key, unpack(list)) end
  local all = {}
  for j = 1, #list, 1000 do
    local part = redis.call(cmd, key, unpack(list, j, math.min(j + 999, #list)))
    for k = 1, #part do all[#all + 1] = part[k] end
  end
  return all
end
-- the lease hash's entries (placed: each host's last place); a short field, so that an
-- acknowledgement sends a few bytes, not the request
local fields, call, placed, places = {}, ARGV[9], {}, false
-- each host's new score in the index (false: out of it) and in-flight count, written at the end:
-- the walk never reads the index again
local rescore, counted, held = {}, {}, {}
-- the sends booked (host, Unix ms as text, ...), written in one HSET at the end; the paces of the
-- call's rates, as text (most hosts of a crawl share one rate)
local booked, nbooked, paces = {}, 0, {}
-- The due hosts, a batch at a time (with a cap, n / cap of them: the cap from each), the next
-- batch only while requests are still wanted; the index is written at the end, so an offset walks it
local offset, visit_max = 0, 2 * want
while want > 0 and offset < visit_max do
  local limit = want
  if cap > 0 then limit = math.ceil(want / cap) end
  limit = math.min(limit, visit_max - offset)
  local hosts = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_text, 'LIMIT', int_text[offset], int_text[limit])
  offset = offset + #hosts
  if #hosts == 0 then break end
  local rated, ranked, live, slowed, next_of, at_of = {}, {}, {}, {}, {}, {}
  local counts = each('HMGET', INFLIGHT, hosts)
  local limited = limited_key and each('SMISMEMBER', limited_key, hosts)
  local sets = ranked_key and each('SMISMEMBER', ranked_key, hosts)
  local rates = rates_key and each('HMGET', rates_key, hosts)
  for j, host in ipairs(hosts) do
    local c = counts[j]
    held[host] = c and math.max(0, int_of(c)) or 0
  end
  if sets then
    for j, host in ipairs(hosts) do ranked[host] = sets[j] == 1 end
  end
  if default_rate > 0 or limited or rates or at_start then
    local nexts = each('HMGET', NEXT, hosts)
    local ats = at_start and each('HMGET', AT_DELAY, hosts)
    for j, host in ipairs(hosts) do
      slowed[host] = limited and limited[j] == 1
      live[host] = rates and rate_num(rates[j]) or nil
      rated[host] = at_start or default_rate > 0 or (limited and limited[j] == 1) or live[host] ~= nil
      next_of[host], at_of[host] = nexts[j], ats and ats[j]
    end
  end
  local left = hosts
  while want > 0 and #left > 0 do
    local next_round = {}
    local before = want
    for idx, host in ipairs(left) do
      local take = math.ceil(want / (#left - idx + 1))
      local inflight = held[host]
      local rate, next_lease, pause, _, strict = 0, 0, 0, 1, false
      if rated[host] then
        rate, next_lease, pause, _, strict =
          policy_of(slowed[host] and pprefix .. host, live[host], default_rate, at_start, next_of[host], at_of[host])
      end
      local due = next_lease > pause and next_lease or pause
      if due > now then
        rescore[host] = string.format('%d', due)
        take = 0
      elseif cap > 0 and inflight >= cap then
        rescore[host] = park_text
        take = 0
      end
      if take > 0 then
        local pace = '0'
        if rate > 0 then
          local ahead = math.floor(HORIZON_MS * rate / 1000)
          if ahead < 1 then ahead = 1 end
          if not strict and at_ahead and ahead > at_ahead then ahead = at_ahead end
          if take > ahead then take = ahead end
          if strict then
            pace = paces[rate]
            if not pace then
              pace = string.format('%d', math.floor(1e6 / rate + 0.5))
              paces[rate] = pace
            end
          else
            -- AutoThrottle's delay, as stored: no number formatted
            pace = (at_of[host] or ARGV[10]) .. 'a'
          end
        end
        if cap > 0 and take > cap - inflight then take = cap - inflight end
        local groups, got, empty = queue_pop(prefix, host, take, ranked[host])
        local k = placed[host] or 0
        places = places or int_texts()
        for _, group in ipairs(groups) do
          local score, payloads = group[1], group[2]
          local suffix = '\t' .. score .. '\t' .. host
          out[nout + 1], out[nout + 2], out[nout + 3], out[nout + 4] = host, score, #payloads, pace
          nout = nout + 4
          for _, payload in ipairs(payloads) do
            k = k + 1
            fields[nfields + 1], fields[nfields + 2] = call .. (places[k] or int_text[k]) .. suffix, payload
            nfields = nfields + 2
            nout = nout + 1
            out[nout] = payload
          end
        end
        placed[host] = k
        want = want - got
        held[host] = inflight + got
        if got > 0 then counted[host] = true end
        local ready, ready_text = now, now_text
        if rate > 0 then
          ready = now + math.ceil(got * 1000 / rate)
          ready_text = string.format('%d', ready)
          booked[nbooked + 1], booked[nbooked + 2] = host, ready_text
          nbooked = nbooked + 2
        end
        if cap > 0 and held[host] >= cap and ready < now + PARK_MS then ready, ready_text = now + PARK_MS, park_text end
        if empty then
          rescore[host] = false
        else
          rescore[host] = ready_text
          if ready <= now then next_round[#next_round + 1] = host end
        end
      end
      if want <= 0 then break end
    end
    if want == before then break end
    left = next_round
  end
  if #hosts < limit then break end
end
-- every lease of the call in one HSET, every new score in one ZADD, and so on (in chunks)
local function flush(cmd, key, list, step)
  for j = 1, #list, step do redis.call(cmd, key, unpack(list, j, math.min(j + step - 1, #list))) end
end
if nfields > 0 then
  fields[nfields + 1], fields[nfields + 2] = HASH_MARK, HASH_MARK_VALUE
end
flush('HSET', KEYS[2], fields, 2000)
if nbooked > 0 then
  booked[nbooked + 1], booked[nbooked + 2] = HASH_MARK, HASH_MARK_VALUE
end
flush('HSET', NEXT, booked, 2000)
local scores, gone, counts = {}, {}, {}
for host, score in pairs(rescore) do
  if score then
    scores[#scores + 1] = score
    scores[#scores + 1] = host
  else
    gone[#gone + 1] = host
  end
end
for host in pairs(counted) do
  counts[#counts + 1] = host
  counts[#counts + 1] = int_text[held[host]]
end
flush('ZADD', KEYS[1], scores, 2000)
flush('ZREM', KEYS[1], gone, 1000)
if #counts > 0 then
  counts[#counts + 1] = HASH_MARK
  counts[#counts + 1] = HASH_MARK_VALUE
end
flush('HSET', INFLIGHT, counts, 2000)
queued_flush(prefix)
-- due in 0 ms after a call that leased: the worker asks again when it wants more, and only an
-- idle worker, whose call leased nothing, sleeps by it (no index read, no number formatted)
if nfields > 0 then
  out[1] = '0'
else
  local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local due_in = -1
  if first[2] then due_in = math.max(0, tonumber(first[2]) - now) end
  out[1] = string.format('%d', due_in)
end
return out
