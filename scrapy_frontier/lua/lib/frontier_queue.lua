-- frontier_queue: not a script of its own, the layout of a host's queue, included
-- (--! include frontier_queue) by every script that queues or takes requests.
-- A host's queue is one list <q>#<score> (<q> = queue prefix .. host) of requests per priority
-- (score = -priority, as text), oldest first: a list keeps its requests in Redis's compact
-- listpack nodes, 2 or 3 bytes beside each payload, where one sorted set of requests cost over
-- 100 (a skiplist node and a dict entry each, past 128 members or 64 bytes). '#' never appears
-- in a host name. The sorted set <q> indexes the other priorities (member = score): priority 0,
-- the default and most crawls' only one, has its list <q>#0 and no index entry, which spares
-- each host a key (about 100 bytes). A queue written before (with '0' in <q>) is read the same.
-- The set <queue prefix>@ranked holds the hosts that have a sorted set <q>, so that taking from a
-- host without one (most hosts, most of the time) costs no look at <q>: the lease script reads it
-- for all the hosts of a call in one SMISMEMBER. A host with a sorted set that the set does not
-- hold (a queue written before it was kept) is found when its priority-0 list runs out, and
-- added; until then its priority-0 requests come first.
-- Invariants the scripts keep (each is atomic): a list other than <q>#0 exists only while its
-- priority is in <q>, <q> exists only while its host is in @ranked (but see above), and <q> or <q>#0 exists only while its host is in the shard's hosts index;
-- so a push onto a list that already had requests needs no ZADD; and a host is in the index only
-- while it has requests queued (the status's hosts count, idle detection).
-- A payload is a request's JSON (serialize.request_to_json, '{' first), or its compact form,
-- the JSON after its opening '{"url":"https://<host>' (the host being the queue's own; after
-- '{"url":"http://<host>' with an 'h' before it): frontier.compact_payload. What follows a host
-- is one of ':/?#"', never '{' or 'h'. queue_pop gives the payloads as stored; the worker
-- writes the JSON back (frontier.expand_payload), so Redis copies no request twice.
-- The shard's queued-request count is the string <queue prefix>@queued ('@' never appears in a
-- host name): moved by each script once, at its end (queued_flush), and only once it exists, so
-- that a queue written before it was kept is counted whole first (frontier_status, deep).
-- Defines (prefix: the queue prefix; host: the queue's host, prefix .. host = <q>):
-- queue_add(prefix, host, score, payload, front) (front: true to serve it first) -> true when
-- the list is new (its host may be new to the hosts index: the caller adds it there);
-- queue_add_all(prefix, host, score, payloads), the same for several, at the back, in one call;
-- queue_pop(prefix, host, n, ranked) -> {{score, {payload (as stored), ...}}, ...} (highest
-- priority first, at most n in all), how many, and whether the queue is now empty (its keys
-- gone); ranked: whether the host is in @ranked;
-- queue_len(prefix, host) -> the requests queued; queued_flush(prefix);
-- leases_held(key), HASH_MARK (below);
-- inflight_end(pprefix, host): one lease of the host ended, in the shard's in-flight hash
-- <politeness prefix>@inflight (host -> leases held, absent = 0: frontier_lease);
-- lease_of(field, value) -> score, host, payload of an entry of a node's lease hash: written by
-- frontier_lease as '<lease id>\t<score>\t<host>' -> the payload as stored, or, by an earlier
-- version, the payload's JSON -> '<score>\t<host>' (a value with a tab: a payload never has one,
-- JSON escapes it); a start URL's lease ('start:' .. raw -> '\t') gives host ''.
local queued_delta = 0
-- int_text[n]: the decimal text of an integer n (0 to 9 written out, 10 to 128 from the
-- script's constants, int_texts(), others formatted once a call): counts and positions given to
-- redis.call or written into a lease field (a lease's place among its host's: up to 128 a call)
-- as text, not as numbers (which Lua and Redis format with '%.14g' and '%.17g', each time).
-- int_of(text): the integer a reply gives (HMGET of counts), small ones without a strtod.
local texts = false
-- the texts of 1 to 128, made once a call when first needed: a lease's place is one (a table
-- read where int_text would call its __index)
local function int_texts()
  if not texts then
    texts = {
      '1', '2', '3', '4', '5', '6', '7', '8', '9', '10', '11', '12', '13', '14', '15', '16',
      '17', '18', '19', '20', '21', '22', '23', '24', '25', '26', '27', '28', '29', '30', '31',
      '32', '33', '34', '35', '36', '37', '38', '39', '40', '41', '42', '43', '44', '45', '46',
      '47', '48', '49', '50', '51', '52', '53', '54', '55', '56', '57', '58', '59', '60', '61',
      '62', '63', '64', '65', '66', '67', '68', '69', '70', '71', '72', '73', '74', '75', '76',
      '77', '78', '79', '80', '81', '82', '83', '84', '85', '86', '87', '88', '89', '90', '91',
      '92', '93', '94', '95', '96', '97', '98', '99', '100', '101', '102', '103', '104', '105',
      '106', '107', '108', '109', '110', '111', '112', '113', '114', '115', '116', '117', '118',
      '119', '120', '121', '122', '123', '124', '125', '126', '127', '128',
    }
  end
  return texts
end
local int_text = setmetatable({[0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9'}, {__index = function(t, n)
  if n >= 10 and n <= 128 then return int_texts()[n] end
  local s = string.format('%d', n)
  t[n] = s
  return s
end})
local small_ints = {['0'] = 0, ['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4}
local function int_of(text)
  return small_ints[text] or tonumber(text)
end
-- HASH_MARK, HASH_MARK_VALUE: the field of every lease hash and of the in-flight hash that is no
-- lease and no host, its value longer than hash-max-listpack-value, so that Redis keeps the hash
-- in its hashtable encoding (frontier_lease writes it: see there). leases_held(key): the leases
-- a lease hash holds, the mark left out.
local HASH_MARK = '@'
local HASH_MARK_VALUE = "not a lease nor a host: keeps this hash in Redis's hashtable encoding (docs/operating.md)"
local function leases_held(key)
  return redis.call('HLEN', key) - redis.call('HEXISTS', key, HASH_MARK)
end
-- the list of a score, and the score as its key writes it (priority 0's is '0', however written)
local function queue_list(q, score)
  if score == '0' or tonumber(score) == 0 then return q .. '#0', '0' end
  return q .. '#' .. score, score
end
-- a list that is new: its priority goes in <q> (and the host in @ranked), but 0's; true, for
-- the caller (see Defines)
local function queue_listed(prefix, host, score)
  if score ~= '0' then
    redis.call('ZADD', prefix .. host, 'NX', score, score)
    redis.call('SADD', prefix .. '@ranked', host)
  end
  return true
end
local function queue_add(prefix, host, score, payload, front)
  local list
  list, score = queue_list(prefix .. host, score)
  local len
  if front then len = redis.call('LPUSH', list, payload) else len = redis.call('RPUSH', list, payload) end
  queued_delta = queued_delta + 1
  return len == 1 and queue_listed(prefix, host, score)
end
-- queue_add_all(prefix, host, score, payloads): queue_add of each, oldest first, in one RPUSH per 1000.
local function queue_add_all(prefix, host, score, payloads)
  local list
  list, score = queue_list(prefix .. host, score)
  local len = 0
  for j = 1, #payloads, 1000 do len = redis.call('RPUSH', list, unpack(payloads, j, math.min(j + 999, #payloads))) end
  queued_delta = queued_delta + #payloads
  return len == #payloads and queue_listed(prefix, host, score)
end
local function queue_pop(prefix, host, n, ranked)
  local q = prefix .. host
  local out, taken, empty = {}, 0, false
  local zero = q .. '#0'
  while n > 0 do
    -- the highest indexed priority, unless priority 0 comes first (scores >= 0: priorities <= 0)
    local score = ranked and redis.call('ZRANGE', q, 0, 0)[1] or nil
    local got
    if score == nil or tonumber(score) >= 0 then got = redis.call('LPOP', zero, int_text[n]) end
    if not got and score == nil then
      -- nothing at priority 0 and no other priority indexed: empty
      if ranked then redis.call('SREM', prefix .. '@ranked', host) end
      empty = true
      break
    end
    local list = zero
    if got then
      score = '0'
    else
      list = q .. '#' .. score
      got = redis.call('LPOP', list, int_text[n])
    end
    if got then
      out[#out + 1] = {score, got}
      n = n - #got
      taken = taken + #got
    end
    -- fewer than asked: the list is gone; as many: look
    if n > 0 or redis.call('EXISTS', list) == 0 then
      -- '0' too, though it has no entry: a round that took nothing always removes what ZRANGE gave
      if ranked then redis.call('ZREM', q, score) end
      -- a host outside @ranked has no <q>: its list gone, its queue is empty
      if not ranked or redis.call('EXISTS', q, zero) == 0 then
        if ranked then redis.call('SREM', prefix .. '@ranked', host) end
        empty = true
        break
      end
    end
  end
  queued_delta = queued_delta - taken
  return out, taken, empty
end
local function queue_len(prefix, host)
  local q = prefix .. host
  local n = redis.call('LLEN', q .. '#0')
  for _, score in ipairs(redis.call('ZRANGE', q, 0, -1)) do n = n + redis.call('LLEN', q .. '#' .. score) end
  return n
end
local function inflight_end(pprefix, host)
  if redis.call('HINCRBY', pprefix .. '@inflight', host, -1) <= 0 then redis.call('HDEL', pprefix .. '@inflight', host) end
end
local function lease_of(field, value)
  if value == '\t' then return '', '', field end
  local score, host = string.match(field, '^[^\t]*\t([^\t]*)\t(.*)$')
  return score, host, value
end
local function queued_flush(prefix)
  if queued_delta ~= 0 then
    local key = prefix .. '@queued'
    if redis.call('EXISTS', key) == 1 then redis.call('INCRBY', key, queued_delta) end
    queued_delta = 0
  end
end
