-- Settle after a Kafka commit: end a batch's in-flight leases, release finished groups,
-- open (or release) the admitted groups a drain forwarded that nothing was parked into
-- since (the batch's own park leases still count for that), end the batch's park leases,
-- admit waiting groups.
--
-- KEYS: 1 entries  2 deadlines  3 load  4 closing  5 stats  6 inflight  7 cursor  8 room
--       9 parks  10 admitted  11 done  12 done_at (route.lua: finished groups in logical
--       order, whose later members below their next number are duplicates)  13 draining
--       14 owners (hash lane -> token of its latest claim, owners.lua)
-- ARGV: 1 batch ID ('' if none)  2 n destinations the batch sent ordinary messages to,
--       then their names; then n finals, then pairs of guarantee ID, token (the source
--       position the group's final was routed from); then n drains, then pairs of
--       guarantee ID, parks seen, next sequence number or -1 (router/table/room.py `drained`);
--       then n room lanes the drains came from, then pairs of lane, the caller's claim
--       token (router/table/store/owners.py); then n, then every destination name of the
--       side (for admissions)
-- A drain names its group by ID only, so a drain whose room lane was claimed by another
-- unit since (a zombie's settle, late) is ignored: the lane's
-- new owner opens its groups (its drain markers), and a later group of the same ID,
-- admitted meanwhile, must not open before its own parked records are drained. The rest of
-- the settle holds whoever calls it (its batch committed): leases end, finals release by
-- their token.
-- An entry is removed only if it is still closing with that same token: a group whose ID
-- was reused after its final (the mark cleared or replaced) is left alone. The token '*'
-- (an operator's `router table release`) removes the entry whatever its state, and
-- '@<dest>' (an operator's `router table evict`) any entry on that destination (either
-- moves the table's generation on: stats 'generation'). The token
-- '!stop' (a group this batch stopped) frees a stopped group's destination and keeps its
-- entry, without a destination, so that its later messages are still parked.
-- Returns: {the number of entries released, the room lane whose claim fenced the drains
-- or ''}.
local K_ENTRIES, K_DEADLINES, K_LOAD, K_CLOSING, K_STATS, K_INFLIGHT, K_CURSOR, K_ROOM,
  K_PARKS, K_ADMITTED, K_DONE, K_DONE_AT, K_DRAINING, K_OWNERS = KEYS[1], KEYS[2], KEYS[3],
  KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11], KEYS[12],
  KEYS[13], KEYS[14]
local batch = ARGV[1]
local i = 2
local function count()
  local n = tonumber(ARGV[i])
  i = i + 1
  return n
end
local function unload(d)
  if d ~= '!' and redis.call('HINCRBY', K_LOAD, d, -1) <= 0 then redis.call('HDEL', K_LOAD, d) end
end
for _ = 1, count() do
  redis.call('ZREM', K_INFLIGHT, ARGV[i] .. '|' .. batch)
  i = i + 1
end
-- The drains' next numbers, read ahead: a group in logical order released by this batch
-- is remembered as finished with the number its drain reached.
local reached = {}
local fenced_by = nil
do
  local j = i + 1 + 2 * tonumber(ARGV[i])
  local ndrains = tonumber(ARGV[j])
  local f = j + 3 * ndrains + 1  -- the drains' room lanes and the caller's claims
  local fences = {}
  for k = 1, 2 * tonumber(ARGV[f]) do fences[k] = ARGV[f + k] end
  fenced_by = fenced_lane(K_OWNERS, fences)
  -- read even when fenced: a number reached is used only for a group this batch's final
  -- releases by its token (the same group, its drain committed), never for a later one
  for _ = 1, ndrains do
    reached[ARGV[j + 1]] = tonumber(ARGV[j + 3])
    j = j + 3
  end
end
-- The finals' entries are read in one HMGET and the released groups' keys removed in one
-- call per key (and a destination's load in one HINCRBY), as releasing them one by one
-- would: a group is released at most once, a later final of it finds no entry.
local released = 0
-- An operator's release or eviction removed an entry: the table's generation moves on, so
-- that no unit decides a member from its memory of that group (route.lua `remembered`).
local by_operator = false
local nfin = count()
local ents = {}  -- gid -> its entry (decoded once), or false: none, or released here
for s = 1, nfin, 1000 do
  local chunk = {}
  for k = s, math.min(s + 999, nfin) do chunk[#chunk + 1] = ARGV[i + 2 * (k - 1)] end
  local got = redis.call('HMGET', K_ENTRIES, unpack(chunk))
  for k = 1, #chunk do
    if ents[chunk[k]] == nil then ents[chunk[k]] = got[k] or false end
  end
end
local gone, unloads = {}, {}  -- released gids; destination -> groups released from it
for _ = 1, nfin do
  local gid, token = ARGV[i], ARGV[i + 1]
  i = i + 2
  local e = ents[gid]
  if type(e) == 'string' and token ~= '!stop' then
    -- the common final: its entry closing with this token, in lane order (next -1: no tail,
    -- or one whose next is -1), released without decoding it
    local d, c, x = string.match(e, '^([^|]*)|[^|]*|[^|]*|[^|]*|([^|]*)|[^|]*(.*)$')
    if c == token and c ~= '' and (x == '' or string.find(x, '^|[^|]*|[^|]*|%-1|')) then
      e = { dest = d, closing = c, next = -1 }
      ents[gid] = e
    end
  end
  if type(e) == 'string' then
    e = decode_entry(e)
    ents[gid] = e
  end
  if e then
    if token == '!stop' then
      if e.closing == '!stop' and e.dest ~= '!' then
        unloads[e.dest] = (unloads[e.dest] or 0) + 1
        e.dest = '!'
        redis.call('HSET', K_ENTRIES, gid, encode_entry(e))
        -- stopped while admitted (the drain closed it there): still the room's, no longer
        -- holding a destination
        if e.state == 'admitted' then redis.call('HSET', K_ADMITTED, gid, '!') end
      end
    elseif e.closing == token or token == '*' or token == '@' .. e.dest then
      if token == '*' or string.sub(token, 1, 1) == '@' then by_operator = true end
      gone[#gone + 1] = gid
      ents[gid] = false
      if e.dest ~= '!' then unloads[e.dest] = (unloads[e.dest] or 0) + 1 end
      if e.next >= 0 then
        local n = math.max(e.next, reached[gid] or -1)
        local x = tonumber(e.updated) + tonumber(e.ttl)
        local old = redis.call('HGET', K_DONE, gid)  -- an earlier group of the ID: keep
        if old then  -- the larger number and the later deadline
          local on, ox = string.match(old, '^(%-?%d+)|(%-?%d+)$')
          n, x = math.max(n, tonumber(on)), math.max(x, tonumber(ox))
        end
        redis.call('HSET', K_DONE, gid, n .. '|' .. string.format('%.0f', x))
        redis.call('ZADD', K_DONE_AT, string.format('%.0f', x), gid)
      end
      released = released + 1
    end
  end
end
for s = 1, #gone, 1000 do
  local chunk = gone
  if #gone > 1000 then chunk = { unpack(gone, s, math.min(s + 999, #gone)) } end
  redis.call('HDEL', K_ENTRIES, unpack(chunk))
  redis.call('ZREM', K_DEADLINES, unpack(chunk))
  redis.call('ZREM', K_CLOSING, unpack(chunk))
  redis.call('ZREM', K_ROOM, unpack(chunk))
  redis.call('HDEL', K_ADMITTED, unpack(chunk))
end
if #gone > 0 and redis.call('ZCARD', K_PARKS) > 0 then  -- their park leases (forget_parks)
  local was = {}
  for _, gid in ipairs(gone) do was[gid] = true end
  for _, m in ipairs(redis.call('ZRANGE', K_PARKS, 0, -1)) do
    if was[string.match(m, '^[^|]*|(.*)$')] then redis.call('ZREM', K_PARKS, m) end
  end
end
for d, n in pairs(unloads) do
  if redis.call('HINCRBY', K_LOAD, d, -n) <= 0 then redis.call('HDEL', K_LOAD, d) end
end
local drains = {}
for _ = 1, count() do
  drains[#drains + 1] = { ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]) }
  i = i + 3
end
i = i + 1 + 2 * tonumber(ARGV[i])  -- (the fences, read above)
if fenced_by and #drains > 0 then
  drains = {}
  redis.call('HINCRBY', K_STATS, 'drains_fenced', 1)
end
local dests = {}
for _ = 1, count() do
  dests[#dests + 1] = ARGV[i]
  i = i + 1
end
if #dests > 0 then
  admit(K_ROOM, K_ENTRIES, K_LOAD, K_CURSOR, K_INFLIGHT, K_ADMITTED, dests, K_DRAINING)
end
for _, drain in ipairs(drains) do
  local gid, seen, nxt = drain[1], drain[2], drain[3]
  local v = redis.call('HGET', K_ENTRIES, gid)
  if v then
    local e = decode_entry(v)
    if e.state == 'admitted' and e.next >= 0 and nxt > e.next then
      e.next = nxt  -- what the drain reached, committed
      redis.call('HSET', K_ENTRIES, gid, encode_entry(e))
    end
    if e.state == 'admitted' and e.parks == seen and not has_parks(K_PARKS, gid) then
      redis.call('HDEL', K_ADMITTED, gid)
      if string.sub(gid, 1, 1) == '~' then  -- a lane's ordinary messages: done
        redis.call('HDEL', K_ENTRIES, gid)
        redis.call('ZREM', K_DEADLINES, gid)
        unload(e.dest)
      else
        e.state = 'open'
        e.parks = 0
        redis.call('HSET', K_ENTRIES, gid, encode_entry(e))
        if e.closing ~= '' and e.closing ~= '!stop' then
          local t = redis.call('TIME')
          redis.call('ZADD', K_CLOSING, t[1] .. string.sub(string.format('%06d', t[2]), 1, 3), gid)
        end
      end
    end
  end
end
-- The batch's own park leases end only now: a drain this batch settles does not open (or
-- release) a group this same batch parked into. A replayed park (its first batch aborted)
-- is not counted again, so only its lease shows that a record came after the drain's check.
if batch ~= '' then
  for _, m in ipairs(redis.call('ZRANGE', K_PARKS, 0, -1)) do
    if string.match(m, '^([^|]*)|') == batch then redis.call('ZREM', K_PARKS, m) end
  end
end
if #dests > 0 then
  admit(K_ROOM, K_ENTRIES, K_LOAD, K_CURSOR, K_INFLIGHT, K_ADMITTED, dests, K_DRAINING)
end
if released > 0 then redis.call('HINCRBY', K_STATS, 'released', released) end
if by_operator then redis.call('HINCRBY', K_STATS, 'generation', 1) end
return { released, fenced_by or '' }
