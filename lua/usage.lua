-- sluice: adds one instance's usage of one identity and window to the
-- fleet's sum, once (docs/usage.md).
--
-- KEYS[1]  the usage hash:   <key_prefix>usage:{<identity>}:<YYYYMMDDHHMM>
-- KEYS[2]  what was applied: <key_prefix>usage_applied:{<identity>}:<YYYYMMDDHHMM>
--          (the same hash tag: one slot in a Redis Cluster)
-- ARGV[1]  the instance's id
-- ARGV[2]  the number of this delivery (an integer >= 1): an instance
--          numbers its deliveries in order and has at most one of each
--          identity-window out at a time, so a number at or below the
--          highest applied for it is a retry of one already applied
-- ARGV[3]  the keys' time to live, ms (usage_ttl)
-- ARGV[4..] field, value pairs: integers, except connection_seconds (a
--          decimal number of seconds)
--
-- Returns 1 when applied, 0 when it had been (nothing changed).

local seq = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
if seq == nil or seq < 1 or ttl == nil or ttl < 1 or #ARGV % 2 ~= 1 then
  error({err = 'ERR sluice: usage: bad arguments'})
end
local last = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if last ~= nil and seq <= last then
  return 0
end
for i = 4, #ARGV, 2 do
  if ARGV[i] == 'connection_seconds' then
    redis.call('HINCRBYFLOAT', KEYS[1], ARGV[i], ARGV[i + 1])
  else
    redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
-- Both live as long as the counts: a retry can come no later than that
-- and still find what was applied.
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('PEXPIRE', KEYS[2], ttl)
return 1
