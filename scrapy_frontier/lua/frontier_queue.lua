-- frontier_queue: not a script of its own, the layout of a host's queue, included
-- (--! include frontier_queue) by every script that queues or takes requests.
-- A host's queue is one list <q>#<score> (<q> = queue prefix .. host) of requests per priority
-- (score = -priority, as text), oldest first: a list keeps its requests in Redis's compact
-- listpack nodes, 2 or 3 bytes beside each payload, where one sorted set of requests cost over
-- 100 (a skiplist node and a dict entry each, past 128 members or 64 bytes). '#' never appears
-- in a host name. The sorted set <q> indexes the other priorities (member = score): priority 0,
-- the default and most crawls' only one, has its list <q>#0 and no index entry, which spares
-- each host a key (about 100 bytes). A queue written before (with '0' in <q>) is read the same.
-- Invariants the scripts keep (each is atomic): a list other than <q>#0 exists only while its
-- priority is in <q>, and <q> or <q>#0 exists only while its host is in the shard's hosts index;
-- so a push onto a list that already had requests needs no ZADD.
-- A payload is a request's JSON (serialize.request_to_json, '{' first), or its compact form,
-- the JSON after its opening '{"url":"https://<host>' (the host being the queue's own; after
-- '{"url":"http://<host>' with an 'h' before it): frontier.compact_payload. What follows a host
-- is one of ':/?#"', never '{' or 'h'. queue_pop gives the JSON back (one concatenation).
-- The shard's queued-request count is the string <queue prefix>@queued ('@' never appears in a
-- host name): moved by each script once, at its end (queued_flush), and only once it exists, so
-- that a queue written before it was kept is counted whole first (frontier_status, deep).
-- Defines: queue_add(q, score, payload, front) (front: true to serve it first) -> true when the
-- list is new (its host may be new to the hosts index: the caller adds it there);
-- queue_add_all(q, score, payloads), the same for several, at the back, in one call;
-- queue_pop(q, host, n) -> {{score, {payload (JSON), ...}}, ...} (highest priority first, at most
-- n in all), how many, and whether the queue is now empty (its keys gone); queue_len(q) -> the
-- requests queued; queued_flush(prefix).
local queued_delta = 0
-- the list of a score, and the score as its key writes it (priority 0's is '0', however written)
local function queue_list(q, score)
  if tonumber(score) == 0 then return q .. '#0', '0' end
  return q .. '#' .. score, score
end
-- a list that is new: its priority goes in <q>, but 0's; true, for the caller (see Defines)
local function queue_listed(q, score)
  if score ~= '0' then redis.call('ZADD', q, 'NX', score, score) end
  return true
end
local function queue_add(q, score, payload, front)
  local list
  list, score = queue_list(q, score)
  local len
  if front then len = redis.call('LPUSH', list, payload) else len = redis.call('RPUSH', list, payload) end
  queued_delta = queued_delta + 1
  return len == 1 and queue_listed(q, score)
end
-- queue_add_all(q, score, payloads): queue_add of each, oldest first, in one RPUSH per 1000.
local function queue_add_all(q, score, payloads)
  local list
  list, score = queue_list(q, score)
  local len = 0
  for j = 1, #payloads, 1000 do len = redis.call('RPUSH', list, unpack(payloads, j, math.min(j + 999, #payloads))) end
  queued_delta = queued_delta + #payloads
  return len == #payloads and queue_listed(q, score)
end
local function queue_pop(q, host, n)
  local out = {}
  local taken = 0
  local empty = false
  local zero = q .. '#0'
  while n > 0 do
    -- the highest indexed priority, unless priority 0 comes first (scores >= 0: priorities <= 0)
    local score = redis.call('ZRANGE', q, 0, 0)[1]
    local indexed = score ~= nil
    local got
    if score == nil or tonumber(score) >= 0 then
      got = redis.call('LPOP', zero, n)
      if got then score = '0' end
    end
    if score == nil then empty = true break end
    local list = q .. '#' .. score
    if not got and score ~= '0' then got = redis.call('LPOP', list, n) end
    if got then
      -- the JSON back, inline (a function call per request would cost Redis more than the rest)
      for j = 1, #got do
        local p = got[j]
        local b = string.byte(p, 1)
        if b == 104 then got[j] = '{"url":"http://' .. host .. string.sub(p, 2) elseif b ~= 123 then got[j] = '{"url":"https://' .. host .. p end
      end
      out[#out + 1] = {score, got}
      n = n - #got
      taken = taken + #got
    end
    -- fewer than asked: the list is gone; as many: look
    if n > 0 or redis.call('EXISTS', list) == 0 then
      -- priority 0's list gone and no sorted set: the queue is empty, nothing more to look at
      if not indexed then empty = true break end
      redis.call('ZREM', q, score)
      if redis.call('EXISTS', q, zero) == 0 then empty = true break end
    end
  end
  queued_delta = queued_delta - taken
  return out, taken, empty
end
local function queue_len(q)
  local n = redis.call('LLEN', q .. '#0')
  for _, score in ipairs(redis.call('ZRANGE', q, 0, -1)) do
    if tonumber(score) ~= 0 then n = n + redis.call('LLEN', q .. '#' .. score) end
  end
  return n
end
local function queued_flush(prefix)
  if queued_delta ~= 0 then
    local key = prefix .. '@queued'
    if redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, queued_delta) end
    queued_delta = 0
  end
end
