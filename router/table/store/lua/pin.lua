-- Pin a new group to a destination before its first message (router/table/placement.py `pin`).
--
-- KEYS: 1 entries  2 deadlines  3 load  4 stats
-- ARGV: 1 now in ms, or '' for the Redis server clock  2 guarantee ID  3 destination
--       4 TTL ms (the pinned entry is swept like any idle entry if no message comes)
-- The entry: the destination, no lane, state 'pinned'; the destination's load counts it.
-- Returns: 1 if pinned, 0 if the group already has an entry (nothing changed).
local K_ENTRIES, K_DEADLINES, K_LOAD, K_STATS = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local gid, dest, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
if redis.call('HEXISTS', K_ENTRIES, gid) == 1 then return 0 end
local snow = string.format('%.0f', now)
local e = { dest = dest, opened = snow, updated = snow, ttl = string.format('%.0f', ttl),
            closing = '', lane = '', state = 'pinned', parks = 0, next = -1, fence = '',
            origin = '' }
redis.call('HSET', K_ENTRIES, gid, encode_entry(e))
redis.call('ZADD', K_DEADLINES, string.format('%.0f', now + ttl), gid)
redis.call('HINCRBY', K_LOAD, dest, 1)
redis.call('HINCRBY', K_STATS, 'pinned', 1)
return 1
