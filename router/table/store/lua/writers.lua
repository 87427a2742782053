-- Forget the route script's callers that have been idle past a bound: the writers hash
-- gains a field per caller (one per unit process ever started) and nothing else removes
-- one. A caller idle past half the bound does not ask for the lost-write check on its next
-- call (router/table/store/writers.py), so forgetting it never looks like a lost write.
--
-- KEYS: 1 writers (hash caller -> '<write count of its last call>|<server time of it, s>')
-- ARGV: 1 the bound in seconds
-- Returns: {callers forgotten, callers kept}
local t = redis.call('TIME')
local now = tonumber(t[1])
local bound = now - tonumber(ARGV[1])
local flat = redis.call('HGETALL', KEYS[1])
local gone = 0
for i = 1, #flat, 2 do
  local writes, at = string.match(flat[i + 1], '^(%d*)|?(%d*)$')
  at = tonumber(at)
  if not at then
    -- Written before calls were stamped: stamped now, forgotten a bound from now.
    redis.call('HSET', KEYS[1], flat[i], (writes or '') .. '|' .. t[1])
  elseif at < bound then
    redis.call('HDEL', KEYS[1], flat[i])
    gone = gone + 1
  end
end
return { gone, #flat / 2 - gone }
