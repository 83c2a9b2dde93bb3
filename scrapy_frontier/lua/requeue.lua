-- requeue: put dead letters back in the frontier (`scrapy requeue`). A record is queued only if
-- this call removed it from the failed list, so two concurrent requeues never queue one request twice.
-- KEYS[1] failed list (<spider>:requests:failed), KEYS[2] slots index (<spider>:requests)
-- ARGV[1] queue prefix (+ host), ARGV[2] now (Unix ms), then (record, host, score, payload)
-- for each request
-- Returns how many were queued.
local n = 0
for i = 3, #ARGV, 4 do
  if redis.call('LREM', KEYS[1], 1, ARGV[i]) == 1 then
    redis.call('ZADD', ARGV[1] .. ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
    redis.call('ZADD', KEYS[2], 'NX', ARGV[2], ARGV[i + 1])
    n = n + 1
  end
end
return n
