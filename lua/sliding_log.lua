-- sluice: sliding log. Exact: at most <amount> events in any <period_us>;
-- an event at time e counts while now < e + period. A request of cost N is
-- N events. <burst> is ignored.
--
-- State: ZSET <key>:sl, one member per event, scored by its time (us;
-- exact as a double). Members are "<time>:<index>", the indexes at one time
-- being 0, 1, 2, ... (events at one time leave together), so every member
-- is unique. The newest event's time is the latest time
-- seen; a now before it counts as it. Reads: ZRANGE (newest), ZCOUNT, and
-- when denied one ZRANGEBYSCORE (the event whose leaving makes room);
-- when admitted: ZREMRANGEBYSCORE of what left, ZCOUNT of the events at
-- this time, ZADD, PEXPIRE (one period). Memory: up to <amount> members per key.
-- Returns {allowed, remaining, retry_after_us, reset_us}; retry -1 = never;
-- reset = until the log is empty. With commit false nothing is written, and
-- a second value, a function, commits what was decided.

local function cdiv(a, b) -- ceil(a / b) for 0 <= a < 2^53, b >= 1: exact
  local r = math.fmod(a, b)
  local q = (a - r) / b
  if r > 0 then q = q + 1 end
  return q
end
local function fmt(x) return string.format('%d', x) end -- never %.14g

local function sliding_log(key, amount, period_us, burst, cost, now_us, commit)
  key = key .. ':sl'
  if not (amount and period_us and cost and now_us) then
    error({err = 'ERR sluice: sliding_log: a parameter is not a number'})
  end
  if not (amount >= 1 and amount <= 100000 and period_us >= 1
          and period_us <= 31536000000000 and cost >= 0) then
    error({err = 'ERR sluice: sliding_log: parameters out of range'})
  end
  local P, A = period_us, amount
  local ttl_ms = math.max(1, cdiv(P, 1000))

  local now = now_us
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  local newest = tonumber(last[2])
  if newest and now < newest then now = newest end
  local inside = '(' .. fmt(now - P) -- events after now - P
  local cnt = redis.call('ZCOUNT', key, inside, '+inf')

  local allowed, retry = 0, 0
  if cost > A then retry = -1
  elseif cnt + cost > A then
    -- the (cnt + cost - A)-th event inside has to leave first
    local e = redis.call('ZRANGEBYSCORE', key, inside, '+inf', 'WITHSCORES',
                         'LIMIT', fmt(cnt + cost - A - 1), '1')
    retry = tonumber(e[2]) + P - now
  else allowed = 1 end

  local function answer(count, latest)
    local reset = 0
    if count > 0 then reset = latest + P - now end
    return {allowed, math.max(0, A - count), retry, reset}
  end
  local function apply()
    if allowed == 1 and cost > 0 then
      redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - P))
      local score = fmt(now)
      local i = redis.call('ZCOUNT', key, score, score) -- members at this time: 0 .. i-1
      local last = i + cost
      while i < last do -- ZADD in batches: Lua's stack holds ~8000 values
        local args = {'ZADD', key}
        local stop = math.min(last, i + 200)
        while i < stop do
          args[#args + 1] = score
          args[#args + 1] = score .. ':' .. fmt(i)
          i = i + 1
        end
        redis.call(unpack(args))
      end
      redis.call('PEXPIRE', key, fmt(ttl_ms))
      return answer(cnt + cost, now)
    end
    return answer(cnt, newest)
  end
  if commit then return apply() end
  return answer(cnt, newest), apply
end

-- standalone: EVAL <this file> 1 <key> <amount> <period_us> <burst> <cost> <now_us|-1>
local now = tonumber(ARGV[5])
if now == nil or now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
return sliding_log(KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
                   tonumber(ARGV[4]), now, true)
