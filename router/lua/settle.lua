-- Settle after a Kafka commit: end a batch's in-flight leases and release finished groups.
--
-- KEYS: 1 entries  2 deadlines  3 load  4 closing  5 stats  6 inflight
-- ARGV: 1 batch ID ('' if none)  2 n destinations the batch sent ordinary messages to,
--       then their names, then pairs of guarantee ID, token (the source position the
--       group's final was routed from)
-- An entry is removed only if it is still closing with that same token: a group whose ID
-- was reused after its final (the mark cleared or replaced) is left alone. The token '*'
-- (an operator's `router table release`) removes the entry whatever its state. The token
-- '!stop' (a group this batch stopped) frees a stopped group's destination and keeps its
-- entry, without a destination, so that its later messages are still parked.
-- Returns: the number of entries released.
local K_ENTRIES, K_DEADLINES, K_LOAD, K_CLOSING, K_STATS, K_INFLIGHT =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local batch = ARGV[1]
local ndest = tonumber(ARGV[2])
for i = 1, ndest do redis.call('ZREM', K_INFLIGHT, ARGV[2 + i] .. '|' .. batch) end
local released = 0
for i = 3 + ndest, #ARGV, 2 do
  local gid, token = ARGV[i], ARGV[i + 1]
  local v = redis.call('HGET', K_ENTRIES, gid)
  if v then
    local d, rest, c, tail = string.match(v, '^([^|]*)(|[^|]*|[^|]*|[^|]*|)([^|]*)(.*)$')
    if token == '!stop' then
      if c == '!stop' and d ~= '!' then
        redis.call('HSET', K_ENTRIES, gid, '!' .. rest .. c .. tail)
        if redis.call('HINCRBY', K_LOAD, d, -1) <= 0 then redis.call('HDEL', K_LOAD, d) end
      end
    elseif c == token or token == '*' then
      redis.call('HDEL', K_ENTRIES, gid)
      redis.call('ZREM', K_DEADLINES, gid)
      redis.call('ZREM', K_CLOSING, gid)
      if d ~= '!' and redis.call('HINCRBY', K_LOAD, d, -1) <= 0 then
        redis.call('HDEL', K_LOAD, d)
      end
      released = released + 1
    end
  end
end
if released > 0 then redis.call('HINCRBY', K_STATS, 'released', released) end
return released
