-- politeness_policy (library): the one rate rule of a host, included by frontier_lease (lease time)
-- and by politeness_reserve and politeness_slow_down (send time). The fields of a host's politeness
-- hash: scrapy_frontier.keys.Keys.politeness_prefix.
-- Defines:
--   num(v) -> the number in v, or nil (v a Redis reply, possibly false)
--   rate_num(v) -> the rate in v (a live rate, requests/second): a finite number >= 0, else nil
--     (not a number, negative, NaN, infinite: the host then has the default rate, as if it had no
--     live rate)
--   policy_of(state_key, live_rate, default_rate, at_start, unlimited) -> rate, due, pause_until,
--     factor, strict (unlimited: the host is known not to be in @limited, slowed down, paused or
--     with a Crawl-delay, so that only 'next' and 'at_delay' are read):
--     rate (requests/second, 0 = none): live_rate (the host's entry in the rates hash; nil: none),
--     else default_rate; its robots.txt Crawl-delay when stricter; with no rate but slowed down
--     (factor < 1), the base_rate recorded when first slowed down; times its slow-down factor
--     (0-1); then, with the shared AutoThrottle on (at_start, seconds, a number; false: off),
--     1 / the host's AutoThrottle delay (at_delay, else at_start) when that is stricter.
--     due: 'next', when the host may next send (Unix ms, 0 if unset); pause_until (Unix ms, 0 if
--     unset); strict: whether a rule other than AutoThrottle sets a rate (its sends are held to it
--     exactly; AutoThrottle's are paced, as Scrapy's per-process AutoThrottle paces them)
--   policy(state_key, rates_key (false: no live rates), host, default_rate, at_start) -> the same,
--     reading the host's live rate itself
local function num(v) return tonumber(v or '') end
local function rate_num(v)
  local n = tonumber(v or '')
  if n and n >= 0 and n < math.huge then return n end
  return nil
end
local function policy_of(state_key, live_rate, default_rate, at_start, unlimited)
  local st
  if unlimited then
    -- not in @limited: no slow-down, pause or Crawl-delay to read
    local two = redis.call('HMGET', state_key, 'next', 'at_delay')
    st = {two[1], false, false, false, false, two[2]}
  else
    st = redis.call('HMGET', state_key, 'next', 'factor', 'pause_until', 'robots_delay', 'base_rate', 'at_delay')
  end
  local rate = live_rate or default_rate
  local robots = num(st[4])
  if robots and robots > 0 and (rate <= 0 or 1 / robots < rate) then rate = 1 / robots end
  local factor = num(st[2]) or 1
  if rate <= 0 and factor < 1 then rate = num(st[5]) or 0 end
  if rate > 0 then rate = rate * factor end
  local strict = rate > 0
  if at_start then
    local delay = num(st[6]) or at_start
    if delay > 0 and (rate <= 0 or 1 / delay < rate) then rate = 1 / delay end
  end
  return rate, num(st[1]) or 0, num(st[3]) or 0, factor, strict
end
local function policy(state_key, rates_key, host, default_rate, at_start)
  return policy_of(state_key, rates_key and rate_num(redis.call('HGET', rates_key, host)), default_rate, at_start)
end
