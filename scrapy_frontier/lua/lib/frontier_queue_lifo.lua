-- frontier_queue_lifo (library): the queue_add_all of a last-in, first-out crawl (scrapy-redis's
-- SCHEDULER_QUEUE_CLASS LifoQueue or SpiderStack, recorded as order=lifo in <spider>:dupefilter:meta):
-- new requests go to the front of their host's list of one priority, the newest first, so that each
-- host is crawled depth-first. frontier_push puts it after frontier_queue (placeholder QUEUE_ORDER),
-- in place of that library's queue_add_all, which adds at the back.
queue_add_all = function(prefix, host, score, payloads)
  local list
  list, score = queue_list(prefix .. host, score)
  local len = 0
  for j = 1, #payloads, 1000 do len = redis.call('LPUSH', list, unpack(payloads, j, math.min(j + 999, #payloads))) end
  queued_delta = queued_delta + #payloads
  return len == #payloads and queue_listed(prefix, host, score)
end
