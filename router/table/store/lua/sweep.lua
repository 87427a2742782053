-- Remove entries idle past their entry deletion time (the patent's deletion process).
--
-- KEYS: 1 entries  2 deadlines  3 load  4 closing  5 outbox (list)  6 stats  7 cursor
--       8 inflight  9 room  10 parks  11 admitted  12 done  13 done_at (finished groups in
--       logical order, forgotten with the same bound as entries)  14 draining
-- ARGV: 1 now in ms, or '' for the Redis server clock   2 at most this many entries
--       3 the side's horizon in ms, or '' (or absent) for none: the sweeper's proof that
--         every record written before it has been consumed by the side's units
--         (router/sweeper/horizon.py). An entry is removed only if its deadline (update time +
--         TTL) is before both now and the horizon; one past its deadline but not before
--         the horizon stays in the deadlines set and is looked at again next round.
--       4 n, then every destination name of the side: a destination a swept group
--         freed goes to the oldest waiting group (router/table/room.py)
-- Each removed entry is appended to the outbox as JSON {e: entry, t: swept at, g: gid}
-- so that the sweeper publishes an abandoned-group event for it even if it dies right
-- after this.
-- Returns: {now, gid_1, entry_1, gid_2, entry_2, ...}
local K_ENTRIES, K_DEADLINES, K_LOAD, K_CLOSING, K_OUTBOX, K_STATS, K_CURSOR, K_INFLIGHT,
  K_ROOM, K_PARKS, K_ADMITTED, K_DONE, K_DONE_AT, K_DRAINING = KEYS[1], KEYS[2], KEYS[3],
  KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12], KEYS[13],
  KEYS[14]
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local snow = string.format('%.0f', now)
local bound = now
local horizon = tonumber(ARGV[3] or '')
if horizon and horizon < bound then bound = horizon end
local out = { snow }
-- A score may be earlier than its entry's deadline (prelude DUE_STEPS): the first `limit`
-- candidates, in score order, are checked against their entries and a late one gets its
-- entry's deadline as its score, until they all have theirs; so the entries removed are
-- those the exact deadlines name (oldest first, ties by ID). At most RESCORE_MAX
-- rescored per call (after that, only the candidates whose score is exact go this time).
local RESCORE_MAX = 10000
local limit = tonumber(ARGV[2])
local range = { K_DEADLINES, '-inf', '(' .. string.format('%.0f', bound), 'WITHSCORES',
                'LIMIT', 0, limit }
local rescored = 0
local due = {}  -- gid -> its entry, read, if its score is its deadline
local cands
repeat
  cands = redis.call('ZRANGEBYSCORE', unpack(range))
  local late = false
  for i = 1, #cands, 2 do
    local gid = cands[i]
    local v = redis.call('HGET', K_ENTRIES, gid)
    due[gid] = v or false
    local u, t = nil, nil
    if v then u, t = string.match(v, '^[^|]*|[^|]*|([^|]*)|([^|]*)|') end
    local x = tonumber(u or '') and tonumber(t or '') and tonumber(u) + tonumber(t)
    if x and x ~= tonumber(cands[i + 1]) then
      due[gid] = nil  -- not this time
      if rescored < RESCORE_MAX then
        redis.call('ZADD', K_DEADLINES, string.format('%.0f', x), gid)
        rescored = rescored + 1
        late = true
      end
    end
  end
until not late
local ids = {}
for i = 1, #cands, 2 do
  if due[cands[i]] ~= nil then ids[#ids + 1] = cands[i] end
end
for _, gid in ipairs(ids) do
  local v = due[gid] or nil
  redis.call('ZREM', K_DEADLINES, gid)
  if v then
    local d = string.match(v, '^([^|]*)|')
    redis.call('HDEL', K_ENTRIES, gid)
    redis.call('ZREM', K_CLOSING, gid)
    redis.call('ZREM', K_ROOM, gid)
    redis.call('HDEL', K_ADMITTED, gid)
    forget_parks(K_PARKS, gid)
    if d ~= '!' and redis.call('HINCRBY', K_LOAD, d, -1) <= 0 then
      redis.call('HDEL', K_LOAD, d)
    end
    redis.call('RPUSH', K_OUTBOX, cjson.encode({ e = v, t = snow, g = gid }))
    out[#out + 1] = gid
    out[#out + 1] = v
  end
end
if #ids > 0 then redis.call('HINCRBY', K_STATS, 'swept', (#out - 1) / 2) end
if #out > 1 then
  -- An entry a unit remembers is past its deadline only a TTL after the step it names, so
  -- only a call whose time went back before this sweep's could still use it: route.lua
  -- refuses such a call (`remembered`).
  local at = tonumber(redis.call('HGET', K_STATS, 'swept_at') or '0')
  if now > at then redis.call('HSET', K_STATS, 'swept_at', snow) end
end
for _, g in ipairs(redis.call('ZRANGEBYSCORE', K_DONE_AT, '-inf', '(' .. string.format('%.0f', bound),
    'LIMIT', 0, tonumber(ARGV[2]))) do
  redis.call('HDEL', K_DONE, g)
  redis.call('ZREM', K_DONE_AT, g)
end
local dests = {}
for i = 1, tonumber(ARGV[4] or '0') do dests[i] = ARGV[4 + i] end
if #dests > 0 then
  admit(K_ROOM, K_ENTRIES, K_LOAD, K_CURSOR, K_INFLIGHT, K_ADMITTED, dests, K_DRAINING)
end
return out
