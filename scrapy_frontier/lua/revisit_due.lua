-- revisit_due: move the pages of the shard's revisit schedule that are due (Redis time) into their
-- hosts' queues, at most ARGV[2] of them, earliest first: from there they are leased, paced and
-- acknowledged as any request. Costs O(log(scheduled) + moved): the pages not due are not read.
-- KEYS[1] the shard's due times (sorted set), KEYS[2] the shard's scheduled requests (hash),
-- KEYS[3] the shard's hosts index (<spider>:requests)
-- ARGV[1] queue prefix (+ host = the host's queue), ARGV[2] most pages to move
-- Placeholder QUEUE_ORDER: as frontier_push's.
-- Returns {moved, ms until the next page is due (-1: none scheduled)}.
--! include redis_time
--! include frontier_queue
@QUEUE_ORDER@
local now, now_text = redis_now_ms()
local prefix = ARGV[1]
local due = redis.call('ZRANGE', KEYS[1], '-inf', now_text, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[2]))
local moved = 0
if #due > 0 then
  local values = redis.call('HMGET', KEYS[2], unpack(due))
  for k, fp in ipairs(due) do
    local value = values[k]
    if value then
      local host, score, payload = string.match(value, '^([^\t]*)\t([^\t]*)\t(.*)$')
      if host then
        if queue_add(prefix, host, score, payload, false) then redis.call('ZADD', KEYS[3], 'NX', now_text, host) end
        moved = moved + 1
      end
    end
  end
  redis.call('ZREM', KEYS[1], unpack(due))
  redis.call('HDEL', KEYS[2], unpack(due))
  queued_flush(prefix)
end
local next_due = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #next_due == 0 then return {moved, -1} end
return {moved, math.max(0, tonumber(next_due[2]) - now)}
