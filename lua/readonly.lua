-- sluice: the head of the inspect script (lua/embed.sh puts it before the
-- algorithm files). The algorithms read their state with commit false and
-- write nothing then, except gcra's one write of a state converted to
-- other numbers; here every command that is not a read is a no-op, so a
-- look at a bucket never changes it, whatever the algorithm does.
local store = redis
local reads = {
  HMGET = true, HGET = true, EXISTS = true, TIME = true, ZRANGE = true,
  ZCOUNT = true, ZRANGEBYSCORE = true, ZCARD = true,
}
local redis = {
  call = function(cmd, ...)
    if reads[string.upper(cmd)] then return store.call(cmd, ...) end
    return false
  end,
}
