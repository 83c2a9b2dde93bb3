-- frontier_take_start: take raw start-URL payloads pushed by users (oldest first), moving each
-- under this node's lease as field <start prefix><raw> (value: a tab, i.e. score and host empty).
-- KEYS[1] start URLs (list or set), KEYS[2] this node's lease hash
-- ARGV[1] n, ARGV[2] start URLs as a set (1/0), ARGV[3] lease field prefix of a raw start URL
-- Returns the raw payloads taken.
local got
if ARGV[2] == '1' then got = redis.call('SPOP', KEYS[1], ARGV[1])
else got = redis.call('RPOP', KEYS[1], ARGV[1]) end
if not got then return {} end
for _, raw in ipairs(got) do redis.call('HSET', KEYS[2], ARGV[3] .. raw, '\t') end
return got
