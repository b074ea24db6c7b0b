-- sluice: the instance heartbeat. Who is alive, for on_failure = local
-- (each instance then enforces limit / live instances).
--
-- KEYS[1]  the instance set: a ZSET of instance id -> expiry time (ms)
-- ARGV[1]  this instance's id
-- ARGV[2]  ttl in ms: an entry not refreshed within it is dead
-- ARGV[3]  1 = leave (remove this instance), anything else = join / refresh
--
-- Reads the store's clock (TIME), drops dead entries, keeps the set itself
-- alive for at least 2 x ttl after the last heartbeat. Returns the number of live
-- instances (after removing this one when leaving).

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + (tonumber(t[2]) - math.fmod(tonumber(t[2]), 1000)) / 1000
local ttl = tonumber(ARGV[2])
if ttl == nil or ttl < 1 then
  error({err = 'ERR sluice: heartbeat: ttl must be at least 1 ms'})
end
local key = KEYS[1]
if ARGV[3] == '1' then
  redis.call('ZREM', key, ARGV[1])
else
  redis.call('ZADD', key, string.format('%d', now_ms + ttl), ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', now_ms))
-- The set outlives its entries; an instance with a shorter ttl never
-- shortens what another one set.
if redis.call('PTTL', key) < 2 * ttl then
  redis.call('PEXPIRE', key, string.format('%d', 2 * ttl))
end
return redis.call('ZCARD', key)
