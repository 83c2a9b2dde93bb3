-- frontier_queue: not a script of its own, the layout of a host's queue, included
-- (--! include frontier_queue) by every script that queues or takes requests.
-- A host's queue is a sorted set <q> (= queue prefix .. host) of the priorities it has requests
-- of (member = score = -priority, as text), and one list <q>#<score> of requests per priority,
-- oldest first: a list keeps its requests in Redis's compact listpack nodes, 2 or 3 bytes
-- beside each payload, where one sorted set of requests cost over 100 (a skiplist node and a
-- dict entry each, past 128 members or 64 bytes). '#' never appears in a host name.
-- Invariants the scripts keep (each is atomic): a list exists only while its priority is in <q>,
-- and <q> exists only while its host is in the shard's hosts index; so a push onto a list that
-- already had requests needs neither ZADD.
-- The shard's queued-request count is the string <queue prefix>@queued ('@' never appears in a
-- host name): moved by each script once, at its end (queued_flush), and only once it exists, so
-- that a queue written before it was kept is counted whole first (frontier_status, deep).
-- Defines: queue_add(q, score, payload, front) (front: true to serve it first) -> true when the
-- list is new (its host may be new to the hosts index: the caller adds it there);
-- queue_add_all(q, score, payloads), the same for several, at the back, in one call;
-- queue_pop(q, n) -> {{score, {payload, ...}}, ...} (highest priority first, at most n in all),
-- how many, and whether the queue is now empty (its key gone); queued_flush(prefix).
local queued_delta = 0
local function queue_add(q, score, payload, front)
  local list = q .. '#' .. score
  local len
  if front then len = redis.call('LPUSH', list, payload) else len = redis.call('RPUSH', list, payload) end
  queued_delta = queued_delta + 1
  if len == 1 then
    redis.call('ZADD', q, 'NX', score, score)
    return true
  end
  return false
end
-- queue_add_all(q, score, payloads): queue_add of each, oldest first, in one RPUSH per 1000.
local function queue_add_all(q, score, payloads)
  local list = q .. '#' .. score
  local len = 0
  for j = 1, #payloads, 1000 do len = redis.call('RPUSH', list, unpack(payloads, j, math.min(j + 999, #payloads))) end
  queued_delta = queued_delta + #payloads
  if len == #payloads then
    redis.call('ZADD', q, 'NX', score, score)
    return true
  end
  return false
end
local function queue_pop(q, n)
  local out = {}
  local taken = 0
  local empty = false
  while n > 0 do
    local first = redis.call('ZRANGE', q, 0, 0)
    if #first == 0 then empty = true break end
    local score = first[1]
    local list = q .. '#' .. score
    local got = redis.call('LPOP', list, n)
    if got then
      out[#out + 1] = {score, got}
      n = n - #got
      taken = taken + #got
    end
    -- fewer than asked: the list is gone; as many: look
    if n > 0 or redis.call('EXISTS', list) == 0 then
      redis.call('ZREM', q, score)
      empty = redis.call('EXISTS', q) == 0
      if empty then break end
    end
  end
  queued_delta = queued_delta - taken
  return out, taken, empty
end
local function queued_flush(prefix)
  if queued_delta ~= 0 then
    local key = prefix .. '@queued'
    if redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, queued_delta) end
    queued_delta = 0
  end
end
