-- End the wait of groups in the waiting room past max_wait_ms (router/table/waits.py `time_out`).
--
-- KEYS: 1 entries  2 load  3 cursor  4 room  5 parks  6 admitted  7 stats  8 deadlines
--       9 draining (skipped when sharing, router/table/placement.py)  10 waited (string: the
--       wait start up to which policy 'report' reported time-outs)  11 waits_out (list:
--       each time-out's event, "<now>|<max wait>|<outcome>|<gid>", until Kafka
--       acknowledged it: router/table/store/outboxes.py)
-- ARGV: 1 now in ms, or '' for the Redis server clock  2 max wait ms
--       3 policy: 'report' (each group once, and it keeps waiting: nothing changes but
--       the mark), 'share' (admit to the least-loaded destination, even busy: counted as
--       shared) or 'dead-letter' (stop the group: its parked and later messages are
--       dead-lettered; under both, a lane's ordinary messages are shared)  4 n, then every
--       destination name of the side
-- Multicast copies ('~*<dest>', router/table/multicast.py) never time out: they wait for their
-- destination's groups to end.
-- Returns: {now, gid_1, outcome_1, ...}; an outcome is a destination name, '!stop' or '!w'
-- (reported, still waiting). Each is also appended to the waits outbox in the same call, so
-- that its event is published even if the sweeper fails before Kafka acknowledged it.
local K_ENTRIES, K_LOAD, K_CURSOR, K_ROOM, K_PARKS, K_ADMITTED, K_STATS, K_DRAINING, K_WAITED =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[9], KEYS[10]
local K_WAITS_OUT = KEYS[11]
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local share = ARGV[3] == 'share'
local dests = {}
for i = 1, tonumber(ARGV[4]) do dests[i] = ARGV[4 + i] end
local n = #dests
local out = { string.format('%.0f', now) }
local cutoff = string.format('%.0f', now - tonumber(ARGV[2]))
local function told(gid, outcome)
  out[#out + 1] = gid
  out[#out + 1] = outcome
  redis.call('RPUSH', K_WAITS_OUT, out[1] .. '|' .. ARGV[2] .. '|' .. outcome .. '|' .. gid)
end
if ARGV[3] == 'report' then  -- the newly overdue only: each wait start once
  local upto = redis.call('GET', K_WAITED)
  local from = '-inf'
  if upto then from = '(' .. upto end
  local reported = 0
  for _, gid in ipairs(redis.call('ZRANGEBYSCORE', K_ROOM, from, cutoff)) do
    if string.sub(gid, 1, 2) ~= '~*' then
      told(gid, '!w')
      reported = reported + 1
    end
  end
  if not upto or tonumber(cutoff) > tonumber(upto) then redis.call('SET', K_WAITED, cutoff) end
  if reported > 0 then redis.call('HINCRBY', K_STATS, 'wait_timeouts', reported) end
  return out
end
local due = {}
for _, gid in ipairs(redis.call('ZRANGEBYSCORE', K_ROOM, '-inf', cutoff)) do
  if string.sub(gid, 1, 2) ~= '~*' then due[#due + 1] = gid end
end
if #due == 0 then return out end
local load = {}
local raw = redis.call('HGETALL', K_LOAD)
for i = 1, #raw, 2 do load[raw[i]] = tonumber(raw[i + 1]) end
local cursor = tonumber(redis.call('GET', K_CURSOR) or '0') % n
local skip = draining_set(K_DRAINING, dests)
local moved = false
for _, gid in ipairs(due) do
  redis.call('ZREM', K_ROOM, gid)
  local e = decode_entry(redis.call('HGET', K_ENTRIES, gid))
  if share or string.sub(gid, 1, 1) == '~' then  -- ordinary messages: shared, never lost
    local best = nil
    for i = 1, n do
      local l = load[dests[i]] or 0
      if not skip[dests[i]] and (best == nil or l < best) then best = l end
    end
    local pick = nil
    for k = 0, n - 1 do
      local i = (cursor + k) % n
      if not skip[dests[i + 1]] and (load[dests[i + 1]] or 0) == best then pick = i break end
    end
    local d = dests[pick + 1]
    cursor = (pick + 1) % n
    moved = true
    e.state, e.dest = 'admitted', d
    load[d] = (load[d] or 0) + 1
    redis.call('HINCRBY', K_LOAD, d, 1)
    redis.call('HSET', K_ADMITTED, gid, d)
    redis.call('HINCRBY', K_STATS, 'shared', 1)
    told(gid, d)
  else
    -- Stopped, but still in the room's hands: later messages park behind the earlier
    -- ones, and the drain dead-letters them all, in order.
    e.state, e.closing = 'admitted', '!stop'
    redis.call('HSET', K_ADMITTED, gid, '!')
    told(gid, '!stop')
  end
  redis.call('HSET', K_ENTRIES, gid, encode_entry(e))
end
if moved then redis.call('SET', K_CURSOR, cursor) end
redis.call('HINCRBY', K_STATS, 'wait_timeouts', #due)
return out
