-- frontier_restore: put every lease of some nodes back where it came from (a request in its
-- host's queue, a raw start URL in the start URLs), with the pending items a node was replaying
-- (back in the pending list). Mode 'node': one node leaving; it stays registered (Frontier.leave).
-- Mode 'dead': every node whose last heartbeat is older than a deadline, then forgotten
-- (removed from the nodes index, its info hash deleted).
-- KEYS[1] slots index (<spider>:requests), KEYS[2] nodes index, KEYS[3] start URLs (list or set),
-- KEYS[4] pending items list
-- ARGV[1] queue prefix (+ host), ARGV[2] lease prefix (+ node = the node's lease hash),
-- ARGV[3] now (Unix ms), ARGV[4] start URLs as a set (1/0), ARGV[5] mode ('node' or 'dead'),
-- ARGV[6] node id (mode 'node') or deadline (Unix ms, mode 'dead'), ARGV[7] politeness prefix
-- (+ host), ARGV[8] lease field prefix of a raw start URL, ARGV[9] node info prefix (+ node),
-- ARGV[10] replaying prefix (+ node = the pending items the node is writing)
-- Returns {leases and items restored, nodes}.
local prefix, lease_prefix, now, as_set = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local start_prefix, info_prefix, replaying_prefix = ARGV[8], ARGV[9], ARGV[10]
local nodes
if ARGV[5] == 'node' then nodes = {ARGV[6]} else
  nodes = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[6])
end
local restored = 0
for _, node in ipairs(nodes) do
  local h = lease_prefix .. node
  local all = redis.call('HGETALL', h)
  for j = 1, #all, 2 do
    local member, val = all[j], all[j + 1]
    local tab = string.find(val, '\t', 1, true)
    local score, host = string.sub(val, 1, tab - 1), string.sub(val, tab + 1)
    if host == '' then
      local raw = string.sub(member, #start_prefix + 1)
      if as_set == '1' then redis.call('SADD', KEYS[3], raw) else redis.call('RPUSH', KEYS[3], raw) end
    else
      redis.call('ZADD', prefix .. host, score, member)
      redis.call('ZADD', KEYS[1], 'NX', now, host)
      redis.call('HINCRBY', ARGV[7] .. host, 'inflight', -1)
    end
    restored = restored + 1
  end
  redis.call('DEL', h)
  local replaying = replaying_prefix .. node
  while redis.call('LMOVE', replaying, KEYS[4], 'LEFT', 'RIGHT') do restored = restored + 1 end
  if ARGV[5] == 'dead' then
    redis.call('ZREM', KEYS[2], node)
    redis.call('DEL', info_prefix .. node)
  end
end
return {restored, #nodes}
