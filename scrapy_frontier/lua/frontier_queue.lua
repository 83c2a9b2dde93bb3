-- frontier_queue: not a script of its own, the layout of a host's queue, included
-- (--! include frontier_queue) by every script that queues or takes requests.
-- A host's queue is a sorted set <q> (= queue prefix .. host) of the priorities it has requests
-- of (member = score = -priority, as text), and one list <q>#<score> of requests per priority,
-- oldest first: a list keeps its requests in Redis's compact listpack nodes, 2 or 3 bytes
-- beside each payload, where one sorted set of requests cost over 100 (a skiplist node and a
-- dict entry each, past 128 members or 64 bytes). '#' never appears in a host name.
-- Defines: queue_add(q, score, payload, front) (front: true to serve it first);
-- queue_pop(q, n) -> {payload, score, payload, score, ...}, highest priority first, at most n,
-- and whether the queue is now empty (its key gone).
local function queue_add(q, score, payload, front)
  if front then redis.call('LPUSH', q .. '#' .. score, payload) else redis.call('RPUSH', q .. '#' .. score, payload) end
  redis.call('ZADD', q, 'NX', score, score)
end
local function queue_pop(q, n)
  local out = {}
  local empty = false
  while n > 0 do
    local first = redis.call('ZRANGE', q, 0, 0)
    if #first == 0 then empty = true break end
    local score = first[1]
    local list = q .. '#' .. score
    local got = redis.call('LPOP', list, n)
    if got then
      for _, payload in ipairs(got) do
        out[#out + 1] = payload
        out[#out + 1] = score
      end
      n = n - #got
    end
    if redis.call('EXISTS', list) == 0 then
      redis.call('ZREM', q, score)
      empty = redis.call('EXISTS', q) == 0
      if empty then break end
    end
  end
  return out, empty
end
