-- revisit_count: a shard's revisit schedule at a glance (scrapy status, the metrics).
-- KEYS[1] the shard's due times (sorted set: fingerprint -> due, Unix ms)
-- Returns {pages scheduled, pages due now (Redis time), ms the earliest is overdue (negative:
-- due in that many ms; 0 with nothing scheduled)}.
--! include redis_time
local now, now_text = redis_now_ms()
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local late = #first > 0 and now - tonumber(first[2]) or 0
return {redis.call('ZCARD', KEYS[1]), redis.call('ZCOUNT', KEYS[1], '-inf', now_text), late}
