-- The send side's group bands (`router/unit/steps/bands.py`): the priority band a group took from
-- its first member the router saw, so that its later members follow it whatever their own
-- header says. KEYS[1]: hash gid -> 'band|call'; KEYS[2]: zset gid -> last use (ms);
-- KEYS[3]: the call counter.
-- ARGV[1]: now in ms ('' for the Redis server clock); ARGV[2]: keep ms (a band unused
-- this long is forgotten); ARGV[3]: n, then n pairs: guarantee ID, call number of a group
-- whose final was committed (forgotten first, unless a later call used the ID again: a
-- new group under the same ID); then pairs: guarantee ID, the member's own band.
-- Returns {call number, band of each pair's group in order}: the stored one, else the
-- member's own (stored).
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local keep = tonumber(ARGV[2])
local nforget = tonumber(ARGV[3])
local call = redis.call('INCR', KEYS[3])
local first = 4 + 2 * nforget
for i = 4, first - 1, 2 do
  local gid, upto = ARGV[i], tonumber(ARGV[i + 1])
  local v = redis.call('HGET', KEYS[1], gid)
  if v and tonumber(string.match(v, '|(%d+)$')) <= upto then
    redis.call('HDEL', KEYS[1], gid)
    redis.call('ZREM', KEYS[2], gid)
  end
end
local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%.0f', now - keep),
  'LIMIT', 0, 100)
for _, gid in ipairs(old) do
  redis.call('HDEL', KEYS[1], gid)
  redis.call('ZREM', KEYS[2], gid)
end
local out = {call}
for i = first, #ARGV, 2 do
  local gid, own = ARGV[i], ARGV[i + 1]
  local v = redis.call('HGET', KEYS[1], gid)
  local band = own
  if v then band = string.match(v, '^(%d+)|') end
  redis.call('HSET', KEYS[1], gid, band .. '|' .. call)
  redis.call('ZADD', KEYS[2], string.format('%.0f', now), gid)
  out[#out + 1] = band
end
return out
