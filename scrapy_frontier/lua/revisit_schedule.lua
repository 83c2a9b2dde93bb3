-- revisit_schedule: put pages in the shard's revisit schedule, each due a number of ms from now
-- (Redis time), as packed records in buckets by due time (layout: lib/revisit_wheel.lua). A page
-- whose revisit state was scheduled before `scrapy forget` or `scrapy push --now` superseded its
-- fingerprint is left out: its newer record (or none) stands.
-- KEYS[1] the shard's wheel, KEYS[2] its meta hash, KEYS[3] its templates, KEYS[4] its superseded
-- fingerprints (sorted set: first 8 bytes -> Unix ms)
-- ARGV[1] the parts' key prefix (<prefix>b:), then per page 12 values: fingerprint (8 bytes), ms
-- from now, template text, template id proposed (its CRC-32; the next free id on a clash),
-- interval (s), first seen, changed at, changes, content hash (8 bytes), Last-Modified, ETag, URL
-- after its host (JSON text), and a 13th: when the revisit that scheduled it was itself
-- scheduled (Unix ms; 0 for a first fetch)
-- Returns how many pages the shard's schedule holds now.
--! include redis_time
--! include revisit_wheel
local now = redis_now_ms()
local WHEEL, META, TEMPLATES, SUPERSEDED = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local parts = ARGV[1]
local superseded_any = redis.call('EXISTS', SUPERSEDED) == 1
local ids, buckets, order = {}, {}, {}
local added = 0
for i = 2, #ARGV, 13 do
  local fp, since = ARGV[i], tonumber(ARGV[i + 12])
  local at = superseded_any and since > 0 and redis.call('ZSCORE', SUPERSEDED, fp)
  if not (at and since < tonumber(at)) then
    local template = ARGV[i + 2]
    local id = ids[template]
    if not id then
      id = tonumber(ARGV[i + 3])
      while true do
        local have = redis.call('HGET', TEMPLATES, id)
        if not have then
          redis.call('HSET', TEMPLATES, id, template)
          break
        end
        if have == template then break end
        id = (id + 1) % 4294967296
      end
      ids[template] = id
    end
    local etag, tail = ARGV[i + 10], ARGV[i + 11]
    local record = struct.pack(WHEEL_RECORD, fp, id, tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5]),
      tonumber(ARGV[i + 6]), tonumber(ARGV[i + 7]), ARGV[i + 8], tonumber(ARGV[i + 9]), #etag, etag, #tail, tail)
    local delay = math.max(0, tonumber(ARGV[i + 1]))
    local size = 2 ^ wheel_level(delay)
    local index = math.ceil((now + delay) / size)
    local name = string.format('%d:%.0f', wheel_level(delay), index)
    local bucket = buckets[name]
    if not bucket then
      bucket = {ends = string.format('%.0f', index * size), records = {}}
      buckets[name] = bucket
      order[#order + 1] = name
    end
    bucket.records[#bucket.records + 1] = record
    added = added + 1
  end
end
-- A part is written whole (SET, not APPEND: APPEND keeps up to twice a string's length
-- allocated), and filled to at most WHEEL_PART_BYTES, so that it fills an 8 KB allocation.
for _, name in ipairs(order) do
  local bucket = buckets[name]
  local number = tonumber(redis.call('HGET', META, name) or '0')
  local part = name .. ':' .. number
  local data = {redis.call('GET', parts .. part) or ''}
  local size, count = #data[1], 0
  for k, record in ipairs(bucket.records) do
    if size + #record > WHEEL_PART_BYTES and size > 0 then
      redis.call('SET', parts .. part, table.concat(data))
      redis.call('ZADD', WHEEL, bucket.ends, part)
      redis.call('HINCRBY', META, 'c:' .. part, count)
      number = number + 1
      part = name .. ':' .. number
      redis.call('HSET', META, name, number)
      data, size, count = {}, 0, 0
    end
    data[#data + 1] = record
    size = size + #record
    count = count + 1
  end
  redis.call('SET', parts .. part, table.concat(data))
  redis.call('ZADD', WHEEL, bucket.ends, part)
  redis.call('HINCRBY', META, 'c:' .. part, count)
end
if added > 0 then return redis.call('HINCRBY', META, 'n', added) end
return tonumber(redis.call('HGET', META, 'n') or '0')
