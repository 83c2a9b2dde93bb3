-- frontier_unlease: give back some of this node's leases (requests it took but will not start)
-- to their hosts' queues.
-- KEYS[1] slots index (<spider>:requests), KEYS[2] this node's lease hash
-- ARGV[1] queue prefix (+ host), ARGV[2] now (Unix ms), ARGV[3] politeness prefix (+ host),
-- ARGV[4...] lease fields (payloads)
-- Returns how many were leased and given back.
local n = 0
for i = 4, #ARGV do
  local val = redis.call('HGET', KEYS[2], ARGV[i])
  if val then
    local tab = string.find(val, '\t', 1, true)
    local host = string.sub(val, tab + 1)
    redis.call('ZADD', ARGV[1] .. host, string.sub(val, 1, tab - 1), ARGV[i])
    redis.call('ZADD', KEYS[1], 'NX', ARGV[2], host)
    redis.call('HINCRBY', ARGV[3] .. host, 'inflight', -1)
    redis.call('HDEL', KEYS[2], ARGV[i])
    n = n + 1
  end
end
return n
