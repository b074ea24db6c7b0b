-- sluice: token bucket. Capacity <burst> tokens, refilled with <amount>
-- tokens per <period_us>; a request takes <cost> tokens or is denied.
--
-- Exact integers only (Lua 5.1 numbers are doubles, exact below 2^53).
-- With g = gcd(amount, period_us) a token is S = period_us / g "units" and
-- each microsecond refills K = amount / g units, so refills never round.
-- Inside the bounds of docs/algorithms.md (burst * S <= 2^52, ...) every
-- value below stays under 2^53. src/limit/algo.c does the same arithmetic.
--
-- State: HASH <key>:tb  v = units in the bucket, t = time of the last take
-- (us), s = S when v was stored (a reload may change the rate).
-- Returns {allowed, remaining, retry_after_us, reset_us}; retry -1 = never.
-- With commit false nothing is written, and a second value, a function,
-- commits what was decided (decide.lua: read once, write once).

local function idiv(a, b) -- floor(a / b) for 0 <= a < 2^53, b >= 1: exact
  return (a - math.fmod(a, b)) / b
end
local function cdiv(a, b) -- ceil(a / b)
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end
local function gcd(a, b)
  while b > 0 do a, b = b, math.fmod(a, b) end
  return a
end
local function fmt(x) return string.format('%d', x) end -- never %.14g

local function token_bucket(key, amount, period_us, burst, cost, now_us, commit)
  key = key .. ':tb'
  if not (amount and period_us and burst and cost and now_us) then
    error({err = 'ERR sluice: token_bucket: a parameter is not a number'})
  end
  if not (amount >= 1 and amount <= 1099511627776 and period_us >= 1
          and period_us <= 31536000000000 and burst >= 1 and burst <= 1099511627776
          and cost >= 0) then
    error({err = 'ERR sluice: token_bucket: parameters out of range'})
  end
  local g = gcd(amount, period_us)
  local S, K = period_us / g, amount / g
  if burst > idiv(4503599627370496, S) then
    error({err = 'ERR sluice: token_bucket: burst x period / gcd(amount, period) over 2^52'})
  end
  local cap = burst * S
  local ttl_ms = math.max(1, cdiv(cdiv(cap, K), 1000))

  local st = redis.call('HMGET', key, 'v', 't', 's')
  local v, t, s = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
  local now = now_us
  if v == nil or t == nil or s == nil or s <= 0 then
    v, t, s = cap, now, S -- no state: full
  end
  if s ~= S then v = math.min(idiv(v, s), burst) * S end -- rate changed: keep whole tokens
  if v > cap then v = cap end
  if now < t then now = t end -- time went backwards: as at the last take
  if v < cap then
    local e = now - t -- clamped before multiplying: past the fill time it is full
    if e >= cdiv(cap - v, K) then v = cap else v = v + e * K end
  end

  local allowed, retry, need = 0, 0, cost * S
  if cost > burst then retry = -1
  elseif need > v then retry = cdiv(need - v, K)
  else allowed = 1 end

  local function answer(units)
    return {allowed, idiv(units, S), retry, cdiv(cap - units, K)}
  end
  local function apply()
    if allowed == 1 and cost > 0 then
      local left = v - need
      redis.call('HSET', key, 'v', fmt(left), 't', fmt(now), 's', fmt(S))
      redis.call('PEXPIRE', key, fmt(ttl_ms))
      return answer(left)
    end
    return answer(v)
  end
  if commit then return apply() end
  return answer(v), apply
end

-- standalone: EVAL <this file> 1 <key> <amount> <period_us> <burst> <cost> <now_us|-1>
local now = tonumber(ARGV[5])
if now == nil or now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
return token_bucket(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
                    tonumber(ARGV[4]), now, true)
