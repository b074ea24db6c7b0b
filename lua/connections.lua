-- sluice: connection leases, for limits with metric = connections (max = N
-- open connections per identity across the whole fleet), with a
-- first-come-first-served login queue. A connection holds a lease in every
-- limit it counts under; an instance that crashes stops renewing, and its
-- leases run out on their own.
--
-- KEYS[i]  base key of limit i: <key_prefix>{<limit>:<identity>}; the
--          script appends suffixes, so a limit's keys share its hash tag:
--            <base>:cn  ZSET holders: member -> lease expiry (ms)
--            <base>:cq  ZSET login queue: member -> arrival time (us)
--            <base>:cx  ZSET login queue expiry: member -> expiry (ms)
-- ARGV[1]  op: acquire | release | renew
-- ARGV[2]  now in microseconds, or -1: redis.call('TIME'); now_ms is
--          floor(now / 1000)
-- ARGV[3]  lease_ms (1 .. 31536000000): a holder not renewed, or a waiter
--          not polling again, within it is gone
-- acquire: ARGV[4] member (a connection id), ARGV[5] queue (0|1), then per
--          limit 2 values: max (>= 0), shadow (0|1). #ARGV = 5 + 2 x #KEYS.
-- release: ARGV[4] member. #ARGV = 4.
-- renew:   then per limit: m, followed by m members (#ARGV exactly that).
--
-- Every op first cleans each key: holders whose lease ran out, and waiters
-- whose :cx expiry passed (from :cq and :cx). Then:
--
-- acquire: one connection wants in, under every limit, all or nothing. Per
-- non-shadow limit: ahead = 0 without queue; with queue = 1 the member
-- joins :cq at now (ZADD NX: its place is its first attempt), its :cx is
-- now_ms + lease_ms, and ahead = its 0-based rank in :cq. A member already
-- in :cn (a renewal) is allowed whatever the count, and is not queued
-- there (ahead 0): it already counts in :cn. Otherwise allowed =
-- holders + ahead < max, so a waiter gets in only when there is room for
-- everyone who arrived before it. Admitted iff every non-shadow limit
-- allows (none: admitted). If admitted, the member holds a lease
-- (now_ms + lease_ms) in every non-shadow limit and leaves their queues;
-- a shadow limit (never queued) allows when it holds or holders < max,
-- and then takes a lease too, but never changes the answer. If not
-- admitted, no lease is taken anywhere; with queue the member keeps (or
-- takes) its places, without it nothing is written but the cleaning.
-- Returns {admitted, then per limit: allowed, holders (after), ahead}
-- (shadow: ahead 0). When not admitted, allowed still says which limits
-- would have allowed.
--
-- release: the member leaves :cn, :cq and :cx of every limit. Returns
-- {holders of each limit (after)}.
--
-- renew: every listed member gets a lease of now_ms + lease_ms in its
-- limit, with a plain ZADD: a live connection whose entry fell out (a
-- store outage, a restart) takes its slot back, even past max. Returns
-- the number of members renewed (an integer).
--
-- A key written is left with a PTTL of at least 2 x lease_ms (never
-- shortened: another instance may use a longer lease), so every key
-- outlives its entries and nothing lives forever. Errors write nothing.

local LEASE_MAX = 31536000000 -- a year in ms: now_ms + 2 x lease stays below 2^53
local BATCH = 500             -- members per ZADD / ZREM (unpack's stack is limited)

local function fail(msg) error({err = 'ERR sluice: connections: ' .. msg}) end
local function fmt(x) return string.format('%d', x) end -- never %.14g
local function idiv(a, b) return (a - math.fmod(a, b)) / b end -- floor, a >= 0
local function whole(s, lo) -- s as a whole number, lo <= x < 2^53, or nil
  if s == nil then return nil end -- tonumber(nil) raises a plain Lua error
  local x = tonumber(s)
  if x == nil or x ~= math.floor(x) or x < lo or x >= 9007199254740992 then return nil end
  return x
end
local function flag(s) -- '0' | '1' -> false | true, anything else nil
  if s == '1' then return true elseif s == '0' then return false end
  return nil
end

-- ---- arguments: all checked before anything is written -------------------

local op, n = ARGV[1], #KEYS
if op ~= 'acquire' and op ~= 'release' and op ~= 'renew' then
  fail('unknown op ' .. tostring(op))
end
local now_us = tonumber(ARGV[2])
if now_us == nil then fail('now is not a number') end
if now_us < 0 then
  local t = redis.call('TIME')
  now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
elseif whole(ARGV[2], 0) == nil then
  fail('now must be a whole number of us below 2^53')
end
local now_ms = idiv(now_us, 1000)
local lease = whole(ARGV[3], 1)
if lease == nil or lease > LEASE_MAX then
  fail('lease_ms must be a whole number from 1 to ' .. fmt(LEASE_MAX))
end
local expiry = fmt(now_ms + lease)

local member, queue, max, shadow = ARGV[4], false, {}, {}
if op == 'acquire' then
  if #ARGV ~= 5 + 2 * n then fail('acquire: expected 5 + 2 x #KEYS arguments') end
  queue = flag(ARGV[5])
  if queue == nil then fail('acquire: queue must be 0 or 1') end
  for i = 1, n do
    max[i], shadow[i] = whole(ARGV[4 + 2 * i], 0), flag(ARGV[5 + 2 * i])
    if max[i] == nil then fail('acquire: max must be a whole number >= 0') end
    if shadow[i] == nil then fail('acquire: shadow must be 0 or 1') end
  end
elseif op == 'release' then
  if #ARGV ~= 4 then fail('release: expected 4 arguments') end
else
  local a = 4 -- where the next limit's m is
  for _ = 1, n do
    local m = whole(ARGV[a], 0)
    if m == nil then fail('renew: m must be a whole number >= 0') end
    a = a + 1 + m
    if a - 1 > #ARGV then fail('renew: fewer members than the counts say') end
  end
  if a - 1 ~= #ARGV then fail('renew: more arguments than the counts say') end
end

-- ---- helpers ------------------------------------------------------------

-- Never shortens a TTL: another instance's lease may be longer than ours.
-- A key that does not exist (PTTL -2) is left alone.
local function touch(key)
  if redis.call('PTTL', key) < 2 * lease then
    redis.call('PEXPIRE', key, fmt(2 * lease))
  end
end

local function clean(base)
  local cq, cx = base .. ':cq', base .. ':cx'
  redis.call('ZREMRANGEBYSCORE', base .. ':cn', '-inf', fmt(now_ms))
  local gone = redis.call('ZRANGEBYSCORE', cx, '-inf', fmt(now_ms))
  if #gone > 0 then
    for i = 1, #gone, BATCH do
      redis.call('ZREM', cq, unpack(gone, i, math.min(i + BATCH - 1, #gone)))
    end
    redis.call('ZREMRANGEBYSCORE', cx, '-inf', fmt(now_ms))
  end
end

-- ---- acquire --------------------------------------------------------------

if op == 'acquire' then
  local admitted, holds, allowed, ahead = 1, {}, {}, {}
  for i = 1, n do
    local base = KEYS[i]
    clean(base)
    holds[i] = redis.call('ZSCORE', base .. ':cn', member) ~= false
    ahead[i] = 0
    local count = redis.call('ZCARD', base .. ':cn')
    if shadow[i] then
      allowed[i] = holds[i] or count < max[i]
    else
      if queue and not holds[i] then
        local cq, cx = base .. ':cq', base .. ':cx'
        redis.call('ZADD', cq, 'NX', fmt(now_us), member)
        redis.call('ZADD', cx, expiry, member)
        touch(cq)
        touch(cx)
        ahead[i] = redis.call('ZRANK', cq, member)
      end
      allowed[i] = holds[i] or count + ahead[i] < max[i]
      if not allowed[i] then admitted = 0 end
    end
  end
  if admitted == 1 then
    for i = 1, n do
      local base = KEYS[i]
      if allowed[i] then
        redis.call('ZADD', base .. ':cn', expiry, member)
        touch(base .. ':cn')
      end
      if not shadow[i] then
        redis.call('ZREM', base .. ':cq', member)
        redis.call('ZREM', base .. ':cx', member)
      end
    end
  end
  local out = {admitted}
  for i = 1, n do
    out[#out + 1] = allowed[i] and 1 or 0
    out[#out + 1] = redis.call('ZCARD', KEYS[i] .. ':cn')
    out[#out + 1] = ahead[i]
  end
  return out
end

-- ---- release --------------------------------------------------------------

if op == 'release' then
  local out = {}
  for i = 1, n do
    local base = KEYS[i]
    clean(base)
    for _, suffix in ipairs({':cn', ':cq', ':cx'}) do
      if redis.call('ZREM', base .. suffix, member) == 1 then touch(base .. suffix) end
    end
    out[i] = redis.call('ZCARD', base .. ':cn')
  end
  return out
end

-- ---- renew ----------------------------------------------------------------

local a, total = 4, 0
for i = 1, n do
  local base = KEYS[i]
  local cn, m = base .. ':cn', tonumber(ARGV[a])
  clean(base)
  local j = 1
  while j <= m do
    local args = {}
    for k = j, math.min(j + BATCH - 1, m) do
      args[#args + 1] = expiry
      args[#args + 1] = ARGV[a + k]
    end
    redis.call('ZADD', cn, unpack(args))
    j = j + BATCH
  end
  if m > 0 then touch(cn) end
  total = total + m
  a = a + 1 + m
end
return total
