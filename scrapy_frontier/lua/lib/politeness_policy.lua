-- politeness_policy (library): the one rate rule of a host, included by frontier_lease (lease time)
-- and by politeness_reserve and politeness_slow_down (send time). The fields of a host's politeness
-- hash: scrapy_frontier.keys.Keys.politeness_prefix.
-- Defines:
--   num(v) -> the number in v, or nil (v a Redis reply, possibly false)
--   policy_of(state_key, live_rate, default_rate, due_field) -> rate, due, pause_until, factor:
--     rate (requests/second, 0 = none): live_rate (the host's entry in the rates hash; nil: none),
--     else default_rate; its robots.txt Crawl-delay when stricter; with no rate but slowed down
--     (factor < 1), the base_rate recorded when first slowed down; times its slow-down factor (0-1).
--     due: the value of due_field (Unix ms, 0 if unset: 'next' at lease time, 'next_send' at send
--     time); pause_until (Unix ms, 0 if unset)
--   policy(state_key, rates_key (false: no live rates), host, default_rate, due_field) -> the same,
--     reading the host's live rate itself
local function num(v) return tonumber(v or '') end
local function policy_of(state_key, live_rate, default_rate, due_field)
  local st = redis.call('HMGET', state_key, due_field, 'factor', 'pause_until', 'robots_delay', 'base_rate')
  local rate = live_rate or default_rate
  local robots = num(st[4])
  if robots and robots > 0 and (rate <= 0 or 1 / robots < rate) then rate = 1 / robots end
  local factor = num(st[2]) or 1
  if rate <= 0 and factor < 1 then rate = num(st[5]) or 0 end
  if rate > 0 then rate = rate * factor end
  return rate, num(st[1]) or 0, num(st[3]) or 0, factor
end
local function policy(state_key, rates_key, host, default_rate, due_field)
  return policy_of(state_key, rates_key and num(redis.call('HGET', rates_key, host)), default_rate, due_field)
end
