-- dupefilter_seen (library): the dedup check, included by frontier_push and dupefilter_add, so that a
-- request is checked and queued in one atomic call. Layouts: scrapy_frontier/dupefilter.py.
-- The including script declares these locals first (Redis forbids new globals):
--   D          the dupefilter key (<spider>:dupefilter): a set, or a sorted set with a recrawl age;
--              packed: the prefix of its buckets, D .. ':' .. n, sets of 64-bit integers, and their
--              count in D .. ':count'
--   FORGOTTEN  the forgotten set (<spider>:dupefilter:forgotten): fingerprints let through once
--   BLOOM      the Bloom layout hash (<spider>:dupefilter:bloom): cap0, err, n, count, <i>:cap,
--              <i>:k, <i>:bits, <i>:count
--   BITS       the prefix of the Bloom bit strings: filter i's segment s is BITS .. i .. ':' .. s
--   MODE       the layout: 'packed', 'set', 'zset' or 'bloom'
--   NOW        now (Unix ms)
--   AGE        recrawl age (ms; 'zset' only): a fingerprint seen longer ago counts as new
--   CAP0, ERR  capacity and error rate of the first Bloom filter of a new chain
-- Placeholder SEGMENT_BITS: bits per Redis string of a Bloom filter (dupefilter.SEGMENT_BITS).
-- Defines: seen_add(fp) -> true when the fingerprint fp (hex; packed: '<int64>@<bucket>',
-- DedupConfig.packed_member) was not seen before, and records it; bloom_flush(), to call once after
-- the last seen_add: writes the Bloom counters and packed_added (packed fingerprints recorded, which a
-- caller that checks packed members with its own SADD adds to) back.
local SEG = @SEGMENT_BITS@
local forgotten_any = MODE ~= 'packed' and redis.call('EXISTS', FORGOTTEN) == 1
local layout = nil
local packed_added = 0
local function bloom_grow(t)
  local i = t.n
  local cap = t.cap0 * 2 ^ i
  local p = t.err / 2 ^ (i + 1)
  local k = math.ceil(-math.log(p) / math.log(2))
  local bits = math.ceil(-cap * math.log(p) / (math.log(2) ^ 2))
  if bits > 2 ^ 42 then
    bits = 2 ^ 42
    cap = math.floor(-bits * (math.log(2) ^ 2) / math.log(p))
  end
  t.f[i] = {cap = cap, k = k, bits = bits, count = 0, key = BITS .. i .. ':'}
  t.n = i + 1
  redis.call('HSET', BLOOM, i .. ':cap', cap, i .. ':k', k, i .. ':bits', bits, i .. ':count', 0, 'n', t.n)
  -- Allocate the bits now, each segment exactly sized (SET of zeros): a string grown by SETBIT
  -- gets up to 1 MB more than it needs.
  for seg = 0, math.floor((bits - 1) / SEG) do
    redis.call('SET', t.f[i].key .. seg, string.rep('\0', math.ceil(math.min(SEG, bits - seg * SEG) / 8)))
  end
end
local function bloom_layout()
  if layout then return layout end
  local h = redis.call('HGETALL', BLOOM)
  local raw = {}
  for i = 1, #h, 2 do raw[h[i]] = tonumber(h[i + 1]) end
  local t = {f = {}, added = 0}
  if raw.n then
    t.cap0, t.err, t.n = raw.cap0, raw.err, raw.n
    for i = 0, t.n - 1 do
      t.f[i] = {
        cap = raw[i .. ':cap'], k = raw[i .. ':k'], bits = raw[i .. ':bits'], count = raw[i .. ':count'],
        key = BITS .. i .. ':',
      }
    end
  else
    t.cap0, t.err, t.n = CAP0, ERR, 0
    redis.call('HSET', BLOOM, 'cap0', CAP0, 'err', ERR, 'n', 0, 'count', 0)
    bloom_grow(t)
  end
  layout = t
  return t
end
-- The k bit positions of a fingerprint in a filter, by enhanced double hashing (docs/scripts.md);
-- every value stays below the filter's size (< 2^42), so doubles keep it exact.
local function bloom_positions(filter, h1, h2)
  local bits, out = filter.bits, {}
  local a, b = math.fmod(h1, bits), math.fmod(h2, bits)
  for j = 0, filter.k - 1 do
    out[j + 1] = a
    a = math.fmod(a + b, bits)
    b = math.fmod(b + j, bits)
  end
  return out
end
-- Whether every one of the k bits is set in a filter: GETBIT until a 0 (a filter is at most
-- half ones, so an absent fingerprint costs about two calls).
local function bloom_has(filter, h1, h2)
  for _, pos in ipairs(bloom_positions(filter, h1, h2)) do
    local seg = math.floor(pos / SEG)
    if redis.call('GETBIT', filter.key .. seg, pos - seg * SEG) == 0 then return false end
  end
  return true
end
-- Sets the k bits in one BITFIELD call per segment; true when every bit was already 1.
local function bloom_set(filter, h1, h2)
  local by_seg = {}
  for _, pos in ipairs(bloom_positions(filter, h1, h2)) do
    local seg = math.floor(pos / SEG)
    local args = by_seg[seg]
    if not args then args = {}; by_seg[seg] = args end
    args[#args + 1] = 'SET'
    args[#args + 1] = 'u1'
    args[#args + 1] = pos - seg * SEG
    args[#args + 1] = 1
  end
  local all = true
  for seg, args in pairs(by_seg) do
    for _, bit in ipairs(redis.call('BITFIELD', filter.key .. seg, unpack(args))) do
      if bit == 0 then all = false end
    end
  end
  return all
end
-- Writes the Bloom counters kept in the layout table back to the hash (once per script).
local function bloom_flush()
  if packed_added > 0 then redis.call('INCRBY', D .. ':count', packed_added) end
  if not layout or layout.added == 0 then return end
  local last = layout.n - 1
  redis.call('HINCRBY', BLOOM, 'count', layout.added)
  redis.call('HSET', BLOOM, last .. ':count', layout.f[last].count)
end
-- Returns true when fp (hex) was not seen before, and records it.
local function seen_add(fp)
  if MODE == 'packed' then
    local at = string.find(fp, '@', 1, true)
    if redis.call('SADD', D .. ':' .. string.sub(fp, at + 1), string.sub(fp, 1, at - 1)) == 0 then return false end
    packed_added = packed_added + 1
    return true
  end
  if forgotten_any and redis.call('SREM', FORGOTTEN, fp) == 1 then
    if MODE == 'set' then redis.call('SADD', D, fp) elseif MODE == 'zset' then redis.call('ZADD', D, NOW, fp) end
    return true
  end
  if MODE == 'set' then return redis.call('SADD', D, fp) == 1 end
  if MODE == 'zset' then
    local at = redis.call('ZSCORE', D, fp)
    if at and tonumber(at) > NOW - AGE then return false end
    redis.call('ZADD', D, NOW, fp)
    return true
  end
  local t = bloom_layout()
  local h1 = tonumber(string.sub(fp, 1, 13), 16)
  local h2 = tonumber(string.sub(fp, 14, 26), 16)
  for i = 0, t.n - 2 do
    if bloom_has(t.f[i], h1, h2) then return false end
  end
  local last = t.f[t.n - 1]
  if last.count >= last.cap then
    -- Full: it becomes read-only, and the next filter is made when first needed.
    if bloom_has(last, h1, h2) then return false end
    redis.call('HSET', BLOOM, (t.n - 1) .. ':count', last.count)
    bloom_grow(t)
    last = t.f[t.n - 1]
  end
  if bloom_set(last, h1, h2) then return false end
  last.count = last.count + 1
  t.added = t.added + 1
  return true
end
