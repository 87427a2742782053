-- Claim lanes (source or room partitions) for a unit that was just assigned them: each
-- lane's token becomes larger than any given before (the Redis server clock in µs, or the
-- last token + 1), so that a call with an older token is refused (prelude `fenced_lane`).
--
-- KEYS: 1 owners (hash lane -> token of its latest claim)
-- ARGV: the lanes
-- Returns: the tokens, in the lanes' order (strings)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
for i = 1, #ARGV do  -- one HGET per lane: any number of lanes (unpack() stops near 8,000)
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  local tok = math.max(now, (tonumber(cur or '') or 0) + 1)
  out[i] = string.format('%.0f', tok)
  redis.call('HSET', KEYS[1], ARGV[i], out[i])
end
return out
