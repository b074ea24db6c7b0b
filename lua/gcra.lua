-- sluice: GCRA (generic cell rate algorithm). The same limit as a token
-- bucket of capacity <burst> refilled with <amount> per <period_us>
-- (emission interval period_us / amount), keeping only one value: the
-- theoretical arrival time TAT, the moment the bucket would be full again.
--
-- Units as in token_bucket.lua: g = gcd(amount, period_us), a token is
-- S = period_us / g units, a microsecond is K = amount / g units. The
-- emission interval S / K us is usually not a whole number of us, so TAT is
-- kept exactly as whole us plus a fraction in units (0 <= f < K).
--
-- State: HASH <key>:gc  t = TAT's whole us, f = its fraction in units;
-- s, k, b = S, K and burst when it was stored (the numbers: a reload or an
-- override may change them; a state without them is read as before).
-- Debt = TAT - now (in units): what is missing from a full bucket. With
-- only TAT kept, a now earlier than before looks like an early request; the
-- debt is clamped to one full bucket plus max_wait (the reservations a delay
-- limit may hold), so a clock step back never leaves the bucket worse than
-- that (docs/algorithms.md).
-- Returns {allowed, remaining, retry_after_us, reset_us}; retry -1 = never.
-- With commit false nothing is written, and a second value, a function,
-- commits what was decided.

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

local function gcra(key, amount, period_us, burst, cost, now_us, commit, max_wait)
  key = key .. ':gc'
  if not (amount and period_us and burst and cost and now_us and max_wait) then
    error({err = 'ERR sluice: gcra: a parameter is not a number'})
  end
  if not (amount >= 1 and amount <= 1099511627776 and period_us >= 1
          and period_us <= 31536000000000 and burst >= 1 and burst <= 1099511627776
          and cost >= 0 and max_wait >= 0) then
    error({err = 'ERR sluice: gcra: parameters out of range'})
  end
  local g = gcd(amount, period_us)
  local S, K = period_us / g, amount / g
  if burst > idiv(4503599627370496, S) then
    error({err = 'ERR sluice: gcra: burst x period / gcd(amount, period) over 2^52'})
  end
  local cap = burst * S
  if max_wait > idiv(4503599627370496 - cap, K) then
    error({err = 'ERR sluice: gcra: burst and max_wait over 2^52 units'})
  end
  -- With reservations (max_wait > 0) the debt may pass a full bucket by
  -- up to max_wait; that is also the clamp for a clock stepping back.
  local top = cap + max_wait * K
  local ttl_ms = math.max(1, cdiv(cdiv(cap, K) + max_wait, 1000))

  local st = redis.call('HMGET', key, 't', 'f', 's', 'k', 'b')
  local tu, tf = tonumber(st[1]) or 0, tonumber(st[2]) or 0
  local os, ok, ob = tonumber(st[3]), tonumber(st[4]), tonumber(st[5])
  local now = now_us
  local function store(t, f)
    redis.call('HSET', key, 't', fmt(t), 'f', fmt(f), 's', fmt(S), 'k', fmt(K), 'b', fmt(burst))
  end
  if os and ok and ob and os >= 1 and ok >= 1 and ob >= 1 and ob <= idiv(4503599627370496, os)
     and (os ~= S or ok ~= K or ob ~= burst) then
    -- Stored under other numbers (an override came, changed or went, a
    -- reload): the whole tokens the bucket holds now under the old ones
    -- are kept, up to the new burst, as token_bucket does, and that is
    -- the state from now on (written once, even by a denied request:
    -- nothing is taken). Kept as it was, a TAT far ahead under a slow
    -- rate would refuse under the new numbers until the old ones' time.
    local tokens, ocap = ob, ob * os
    if tu >= now then
      local dt = tu - now -- clamped before multiplying
      tokens = 0
      if dt <= idiv(ocap, ok) and dt * ok + tf < ocap then
        tokens = idiv(ocap - dt * ok - tf, os)
      end
    end
    local d = cap - math.min(tokens, burst) * S
    tu, tf = now + idiv(d, K), math.fmod(d, K)
    if d > 0 then
      store(tu, tf)
      redis.call('PEXPIRE', key, fmt(ttl_ms))
    end
  elseif tf >= K then
    tu, tf = tu + 1, 0 -- stored under another rate, without the numbers: round up
  end
  local debt = 0
  if tu >= now then
    local dt = tu - now -- clamped before multiplying
    if dt > idiv(top, K) then debt = top else debt = math.min(dt * K + tf, top) end
  end
  local v = math.max(cap - debt, 0)

  local allowed, retry, need = 0, 0, cost * S
  if cost > burst then retry = -1
  elseif debt + need > cap then
    local wait = cdiv(debt + need - cap, K)
    if wait <= max_wait then allowed, retry = 1, wait
    elseif max_wait > 0 then retry = wait - max_wait
    else retry = wait end
  else allowed = 1 end

  local function apply()
    if allowed == 1 and cost > 0 then
      local d = debt + need
      store(now + idiv(d, K), math.fmod(d, K))
      redis.call('PEXPIRE', key, fmt(ttl_ms))
      return {1, idiv(math.max(v - need, 0), S), retry, cdiv(d, K)}
    end
    return {allowed, idiv(v, S), retry, cdiv(debt, K)}
  end
  if commit then return apply() end
  if allowed == 1 then
    return {1, idiv(math.max(v - need, 0), S), retry, cdiv(debt + need, K)}, apply
  end
  return {0, idiv(v, S), retry, cdiv(debt, K)}, apply
end

-- standalone: EVAL <this file> 1 <key> <amount> <period_us> <burst> <cost> <now_us|-1> [max_wait_us]
local now = tonumber(ARGV[5])
if now == nil or now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
return gcra(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
            tonumber(ARGV[4]), now, true, tonumber(ARGV[6] or '0'))
