-- sluice: the fleet's no-load baseline of one upstream (adaptive
-- concurrency, docs/adaptive.md "The fleet's baseline"). Every adapting
-- listener of every worker and instance in front of the upstream publishes
-- its own baseline here and gets back the least live one, so that they
-- all compare latency with one reference.
--
-- KEYS[1]  the upstream's hash: field = publisher (instance id and
--          listener), value = "<expiry ms on the store's clock> <baseline ns>"
-- ARGV[1]  this publisher
-- ARGV[2]  its baseline in ns (0: none yet, only read)
-- ARGV[3]  ttl in ms: an entry not refreshed within it is dead
--
-- Reads the store's clock (TIME), so the instances' clocks do not matter;
-- drops dead entries; keeps the hash alive for at least 2 x ttl after the
-- last call. Returns {least baseline ns (0: no live entry), ms until the
-- entry it came from expires, live entries}.

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + (tonumber(t[2]) - math.fmod(tonumber(t[2]), 1000)) / 1000
local base = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
if base == nil or base < 0 or base > 3600e9 then
  error({err = 'ERR sluice: baseline: the baseline must be 0 .. 3600e9 ns'})
end
if ttl == nil or ttl < 1 or ttl > 86400000 then
  error({err = 'ERR sluice: baseline: ttl must be 1 .. 86400000 ms'})
end
local key = KEYS[1]
if base > 0 then
  redis.call('HSET', key, ARGV[1], string.format('%d %d', now_ms + ttl, base))
end
local least, until_ms, live = 0, 0, 0
local all = redis.call('HGETALL', key)
for i = 1, #all, 2 do
  local e, v = string.match(all[i + 1], '^(%d+) (%d+)$')
  e, v = tonumber(e), tonumber(v)
  if e == nil or v == nil or e <= now_ms then
    redis.call('HDEL', key, all[i])
  else
    live = live + 1
    if v > 0 and (least == 0 or v < least) then
      least, until_ms = v, e
    end
  end
end
if live > 0 and redis.call('PTTL', key) < 2 * ttl then
  redis.call('PEXPIRE', key, string.format('%d', 2 * ttl))
end
return {least, least > 0 and (until_ms - now_ms) or 0, live}
