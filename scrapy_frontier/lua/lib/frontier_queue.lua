-- frontier_queue (library): a host's queue, the shard's queued count and the lease fields, for every
-- script that queues or takes requests. The layout and its invariants: docs/scripts.md.
-- Keys (prefix: the shard's queue prefix, <q> = prefix .. host; a score is -priority, as text):
--   <q>#<score>    list of the payloads of one priority, oldest first (priority 0's: <q>#0)
--   <q>            sorted set of the scores other than 0 that have a list (member = score)
--   prefix@ranked  set of the hosts that have a <q>
--   prefix@queued  the shard's queued requests (string), once frontier_status has made it
-- A payload is a request's JSON ('{' first) or its compact form (compact_payload).
-- Defines:
--   queue_add(prefix, host, score, payload, front) -> true when the list is new (the caller puts the
--     host in the hosts index); front: true to serve it first
--   queue_add_all(prefix, host, score, payloads) -> the same, for several at the back, oldest first
--   queue_pop(prefix, host, n, ranked) -> {{score, {payload, ...}}, ...} (highest priority first, at
--     most n payloads in all, as stored), how many, whether the queue is now empty (its keys gone);
--     ranked: whether the host is in prefix@ranked
--   queue_len(prefix, host) -> the requests queued
--   queued_flush(prefix): this call's net count of queued requests added to prefix@queued, at its end
--   inflight_end(pprefix, host): one lease of the host ended, in <pprefix>@inflight (host -> leases
--     held; absent: 0)
--   lease_of(field, value) -> score, host, payload of a lease hash entry: '<lease id>\t<score>\t<host>'
--     -> the payload as stored, or a start URL's (any field -> a tab), which gives score and host ''
--   leases_held(key) -> the leases a lease hash holds, HASH_MARK left out
--   HASH_MARK, HASH_MARK_VALUE: the field of lease and in-flight hashes that is no lease nor host
--   int_text[n] -> the decimal text of an integer n; int_texts() -> the texts of 1 to 128;
--   int_of(text) -> the integer of a reply's text
local queued_delta = 0
-- counts and places go to redis.call as text: Lua and Redis would format a number each time
local texts = false
-- made once a call, when first needed: frontier_lease reads a lease's place from it directly
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
-- small counts without a strtod
local small_ints = {['0'] = 0, ['1'] = 1, ['2'] = 2, ['3'] = 3, ['4'] = 4}
local function int_of(text)
  return small_ints[text] or tonumber(text)
end
-- a value longer than hash-max-listpack-value keeps the hash in the hashtable encoding (frontier_lease)
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
-- a list that is new: its priority goes in <q> and the host in @ranked, unless it is priority 0
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
-- one RPUSH per 1000 payloads (unpack takes a few thousand values at most)
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
  local key = pprefix .. '@inflight'
  if redis.call('HINCRBY', key, host, -1) <= 0 then redis.call('HDEL', key, host) end
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
