-- sluice: the decision for one request against several limits (the script
-- sluice calls). Built by lua/embed.sh after the algorithm files (without
-- their standalone tails), so token_bucket, gcra, sliding_window,
-- sliding_log and fixed_window are local functions here.
--
-- KEYS[i]  base key of limit i: <key_prefix>{<limit>:<identity>}; each
--          algorithm appends its own suffix (":tb", ":gc", ...), so a
--          limit's keys share its hash tag.
-- ARGV[1]  now in microseconds, or -1: redis.call('TIME')
-- ARGV[2]  N, the number of limits; then per limit 7 values:
--          algorithm, amount, period_us, burst, cost, shadow (0|1), max_wait_us
--          (gcra only: > 0 makes the limit reserve, action = delay)
--
-- All or nothing: every non-shadow limit is first asked without taking
-- (commit false: one read per key, no write, except gcra's state read
-- under other numbers, written once as converted: nothing taken); only if
-- all of them allow are their takes written (the functions they returned). A request denied
-- by one limit takes nothing from the others. A shadow limit is decided on
-- its own (taken when it allows) and never changes the answer.
--
-- Returns {all_allowed, then per limit: allowed, remaining, retry_after_us,
-- reset_us} (retry -1 = never). When the request is denied, the limits that
-- would have allowed it say allowed = 1 with nothing taken. A reserving
-- limit that allows after a wait says allowed = 1, retry = the wait; the
-- caller holds the request that long. A wait past max_wait is a denial
-- (retry = how much sooner it would have to be) and reserves nothing.

local algorithms = {
  token_bucket = token_bucket, gcra = gcra, sliding_window = sliding_window,
  sliding_log = sliding_log, fixed_window = fixed_window,
}

local now = tonumber(ARGV[1])
if now == nil or now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local n = tonumber(ARGV[2])
if n == nil or n < 0 or #ARGV ~= 2 + 7 * n or #KEYS ~= n then
  error({err = 'ERR sluice: decide: expected N keys and 2 + 7N arguments'})
end

local results, commits = {}, {}
local all = 1
for i = 1, n do
  local a = 2 + 7 * (i - 1)
  local f = algorithms[ARGV[a + 1]]
  if f == nil then
    error({err = 'ERR sluice: decide: unknown algorithm ' .. tostring(ARGV[a + 1])})
  end
  local amount, period_us = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local burst, cost = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])
  local max_wait = tonumber(ARGV[a + 7])
  if ARGV[a + 6] == '1' then
    results[i] = f(KEYS[i], amount, period_us, burst, cost, now, true, max_wait)
  else
    local r, commit = f(KEYS[i], amount, period_us, burst, cost, now, false, max_wait)
    results[i] = r
    commits[#commits + 1] = {i, commit}
    if r[1] ~= 1 then all = 0 end
  end
end
if all == 1 then
  for _, c in ipairs(commits) do results[c[1]] = c[2]() end
end

local out = {all}
for i = 1, n do
  for j = 1, 4 do out[#out + 1] = results[i][j] end
end
return out
