-- sluice: fixed window. At most <amount> per window of <period_us>; windows
-- are aligned to multiples of period_us since the Unix epoch, so every
-- instance agrees on them. <burst> is ignored.
--
-- State: HASH <key>:fw  w = the window's start (us), n = its count
-- (HINCRBY), t = time of the last take. A window opens with HSET and its
-- PEXPIRE (one window length) in the same script call, so the key is never
-- immortal; a take inside the window refreshes the PEXPIRE. A now before t
-- counts as t: time going backwards never reopens an older window.
-- Returns {allowed, remaining, retry_after_us, reset_us}; retry -1 = never;
-- reset = until the window ends. With commit false nothing is written, and
-- a second value, a function, commits what was decided.

local function cdiv(a, b) -- ceil(a / b) for 0 <= a < 2^53, b >= 1: exact
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end
local function fmt(x) return string.format('%d', x) end -- never %.14g

local function fixed_window(key, amount, period_us, burst, cost, now_us, commit)
  key = key .. ':fw'
  if not (amount and period_us and cost and now_us) then
    error({err = 'ERR sluice: fixed_window: a parameter is not a number'})
  end
  if not (amount >= 1 and amount <= 1099511627776 and period_us >= 1
          and period_us <= 31536000000000 and cost >= 0) then
    error({err = 'ERR sluice: fixed_window: parameters out of range'})
  end
  local P = period_us
  local ttl_ms = math.max(1, cdiv(P, 1000))

  local st = redis.call('HMGET', key, 'w', 'n', 't')
  local w, k, t = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
  local now = now_us
  if t and now < t then now = t end
  local ws = now - math.fmod(now, P)
  local open = (w ~= ws or k == nil) -- this take opens the window
  if open then k = 0 end
  local reset = ws + P - now

  local allowed, retry = 0, 0
  if cost > amount then retry = -1
  elseif k + cost > amount then retry = reset
  else allowed = 1 end

  local function answer(count)
    return {allowed, math.max(0, amount - count), retry, reset}
  end
  local function apply()
    if allowed == 1 and cost > 0 then
      if open then
        redis.call('HSET', key, 'w', fmt(ws), 'n', fmt(cost), 't', fmt(now))
      else
        redis.call('HINCRBY', key, 'n', fmt(cost))
        redis.call('HSET', key, 't', fmt(now))
      end
      redis.call('PEXPIRE', key, fmt(ttl_ms))
      return answer(k + cost)
    end
    return answer(k)
  end
  if commit then return apply() end
  return answer(k), apply
end

-- standalone: EVAL <this file> 1 <key> <amount> <period_us> <burst> <cost> <now_us|-1>
local now = tonumber(ARGV[5])
if now == nil or now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
return fixed_window(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
                    tonumber(ARGV[4]), now, true)
