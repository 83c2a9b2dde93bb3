-- requeue: put dead letters back in the frontier (`scrapy requeue`). A record is queued only if
-- this call removed it from the failed list, so two concurrent requeues never queue one request twice.
-- Unsharded crawls only (a sharded crawl's queues are in other hash slots than the list).
-- KEYS[1] failed list (<spider>:requests:failed), KEYS[2] slots index (<spider>:requests)
-- ARGV[1] queue prefix (+ host), then (record, host, score, payload) for each request
-- Returns how many were queued.
--! include redis_time
--! include frontier_queue
local now = redis_now_ms()
local n = 0
for i = 2, #ARGV, 4 do
  if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 then
    if queue_add(ARGV[1], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], false) then
      redis.call('ZADD', KEYS[2], 'NX', now, ARGV[i + 1])
    end
    n = n + 1
  end
end
queued_flush(ARGV[1])
return n
