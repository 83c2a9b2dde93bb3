#!lua flags=allow-oom
-- nodes_info: write a node's facts (<spider>:nodes:<node>, shown by scrapy status) and their TTL, at
-- each heartbeat; it runs when Redis is at maxmemory (allow-oom), as nodes_beat does.
-- KEYS[1] the node's info hash
-- ARGV[1] TTL (ms), then field and value pairs
-- Returns 1.
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return 1
