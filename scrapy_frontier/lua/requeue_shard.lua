-- requeue_shard: queue requeued dead letters in one frontier shard (`scrapy requeue` on a
-- sharded crawl, whose dead-letter list is in another hash slot: the caller removes each record
-- from the list after this call, so a requeue cut off in between queues it again next time).
-- KEYS[1] the shard's hosts index (<spider>:requests of the shard)
-- ARGV[1] the shard's queue prefix (+ host), then (host, score, payload) for each request
-- Returns how many were queued.
--! include redis_time
--! include frontier_queue
local now = redis_now_ms()
local n = 0
for i = 2, #ARGV, 3 do
  if queue_add(ARGV[1], ARGV[i], ARGV[i + 1], ARGV[i + 2], false) then
    redis.call('ZADD', KEYS[1], 'NX', now, ARGV[i])
  end
  n = n + 1
end
queued_flush(ARGV[1])
return n
