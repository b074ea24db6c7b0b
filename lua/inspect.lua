-- sluice: one identity's bucket under one limit, read or reset, for the
-- limits API (GET /limits/NAME/identities/ID and its reset). Built by
-- lua/embed.sh after lua/readonly.lua and the algorithm files (without
-- their standalone tails): the algorithms see only a read-only redis.
--
-- KEYS[1]  base key <key_prefix>{<limit>:<identity>} (the decide script's)
-- ARGV[1]  'peek' or 'reset'
--
-- peek: ARGV[2] algorithm, or 'connections'; ARGV[3..5] amount, period_us,
--       burst (connections: ARGV[3] = max). Nothing is taken or written.
--       Returns {exists, remaining, retry_us, reset_us}: exists 1 when
--       the store holds state for it; remaining whole tokens now;
--       retry_us 0 when a request of cost 1 would pass now, else the
--       wait for it (-1: never, or for connections unknown: a place comes
--       back when a connection closes); reset_us until the bucket is full
--       (windows: until the counted requests have left it).
-- reset: deletes the state of every algorithm under the base key (the
--       bucket is full again for the whole fleet; connection places are
--       not touched: they belong to open connections). Returns the number
--       of keys deleted.

local key = KEYS[1]
if key == nil or #KEYS ~= 1 then
  error({err = 'ERR sluice: inspect: expected 1 key'})
end
local suffixes = {':tb', ':gc', ':sw', ':sl', ':fw'}

if ARGV[1] == 'reset' then
  local keys = {}
  for i, s in ipairs(suffixes) do keys[i] = key .. s end
  return store.call('DEL', unpack(keys))
end
if ARGV[1] ~= 'peek' or #ARGV ~= 5 then
  error({err = 'ERR sluice: inspect: expected peek ALGORITHM AMOUNT PERIOD_US BURST, or reset'})
end

local t = store.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local exists = 0

if ARGV[2] == 'connections' then
  local max = tonumber(ARGV[3])
  if max == nil then error({err = 'ERR sluice: inspect: max is not a number'}) end
  local now_ms = (now - math.fmod(now, 1000)) / 1000
  local held = store.call('ZCOUNT', key .. ':cn', '(' .. string.format('%d', now_ms), '+inf')
  if held > 0 then exists = 1 end
  local retry = 0
  if held >= max then retry = -1 end
  return {exists, math.max(0, max - held), retry, 0}
end

local algorithms = {
  token_bucket = token_bucket, gcra = gcra, sliding_window = sliding_window,
  sliding_log = sliding_log, fixed_window = fixed_window,
}
local f = algorithms[ARGV[2]]
if f == nil then
  error({err = 'ERR sluice: inspect: unknown algorithm ' .. tostring(ARGV[2])})
end
for _, s in ipairs(suffixes) do
  if store.call('EXISTS', key .. s) == 1 then exists = 1 end
end
local amount, period_us, burst = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
-- cost 0: what is there now (always allowed, nothing taken); cost 1:
-- whether one more request would pass, else when.
local r0 = f(key, amount, period_us, burst, 0, now, false, 0)
local r1 = f(key, amount, period_us, burst, 1, now, false, 0)
local retry = 0
if r1[1] ~= 1 then retry = r1[3] end
return {exists, r0[2], retry, r0[4]}
