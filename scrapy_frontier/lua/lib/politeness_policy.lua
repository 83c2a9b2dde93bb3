-- politeness_policy (library): the one rate rule of a host, included by frontier_lease (lease time)
-- and by politeness_reserve and politeness_slow_down (send time). A host's politeness state:
-- scrapy_frontier.keys.Keys.politeness_prefix (its own hash, for a host in @limited, and its entries
-- in the shard's @next and @at_delay hashes, which a lease reads for a whole batch of hosts at once).
-- Defines:
--   num(v) -> the number in v, or nil (v a Redis reply, possibly false)
--   rate_num(v) -> the rate in v (a live rate, requests/second): a finite number >= 0, else nil
--     (not a number, negative, NaN, infinite: the host then has the default rate, as if it had no
--     live rate)
--   policy_of(limited_key, live_rate, default_rate, at_start, next_v, at_v) -> rate, due,
--     pause_until, factor, strict:
--     limited_key the host's own hash (pprefix .. host) when the host is in @limited (slowed down,
--     paused or with a Crawl-delay), else false: it is not read; next_v and at_v are its entries
--     in @next and @at_delay (replies, false when absent);
--     rate (requests/second, 0 = none): live_rate (the host's entry in the rates hash; nil: none),
--     else default_rate; its robots.txt Crawl-delay when stricter; with no rate but slowed down
--     (factor < 1), the base_rate recorded when first slowed down; times its slow-down factor
--     (0-1); then, with the shared AutoThrottle on (at_start, µs, a number; false: off),
--     1 / the host's AutoThrottle delay (at_v, µs, else at_start) when that is stricter.
--     due: next_v, when the host may next send (Unix ms, 0 if unset); pause_until (Unix ms, 0 if
--     unset); strict: whether a rule other than AutoThrottle sets a rate (its sends are held to it
--     exactly; AutoThrottle's are paced, as Scrapy's per-process AutoThrottle paces them)
--   policy(pprefix, host, rates_key, default_rate, at_start) -> the same for one host, reading
--     its state and live rate itself (rates_key false: no live rates)
local function num(v) return tonumber(v or '') end
local function rate_num(v)
  local n = tonumber(v or '')
  if n and n >= 0 and n < math.huge then return n end
  return nil
end
local function policy_of(limited_key, live_rate, default_rate, at_start, next_v, at_v)
  local due = next_v and tonumber(next_v) or 0
  if not (limited_key or live_rate or default_rate > 0) then
    -- no rule but AutoThrottle's, if on (most hosts of most crawls): nothing more to read
    local delay = at_start and (at_v and tonumber(at_v) or at_start) or 0
    return delay > 0 and 1e6 / delay or 0, due, 0, 1, false
  end
  local rate, factor, pause = live_rate or default_rate, 1, 0
  if limited_key then
    local st = redis.call('HMGET', limited_key, 'factor', 'pause_until', 'robots_delay', 'base_rate')
    local robots = num(st[3])
    if robots and robots > 0 and (rate <= 0 or 1 / robots < rate) then rate = 1 / robots end
    factor = num(st[1]) or 1
    if rate <= 0 and factor < 1 then rate = num(st[4]) or 0 end
    pause = num(st[2]) or 0
  end
  if rate > 0 then rate = rate * factor end
  local strict = rate > 0
  if at_start then
    local delay = num(at_v) or at_start
    if delay > 0 and (rate <= 0 or 1e6 / delay < rate) then rate = 1e6 / delay end
  end
  return rate, due, pause, factor, strict
end
local function policy(pprefix, host, rates_key, default_rate, at_start)
  local live = rates_key and rate_num(redis.call('HGET', rates_key, host))
  local next_v = redis.call('HGET', pprefix .. '@next', host)
  local at_v = at_start and redis.call('HGET', pprefix .. '@at_delay', host)
  return policy_of(pprefix .. host, live, default_rate, at_start, next_v, at_v)
end
