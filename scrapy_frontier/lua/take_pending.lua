-- take_pending: move up to n records from the pending items list to this node's replaying list.
-- KEYS[1]: <spider>:items:pending (records are LPUSHed, so the oldest is on the right)
-- KEYS[2]: <spider>:items:pending:<node id> (this node's records being replayed)
-- ARGV[1]: n, the most records to move
-- Returns the records moved, oldest first. LMOVE keeps each record in one list or the other
-- at every moment, so a node that dies mid-replay leaves them where the reclaim finds them.
local out = {}
for _ = 1, tonumber(ARGV[1]) do
  local v = redis.call('LMOVE', KEYS[1], KEYS[2], 'RIGHT', 'LEFT')
  if not v then break end
  out[#out + 1] = v
end
return out
