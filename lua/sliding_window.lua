-- sluice: sliding window (the two-window counter estimate). At most <amount>
-- per <period_us>, estimated from the count of the current aligned window
-- and the previous one's count weighted by the part of it still inside the
-- sliding window [now - period, now]:
--
--   estimate = ceil(prev * (period - elapsed) / period) + cur
--
-- (elapsed = now - the current window's start). Rounding the previous
-- window's share up makes "estimate + cost <= amount" the exact comparison
-- of the real-valued estimate. <burst> is ignored.
--
-- prev * (period - elapsed) can pass 2^53 (a trillion per year), so it goes
-- through muldiv(), an exact long multiplication in base 2^7.
--
-- State: HASH <key>:sw  w = current window start, c = its count, p = the
-- previous window's count, t = time of the last take (a now before t counts
-- as t). PEXPIRE = two window lengths (the previous window is needed).
-- Returns {allowed, remaining, retry_after_us, reset_us}; retry -1 = never;
-- reset = until the estimate is 0. With commit false nothing is written, and
-- a second value, a function, commits what was decided.

local function cdiv(a, b) -- ceil(a / b) for 0 <= a < 2^53, b >= 1: exact
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end
local function fmt(x) return string.format('%d', x) end -- never %.14g

-- floor(a * b / c) and the remainder, exactly, for 0 <= a, c < 2^45,
-- 0 <= b < 2^53 and a quotient below 2^53. Below 2^53 the product is exact
-- as is; above, b is taken 7 bits at a time, most significant first, so
-- r * 128 + a * digit stays below 2^53.
local function muldiv(a, b, c)
  local x = a * b
  if x < 9007199254740992 then
    local r = math.fmod(x, c)
    return (x - r) / c, r
  end
  local digits = {}
  while b > 0 do
    local d = math.fmod(b, 128)
    digits[#digits + 1] = d
    b = (b - d) / 128
  end
  local q, r = 0, 0
  for i = #digits, 1, -1 do
    local y = r * 128 + a * digits[i]
    r = math.fmod(y, c)
    q = q * 128 + (y - r) / c
  end
  return q, r
end

local function sliding_window(key, amount, period_us, burst, cost, now_us, commit)
  key = key .. ':sw'
  if not (amount and period_us and cost and now_us) then
    error({err = 'ERR sluice: sliding_window: a parameter is not a number'})
  end
  if not (amount >= 1 and amount <= 1099511627776 and period_us >= 1
          and period_us <= 31536000000000 and cost >= 0) then
    error({err = 'ERR sluice: sliding_window: parameters out of range'})
  end
  local P, A = period_us, amount
  local ttl_ms = math.max(1, cdiv(2 * P, 1000))

  local st = redis.call('HMGET', key, 'w', 'c', 'p', 't')
  local w, k, prev, t = tonumber(st[1]), tonumber(st[2]), tonumber(st[3]), tonumber(st[4])
  local now = now_us
  if t and now < t then now = t end
  local ws = now - math.fmod(now, P)
  if w == nil or k == nil or prev == nil then
    k, prev = 0, 0
  elseif w ~= ws then
    if ws == w + P then prev = k else prev = 0 end -- one window on, or more
    k = 0
  end
  local el = now - ws
  local x = P - el
  local shared, rem = muldiv(prev, x, P)
  if rem > 0 then shared = shared + 1 end
  local used = shared + k

  local allowed, retry = 0, 0
  if cost > A then retry = -1
  elseif used + cost > A then
    if k + cost <= A then
      -- in this window, once ceil(prev * x' / P) <= A - k - cost (prev > 0 here)
      retry = x - muldiv(A - k - cost, P, prev)
    else
      -- in the next one, where cur becomes prev: ceil(k * x'' / P) <= A - cost
      retry = 2 * P - el - muldiv(A - cost, P, k)
    end
  else allowed = 1 end

  local function answer(u, count)
    local reset = 0
    if count > 0 then reset = 2 * P - el elseif prev > 0 then reset = x end
    return {allowed, math.max(0, A - u), retry, reset}
  end
  local function apply()
    if allowed == 1 and cost > 0 then
      redis.call('HSET', key, 'w', fmt(ws), 'c', fmt(k + cost), 'p', fmt(prev), 't', fmt(now))
      redis.call('PEXPIRE', key, fmt(ttl_ms))
      return answer(used + cost, k + cost)
    end
    return answer(used, k)
  end
  if commit then return apply() end
  return answer(used, k), apply
end

-- standalone: EVAL <this file> 1 <key> <amount> <period_us> <burst> <cost> <now_us|-1>
local now = tonumber(ARGV[5])
if now == nil or now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
return sliding_window(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
                      tonumber(ARGV[4]), now, true)
