-- revisit_due: move the pages of the shard's revisit schedule that are due (Redis time) into their
-- hosts' queues, whole parts at a time, earliest bucket first, until at least ARGV[3] pages are
-- moved: from there they are leased, paced and acknowledged as any request. Costs O(log(parts) +
-- moved): nothing not due is read. Each record becomes its request's queued form again: its
-- template with the URL's path and the revisit state (JSON) put in (layout: lib/revisit_wheel.lua).
-- A record is dropped when its fingerprint was superseded (`scrapy forget`, `scrapy push --now`)
-- after it was scheduled, or when a record of the same fingerprint was moved less than ARGV[4] ms
-- ago (a page fetched twice because its worker died between scheduling it and acknowledging it).
-- Also drains the schedule of the layout before the wheel (KEYS[7], KEYS[8]) as it comes due.
-- KEYS[1] wheel, KEYS[2] meta, KEYS[3] templates, KEYS[4] superseded fingerprints, KEYS[5]
-- fingerprints moved lately (sorted set: first 8 bytes -> Unix ms), KEYS[6] the shard's hosts
-- index (<spider>:requests), KEYS[7] the former layout's due times (sorted set), KEYS[8] its
-- requests (hash: fingerprint -> '<host>\t<score>\t<payload>')
-- ARGV[1] the parts' key prefix, ARGV[2] the queue prefix (+ host = the host's queue), ARGV[3]
-- pages to move at least (when due), ARGV[4] the duplicate window (ms), ARGV[5] how long a
-- superseded fingerprint is kept (ms: longer than the longest interval)
-- Placeholder QUEUE_ORDER: as frontier_push's.
-- Returns {moved, ms until the next page is due (-1: none scheduled), dropped}.
--! include redis_time
--! include frontier_queue
--! include revisit_wheel
@QUEUE_ORDER@
local now, now_text = redis_now_ms()
local WHEEL, META, TEMPLATES, SUPERSEDED, MOVED, HOSTS = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local parts, prefix, most, window = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local moved, dropped = 0, 0
local superseded_any = redis.call('EXISTS', SUPERSEDED) == 1
if superseded_any then redis.call('ZREMRANGEBYSCORE', SUPERSEDED, '-inf', now - tonumber(ARGV[5])) end
redis.call('ZREMRANGEBYSCORE', MOVED, '-inf', now - window)
local templates = {}
local function template_of(id)
  local t = templates[id]
  if t == nil then
    local text = redis.call('HGET', TEMPLATES, id)
    t = false
    if text then
      local f, from = {}, 1
      for _ = 1, 4 do
        local at = string.find(text, '\0', from, true)
        f[#f + 1] = string.sub(text, from, at - 1)
        from = at + 1
      end
      f[5] = string.sub(text, from)
      t = f
    end
    templates[id] = t
  end
  return t
end
local function stamp(seconds)
  if seconds == 0 then return 'null' end
  return string.format('%d', seconds)
end
local due = redis.call('ZRANGE', WHEEL, '-inf', now_text, 'BYSCORE', 'LIMIT', 0, 1000, 'WITHSCORES')
local moved_at = {}
local HEX8 = string.rep('%02x', 8)
for k = 1, #due, 2 do
  if moved >= most then break end
  local part, ends = due[k], tonumber(due[k + 1])
  local data = redis.call('GET', parts .. part) or ''
  local pos, count = 1, 0
  while pos <= #data do
    local fp, id, interval, first, changed, changes, hash, modified, etag, tail, after =
      struct.unpack(WHEEL_RECORD, data, pos)
    pos = after
    count = count + 1
    local scheduled = ends - math.floor(interval * 1000)
    local at = superseded_any and redis.call('ZSCORE', SUPERSEDED, fp)
    local t = template_of(id)
    if (at and scheduled < tonumber(at)) or moved_at[fp] or redis.call('ZSCORE', MOVED, fp) or not t then
      dropped = dropped + 1
    else
      moved_at[fp] = true
      redis.call('ZADD', MOVED, now_text, fp)
      local state = string.format(
        '{"interval":%.7g,"first_seen":%s,"changed_at":%s,"changes":%d,"hash":"%s","etag":%s,"last_modified":%s,'
          .. '"scheduled":%.0f}',
        interval, stamp(first), stamp(changed), changes, string.format(HEX8, string.byte(hash, 1, 8)),
        #etag > 0 and '"' .. string.gsub(etag, '[\\"]', '\\%0') .. '"' or 'null', stamp(modified), scheduled)
      if queue_add(prefix, t[1], t[2], t[3] .. tail .. t[4] .. state .. t[5], false) then
        redis.call('ZADD', HOSTS, 'NX', now_text, t[1])
      end
      moved = moved + 1
    end
  end
  redis.call('DEL', parts .. part)
  redis.call('ZREM', WHEEL, part)
  redis.call('HDEL', META, 'c:' .. part, string.match(part, '^(.*):[^:]*$'))
  redis.call('HINCRBY', META, 'n', -count)
end
-- the former layout, until it is empty
local OLD_DUE, OLD_REQUESTS = KEYS[7], KEYS[8]
local old = moved < most and redis.call('ZRANGE', OLD_DUE, '-inf', now_text, 'BYSCORE', 'LIMIT', 0, most - moved) or {}
if #old > 0 then
  local values = redis.call('HMGET', OLD_REQUESTS, unpack(old))
  for k = 1, #old do
    local value = values[k]
    local host, score, payload = string.match(value or '', '^([^\t]*)\t([^\t]*)\t(.*)$')
    local key = superseded_any and string.gsub(string.sub(old[k], 1, 16), '..', function(h)
      return string.char(tonumber(h, 16))
    end)
    if key and redis.call('ZSCORE', SUPERSEDED, key) then
      dropped = dropped + 1
    elseif host then
      if queue_add(prefix, host, score, payload, false) then redis.call('ZADD', HOSTS, 'NX', now_text, host) end
      moved = moved + 1
    end
  end
  redis.call('ZREM', OLD_DUE, unpack(old))
  redis.call('HDEL', OLD_REQUESTS, unpack(old))
end
queued_flush(prefix)
local next_due = -1
for _, key in ipairs({WHEEL, OLD_DUE}) do
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if #first > 0 then
    local wait = math.max(0, tonumber(first[2]) - now)
    if next_due < 0 or wait < next_due then next_due = wait end
  end
end
return {moved, next_due, dropped}
