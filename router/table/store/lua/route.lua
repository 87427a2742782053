-- Route one batch atomically: the rules of router/table/routing.py (the reference model).
--
-- KEYS: 1 entries (hash gid -> "dest|opened|updated|ttl|closing|lane|...", prelude.lua)
--       2 deadlines (zset gid -> updated + ttl)   3 load (hash dest -> open groups)
--       4 cursor (string)   5 closing (zset gid -> time marked)   6 stats (hash)
--       7 inflight (zset "dest|batch" -> lease expiry): ordinary messages not yet committed
--       8 epoch (string): created with the table; missing again means the table was lost
--       9 writes (counter): +1 per call; lower than a caller saw means writes were lost
--       10 room (zset gid -> wait start)  11 parks (zset "batch|gid" -> park lease expiry)
--       12 admitted (hash gid -> reserved destination): the waiting room, router/table/room.py
--       13 writers (hash caller -> '<the write count of its last call>|<server time, s>',
--          router/table/store/writers.py)
--       14 done (hash gid -> 'next|deadline ms': logical order, a finished group; the
--          sweeper forgets it)
--       15 draining (set of destinations nothing new is placed on, router/table/placement.py)
--       16 owners (hash lane -> token of its latest claim, owners.lua)
-- ARGV: 1 now in ms, or '' for the Redis server clock   2 '<policy>[:<max staged>[:<homes>]]':
--       policy 'share' | 'hold' | 'wait', max staged messages (a staged group over it
--       streams: '!W'), homes (lanes' home destinations: 0 off, else the cell count)
--       3 batch ID   4 lease ms   5 the epoch the caller last saw ('' if none)
--       6 "<the write count of the caller's last call ('' if none)>:<caller ID>"
--       7 n destinations, then n destination names
--       then n finals the caller routed before this call whose transaction commits
--       before this call's records are written (an earlier call for the same batch, the
--       caller's overlapped batch in flight), then pairs of guarantee ID, token; then n
--       earlier batch IDs of the caller (whose ordinary messages land before this batch's
--       records: they fence nothing for it), then the IDs; then n lanes the caller claimed
--       (router/table/store/owners.py), then pairs of lane, the caller's claim token;
--       then n messages of the batch the caller decided from its memory of its groups
--       (router/table/store/memory.py: not sent), and if n > 0 the table's generation the
--       caller last saw, then n TTLs, then pairs of TTL, the update time this call's step
--       gives it (as the caller remembered it); then 3 values per message, in three columns (every message's first, then every
--       one's second, then third; router/table/store/codec.py `encode`): guarantee ID
--       ('' = ordinary); its kind, "<flags>|<TTL ms>|<lane (source partition)>", which
--       repeats from message to message (read once per distinct kind: `kindof`); its
--       position, "<lane order's sequence number n, or ''>=<token (source position)>"
--       (`unpos`).
--       Flags: ('f' final,
--       's' force share, 'd' dead-lettered but routed for its group, 'p' poison that stops
--       its group, 'c' continuation: sequence number > 0, 'k' close marker: with 'f' and
--       'c', never an orphan, 'g' whole-group delivery: a new group is staged in the room
--       until its final, policy 'wait', 'l<n>' logical order with sequence number n (-1: unreadable): the
--       token is then always the message's source position, 'm' multicast: an ordinary
--       message whose token is its target destinations, comma-separated). Lane order's
--       number is only recorded: the entry's 'routed' is the last one routed straight to
--       its destination (ignored with 'l').
-- Returns: {-1, lane} if a lane's claim token is older than the lane's latest claim (the
--          caller lost the lane: nothing changed), else
--          (stats 'remembered' counts the messages callers decided from their memory)
--          {-2} if the caller's memory no longer holds (`stale`, below: nothing changed;
--          the caller forgets and calls again with every message), else
--          {shared, held, created, stopped, orphans, epoch, reset, writes, decision_1,
--          ..., decision_n, remembered, generation, now}: remembered lists (comma-separated,
--          from 0) the messages after which their group's entry is open on their lane at
--          this step's update time, written by nothing but `same` would leave as it is
--          (`same`, `fast` and a new group's one message, none a final); generation is
--          the table's (stats 'generation': +1 at every operator's release or eviction);
--          now the time this call used. A decision is a destination name, '!h' (held), '!s' (skipped: its lane
--          is held), '!p' (parked: its group is stopped), '!P<dest>' (the message that
--          stopped its group, which was on <dest>), '!o' (orphan: a continuation
--          without an entry), '!n' (a close marker for an unknown group: ignored), '!x'
--          (its open group lives on another lane), '!D' (logical order: a member of a
--          group that finished, below its final: a duplicate) or '!w' (parked in the waiting room:
--          an ordinary one in its lane's pseudo-group '~<lane>'; '!W': parked, and its
--          staged group went over the bound and now waits streamed) or '!m<d,...>|<d,...>'
--          (multicast: a copy straight to each destination before the '|', each one after
--          it parked in the room in the destination's copies pseudo-group '~*<dest>',
--          router/table/multicast.py). reset is 1
--          if the table was lost, entirely (the caller's epoch is gone) or partly (fewer
--          writes than the caller saw: a crash lost the last ones); a partial loss starts
--          a new epoch, so that every caller learns it.
-- A pinned entry (state 'pinned', pin.lua) is a known group whose first message makes it an
-- ordinary open entry on its lane; a draining destination takes no new group and no
-- ordinary message, unless every destination drains (counted: stats 'drain_ignored').
local K_ENTRIES, K_DEADLINES, K_LOAD, K_CURSOR, K_CLOSING, K_STATS, K_INFLIGHT, K_EPOCH,
  K_WRITES, K_ROOM, K_PARKS, K_ADMITTED, K_WRITERS, K_DONE, K_DRAINING, K_OWNERS = KEYS[1],
  KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10], KEYS[11],
  KEYS[12], KEYS[13], KEYS[14], KEYS[15], KEYS[16]

local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local policy, max_staged_s, homes_s = string.match(ARGV[2], '^([^:]*):?([^:]*):?(.*)$')
local hold = policy == 'hold'
local wait = policy == 'wait'
local max_staged = tonumber(max_staged_s) or 10000
local homes = tonumber(homes_s) or 0
local batch = ARGV[3]
local lease = tonumber(ARGV[4])
local seen_epoch = ARGV[5]
local seen_s, writer = string.match(ARGV[6], '^([^:]*):(.*)$')
local seen_writes = tonumber(seen_s)
local ndest = tonumber(ARGV[7])
local dests = {}
local load = {}
for i = 1, ndest do
  dests[i] = ARGV[7 + i]
  load[dests[i]] = 0
end
local function num(x) return string.format('%.0f', x) end
-- A message's flags, read once per distinct flags string in a call (they repeat: 'c',
-- 'fc', ...): whether it has flag c; its logical (l) number.
local flagsets = {}
local function flagset(flags)
  local F = flagsets[flags]
  if not F then
    local seq = tonumber(string.match(flags, 'l(%-?%d+)'))
    -- `fast`: nothing in the flags but what a known open group's next member carries
    F = { seq = seq, fast = not seq and not string.find(flags, '[pkgm]'),
          m = string.find(flags, 'm', 1, true) ~= nil, f = string.find(flags, 'f', 1, true) ~= nil }
    flagsets[flags] = F
  end
  return F
end
local function has(flags, c)
  local F = flagsets[flags] or flagset(flags)
  local v = F[c]
  if v == nil then
    v = string.find(flags, c, 1, true) ~= nil
    F[c] = v
  end
  return v
end
-- A message's kind, "flags|TTL|lane", read once per distinct kind in a call.
local kinds = {}
local function kindof(k)
  local flags, ttl, lane = string.match(k, '^([^|]*)|([^|]*)|(.*)$')
  local K = { flags = flags, ttl = ttl, lane = lane, F = flagset(flags) }
  kinds[k] = K
  return K
end
-- A message's position (read only where needed: not for a member `fast` routes without a
-- write, nor an ordinary message unless it is parked): its token, and lane order's
-- number (nil in logical order, `seq`, or if none), as a number and as encode_entry
-- writes it (the entry's 'routed').
local qsets = {}  -- number as sent -> { number, as written }
local function unpos(pos, seq)
  local q, token = string.match(pos, '^(%d*)=(.*)$')
  if seq or q == '' then return token, nil, nil end
  local Q = qsets[q]
  if not Q then
    local lane_seq = tonumber(q)
    Q = { lane_seq, (#q < 16 and string.find(q, '^[1-9]%d*$') or q == '0') and q
      or string.format('%.0f', lane_seq) }
    qsets[q] = Q
  end
  return token, Q[1], Q[2]
end

local base = 7 + ndest
-- Finals routed before this call, in a transaction that commits first: a group of theirs
-- not yet released counts as closed earlier in this batch (freed below).
local carried = {}
for _ = 1, tonumber(ARGV[base + 1]) do
  carried[#carried + 1] = { ARGV[base + 2], ARGV[base + 3] }
  base = base + 2
end
base = base + 1
local earlier = {}
for _ = 1, tonumber(ARGV[base + 1]) do
  earlier[ARGV[base + 2]] = true
  base = base + 1
end
base = base + 1
-- The lanes this call speaks for, with the caller's claim tokens (owners.lua): a zombie's
-- call (a lane claimed by another unit since) changes nothing.
local fences = {}
for _ = 1, tonumber(ARGV[base + 1]) do
  fences[#fences + 1] = ARGV[base + 2]
  fences[#fences + 1] = ARGV[base + 3]
  base = base + 2
end
base = base + 1
local fenced_by = fenced_lane(K_OWNERS, fences)
if fenced_by then return { -1, fenced_by } end
-- The caller's memory of its groups (router/table/store/memory.py): the plain members of
-- groups it saw in the form `same` reads, on lanes it still holds (the fence above), at
-- the generation and the steps it names. It decided them as `same` would, if nothing
-- changed those entries since: the table was not lost (epoch, writes), no operator's
-- release or eviction removed an entry (generation), no sweep removed one at a later time
-- than this call's (Redis's clock went back: swept_at), and this call's step of each TTL is
-- the one remembered. Otherwise nothing is changed (read only, so far).
local remembered = tonumber(ARGV[base + 1])
base = base + 1
if remembered > 0 then
  local gen, swept_at = unpack(redis.call('HMGET', K_STATS, 'generation', 'swept_at'))
  local stale = redis.call('GET', K_EPOCH) ~= seen_epoch or (gen or '0') ~= ARGV[base + 1]
    or (tonumber(swept_at) or 0) >= now
  if not stale then
    local w = tonumber(redis.call('GET', K_WRITES) or '0')
    local mine = tonumber(string.match(redis.call('HGET', K_WRITERS, writer) or '', '^(%d*)'))
    stale = not seen_writes or w + 1 <= seen_writes or mine == nil or mine < seen_writes
  end
  local nttl = tonumber(ARGV[base + 2])
  base = base + 2
  for _ = 1, nttl do
    if num(updated_at(now, tonumber(ARGV[base + 1]))) ~= ARGV[base + 2] then stale = true end
    base = base + 2
  end
  if stale then return { -2 } end
end

-- Leases that ended (their unit died) no longer fence; a destination they made clean
-- goes to the oldest waiting group first.
end_leases(K_INFLIGHT, K_PARKS, now)
-- Logical order: a member (seq > 0, or -1) of a group that finished, below its final's
-- number: a duplicate, until the sweeper forgets the group (like an entry: past its
-- deadline and the side's horizon).
local function finished(gid, seq)
  local v = redis.call('HGET', K_DONE, gid)
  if not v then return false end
  return seq < tonumber(string.match(v, '^(%-?%d+)|'))
end
admit(K_ROOM, K_ENTRIES, K_LOAD, K_CURSOR, K_INFLIGHT, K_ADMITTED, dests, K_DRAINING)
local draining, all_draining = draining_set(K_DRAINING, dests)
-- Groups (and lanes' ordinary messages) waiting for any destination; multicast copies
-- wait for their own destination only, and nothing queues behind them.
local room_n = redis.call('ZCARD', K_ROOM)
if room_n > 0 then
  for i = 1, ndest do
    if redis.call('ZSCORE', K_ROOM, '~*' .. dests[i]) then room_n = room_n - 1 end
  end
end

local raw = redis.call('HGETALL', K_LOAD)
for i = 1, #raw, 2 do load[raw[i]] = tonumber(raw[i + 1]) end
local load0 = {}
for d, l in pairs(load) do load0[d] = l end
local cursor = tonumber(redis.call('GET', K_CURSOR) or '0') % ndest
local cursor0 = cursor


-- The table's epoch: a table that disappeared (Redis restarted without its data) comes
-- back with a new epoch, and the caller learns that its table was lost.
local epoch = redis.call('GET', K_EPOCH)
local reset = 0
if not epoch then
  epoch = num(now) .. '-' .. batch
  redis.call('SET', K_EPOCH, epoch)
  if seen_epoch ~= '' then reset = 1 end
elseif seen_epoch ~= '' and seen_epoch ~= epoch then
  reset = 1
end
local writes = redis.call('INCR', K_WRITES)
local mine = tonumber(string.match(redis.call('HGET', K_WRITERS, writer) or '', '^(%d*)'))
redis.call('HSET', K_WRITERS, writer, num(writes) .. '|' .. redis.call('TIME')[1])
if seen_writes and (writes <= seen_writes or mine == nil or mine < seen_writes) then
  -- The caller's own last write is gone (its count is older than what the caller saw,
  -- whatever other callers wrote since): the table lost its latest writes (a crash under
  -- appendfsync everysec, a failover to a replica behind). A new epoch tells everyone.
  epoch = num(now) .. '-' .. batch .. '-partial'
  redis.call('SET', K_EPOCH, epoch)
  reset = 1
end

-- Destinations with ordinary messages of another batch in flight are not clean.
local fenced = {}
for _, member in ipairs(redis.call('ZRANGE', K_INFLIGHT, 0, -1)) do
  local d, b = string.match(member, '^([^|]*)|(.*)$')
  if b ~= batch and not earlier[b] then fenced[d] = true end
end
local nmsg = (#ARGV - base) / 3
-- The messages' values in three columns: IDs from base + 1, kinds from KB + 1, positions
-- from PB + 1.
local KB, PB = base + nmsg, base + 2 * nmsg

-- Fetch every known entry of the batch in one pass.
local cache = {}
local want, nwant = {}, 0
local last_final = {}  -- gid -> index of its last final in this call (choice.py `follow`)
local lane_group = {}  -- lane -> its pseudo-group's ID
local again = {}  -- gid -> true: more than one message of it in this call
-- Copies pseudo-groups of a multicast message (its position is its target destinations).
local function want_copies(m)
  for d in string.gmatch((unpos(ARGV[PB + m + 1])), '[^,]+') do
    if cache['~*' .. d] == nil then
      cache['~*' .. d] = false
      nwant = nwant + 1
      want[nwant] = '~*' .. d
    end
  end
end
if not wait then
  -- the messages' entries straight from the ID column (an ordinary message's '' finds none,
  -- a group's next message in the call its entry again)
  for s = 1, nmsg, 1000 do
    local e = math.min(s + 999, nmsg)
    local vals = redis.call('HMGET', K_ENTRIES, unpack(ARGV, base + s, base + e))
    for m = s - 1, e - 1 do
      local gid = ARGV[base + m + 1]
      if gid == '' then
        local K = kinds[ARGV[KB + m + 1]] or kindof(ARGV[KB + m + 1])
        if K.F.m then want_copies(m) end
      elseif cache[gid] == nil then
        cache[gid] = vals[m - s + 2] or false
      else
        again[gid] = true
      end
    end
  end
end
-- (A grouped message's kind is read here only under 'wait': its final matters to `follow`.)
for m = 0, wait and nmsg - 1 or -1 do
  local gid = ARGV[base + m + 1]
  if gid == '' then  -- ordinary, or multicast (codec.py `encode`)
    local K = kinds[ARGV[KB + m + 1]] or kindof(ARGV[KB + m + 1])
    if K.F.m then want_copies(m) end  -- multicast
    local lane = K.lane  -- its lane's pseudo-group
    gid = lane_group[lane]
    if not gid then
      gid = '~' .. lane
      lane_group[lane] = gid
    end
  else
    local K = kinds[ARGV[KB + m + 1]] or kindof(ARGV[KB + m + 1])
    if K.F.f then last_final[gid] = m end
  end
  if gid ~= '' then
    if cache[gid] == nil then
      cache[gid] = false
      nwant = nwant + 1
      want[nwant] = gid
    else
      again[gid] = true
    end
  end
end
for _, c in ipairs(carried) do
  if cache[c[1]] == nil then
    cache[c[1]] = false
    nwant = nwant + 1
    want[nwant] = c[1]
  end
end
for s = 1, #want, 1000 do
  local chunk = want
  if #want > 1000 then
    chunk = {}
    for j = s, math.min(s + 999, #want) do chunk[#chunk + 1] = want[j] end
  end
  local vals = redis.call('HMGET', K_ENTRIES, unpack(chunk))
  for j = 1, #chunk do
    local v = vals[j]
    if v then cache[chunk[j]] = v end  -- decoded when needed (`entry`)
  end
end

-- cache: gid -> its entry, decoded (a table), or as stored (a string: not decoded yet,
-- or updated by `fast` only).
local fast_ttl = {}  -- gid -> the TTL of an entry `fast` wrote, or a new one (stored closing: '')
-- An entry's deadline (update time + TTL) is written only if one of them changed: a stored
-- entry, decoded, remembers them ('due0'); `fast` marks the entries it wrote with both as
-- stored (fast_due).
local fast_due = {}
local function entry(gid)
  local e = cache[gid]
  if type(e) == 'string' then
    e = decode_entry(e)
    if fast_ttl[gid] then
      e.closing0 = ''
    else
      e.due0 = e.updated .. '|' .. e.ttl
    end
    cache[gid] = e
  end
  return e
end

-- Groups per destination whose final was routed earlier in this batch: the rest of the
-- batch (one transaction) is appended after those finals, so they do not make it busy.
-- For a new group only finals from its own lane count (freed_lane[dest .. '|' .. lane]):
-- its entry survives an abort, and a replay keeps only each lane's own order.
local freed = {}
local freed_lane = {}  -- lane -> dest -> finals of that lane routed in this batch
local carried_lane = {}  -- lane -> dest -> of those, the finals carried from before this call
local closed_here = {}
local taken = {}  -- destinations a new group took after a final of this batch freed them
local function eff(d) return load[d] - (freed[d] or 0) end
local function close(gid, d, lane)
  if not closed_here[gid] then
    closed_here[gid] = { d, lane }
    freed[d] = (freed[d] or 0) + 1
    local fl = freed_lane[lane]
    if not fl then fl = {}; freed_lane[lane] = fl end
    fl[d] = (fl[d] or 0) + 1
  end
end
local function reopen(gid)
  local c = closed_here[gid]
  if c then
    closed_here[gid] = nil
    freed[c[1]] = freed[c[1]] - 1
    freed_lane[c[2]][c[1]] = freed_lane[c[2]][c[1]] - 1
  end
end

-- A final routed before this call (`carried`) whose group is not released yet: closed
-- earlier in this batch, as if routed in it (its transaction commits before this one's).
for _, c in ipairs(carried) do
  local e = entry(c[1])
  if e and e.state == 'open' and e.closing == c[2] and e.dest ~= '!' then
    local lane = string.match(c[2], '^(.*)/%d+$') or ''  -- the final's own lane
    close(c[1], e.dest, lane)
    local cl = carried_lane[lane]
    if not cl then cl = {}; carried_lane[lane] = cl end
    cl[e.dest] = (cl[e.dest] or 0) + 1
  end
end

-- The first cheapest destination at or after the cursor: cost is (load, fenced) for a
-- new group of lane `lane`, load alone for an ordinary message (lane nil). Returns its
-- 0-based index and busy.
local none = {}
-- A lane's home destination index (router/table/choice.py `home`): its source partition
-- p ('<topic>/<p>') as the p // homes-th of its cell's, modulo the destinations; false off.
local home_of = {}
local function home(lane)
  local h = home_of[lane]
  if h == nil then
    local p = homes > 0 and tonumber(string.match(lane, '/(%d+)$') or '')
    h = p and math.floor(p / homes) % ndest or false
    home_of[lane] = h
  end
  return h
end
local no_draining = next(draining) == nil
-- The common case's pass (no destination draining, and no final of this call freed one
-- for the choice: `fl` none): the first cheapest in the cursor's order, the cost load x 2,
-- + 1 if fenced (`fen`), then the lane's home `h` if among the cheapest, as the general
-- pass below gives it then.
local function cheapest(fen, h)
  local best, first, hc = nil, nil, nil
  for i = cursor, ndest - 1 do
    local d = dests[i + 1]
    local c = load[d] * 2
    if fen[d] then c = c + 1 end
    if i == h then hc = c end
    if best == nil or c < best then best, first = c, i end
  end
  for i = 0, cursor - 1 do
    local d = dests[i + 1]
    local c = load[d] * 2
    if fen[d] then c = c + 1 end
    if i == h then hc = c end
    if best == nil or c < best then best, first = c, i end
  end
  if hc == best then first = h end
  return first, best ~= 0
end
local function choose(lane, group)
  local fl = group and (freed_lane[lane] or none)
  local h = home(lane)
  if no_draining then
    if fl == none then return cheapest(fenced, h) end
    if not group and next(freed) == nil then return cheapest(none, h) end
  end
  -- one pass in the cursor's order: the first cheapest, and the first cheapest a final of
  -- the lane freed (which a new group prefers: see below)
  local best, first, pref, hc = nil, nil, nil, nil
  for k = 0, ndest - 1 do
    local i = (cursor + k) % ndest
    local d = dests[i + 1]
    if not draining[d] then  -- nothing new goes there
      local c
      if fl then
        c = (load[d] - (fl[d] or 0)) * 2
        if fenced[d] then c = c + 1 end
      else
        c = (load[d] - (freed[d] or 0)) * 2
      end
      if i == h then hc = c end
      if best == nil or c < best then
        best, first, pref = c, i, nil
        if fl and (fl[d] or 0) > 0 then pref = i end
      elseif c == best and not pref and fl and (fl[d] or 0) > 0 then
        pref = i
      end
    end
  end
  if best == nil then return nil, true end
  -- among the cheapest, a new group prefers a destination a final of its lane freed in
  -- this batch: a lane's groups that follow each other stay on few destinations, and the
  -- clean ones stay clean for the other lanes and the waiting room; then, new group or
  -- ordinary message, the lane's home
  if not pref and hc == best then pref = h end
  return pref or first, best ~= 0
end

-- While others wait, a new group complete within this call may follow a final of its own
-- lane routed in this call (router/table/choice.py `follow`): the first destination at or
-- after the cursor freed by such a final, with nothing else open there and not fenced;
-- nil if none. Its old group and the new one are released at this batch's settle, the
-- first moment the room's oldest group could have had it: nobody waits longer.
local function follow(lane)
  local fl = freed_lane[lane]
  if not fl then return nil end
  local cl = carried_lane[lane] or none
  for k = 0, ndest - 1 do
    local i = (cursor + k) % ndest
    local d = dests[i + 1]
    if not draining[d] and not fenced[d] and (fl[d] or 0) > (cl[d] or 0)
        and load[d] == fl[d] then
      return i
    end
  end
  return nil
end

local out = { 0, 0, 0, 0, 0, epoch, reset, writes }
local held_lanes = {}
local batch_dest = nil
local marks, marked = {}, {}
local now_s, lease_s = num(now), num(now + lease)
local now_n = tonumber(now_s)
-- The update time of an entry used now, per TTL (prelude `updated_at`), as written.
local ups = {}
local function up_s(ttl)
  local u = ups[ttl]
  if not u then
    u = num(updated_at(now_n, ttl))
    ups[ttl] = u
  end
  return u
end
local dirty = {}
local function touch(gid) dirty[gid] = true end
local mem = {}  -- messages after which their entry is as `same` reads it (the reply's remembered)
-- The waiting room: groups that join it, and the groups this batch parks (park leases).
local joined, parked = {}, {}
-- A replay of an aborted batch (router/table/room.py `replayed`): its park was counted.
local function replayed(e, token)
  return token ~= '' and at_or_before(token, e.parked or '')
end
-- The ID reused (router/table/room.py `after_final`): a first message (no sequence number,
-- or 0 in logical order) after its group's final, not a replay of one before it.
local function after_final(e, flags, seq, token)
  return e.closing ~= '' and not has(flags, 'c') and (not seq or seq == 0)
    and not at_or_before(token, e.closing) and not replayed(e, token)
end
local function park(gid, e, token)
  if not replayed(e, token) then
    e.parks = e.parks + 1
    if token ~= '' then e.parked = token end
  elseif e.state == 'admitted' then
    e.parks = e.parks + 1  -- a drain's check compares the count (room.py `park`)
  end
  parked[gid] = true
  touch(gid)
  return '!w'
end
local function join(gid, flags, ttl, token, lane)
  local c = ''
  if has(flags, 'f') and string.sub(gid, 1, 1) ~= '~' then c = token end
  local e = { dest = '!', opened = now_s, updated = now_s, ttl = ttl, closing = c,
              closing0 = '', lane = lane, state = 'waiting', parks = 0, next = -1, fence = '',
              origin = '', parked = '', unstaged = '' }
  cache[gid] = e
  joined[gid] = true
  if string.sub(gid, 1, 2) ~= '~*' then room_n = room_n + 1 end
  return park(gid, e, token)
end
local function stage(gid, flags, ttl, token, lane)
  if has(flags, 'f') then return join(gid, flags, ttl, token, lane) end  -- complete already
  if max_staged <= 1 then  -- over the bound at once: it waits as a streamed group
    join(gid, flags, ttl, token, lane)
    cache[gid].unstaged = token
    return '!W'
  end
  local e = { dest = '!', opened = now_s, updated = now_s, ttl = ttl, closing = '',
              closing0 = '', lane = lane, state = 'staged', parks = 0, next = -1, fence = '',
              origin = '', parked = '', unstaged = '' }
  cache[gid] = e
  return park(gid, e, token)
end
local function parked_message(gid, e, flags, ttl, token)
  e.updated = now_s
  e.ttl = ttl
  local replay = replayed(e, token)
  if has(flags, 'f') then
    e.closing = token
    if e.state == 'staged' then  -- complete: it waits for a destination from now
      e.state = 'waiting'
      joined[gid] = true
      room_n = room_n + 1
    end
  elseif e.closing ~= '' and not flagset(flags).seq and not at_or_before(token, e.closing) then
    e.closing = ''  -- the ID reused (in logical order, members come in any order)
  end
  local decision = park(gid, e, token)
  if replay and token == e.unstaged then return '!W' end
  if e.state == 'staged' and e.parks >= max_staged then
    e.state = 'waiting'  -- over the bound: it waits as a streamed group, from now
    e.unstaged = token
    joined[gid] = true
    room_n = room_n + 1
    return '!W'
  end
  return decision
end
-- The common message, routed without decoding its entry (decode_entry and encode_entry
-- are most of a call's time per message): a known group's next member or final on the
-- group's own lane, the group open (not in the room, not closing, not stopped, no parks,
-- no sequence rule) and the message neither stopping it nor in logical order (F.fast).
-- It goes to the group's destination, its entry updated as the general path below updates
-- it (update time, TTL, the last lane-order number; a final's token as its closing, and
-- its destination freed for the rest of the batch: `close`). Returns false (nothing
-- changed) for any other entry.
-- The update time is now rounded up to the TTL's step (prelude `updated_at`), so an entry
-- that has it already, with this TTL, is left as it is (`same`: a few plain finds), unless
-- this call writes it anyway: its last lane-order number
-- ('routed', for operators) is then the last of the call that last wrote the entry, at
-- most a step old. Otherwise the entry is written with one concatenation, kept in the
-- cache as a string, and its new deadline.
local fast_dest = nil
local fast_closed = {}  -- gid -> true: written as a string (`fast`, or a new group) closing
-- An entry a member writes nothing to: a known open group's on the kind's lane, with its
-- TTL and this step's update time, "<dest>|<opened>|<update time>|<TTL>||<lane>", then
-- nothing or "|open|0|-1|||<routed>" (as encode_entry writes it). Returns its destination,
-- or nil. Plain finds (no pattern but the routed number's): the key "|<update time>|<TTL>||
-- <lane>" (made once per kind and call) right after the second '|'.
local TAIL = '|open|0|-1|||'
local function same(v, K)
  local key = K.key
  if not key then
    key = '|' .. up_s(K.ttl) .. '|' .. K.ttl .. '||' .. K.lane
    K.key = key
  end
  local p = string.find(v, key, 1, true)
  if not p then return nil end
  local i = string.find(v, '|', 1, true)
  if string.find(v, '|', i + 1, true) ~= p then return nil end
  local q = p + #key
  if q <= #v and not (string.find(v, TAIL, q, true) == q and string.find(v, '^%d*$', q + 13)) then
    return nil
  end
  return string.sub(v, 1, i - 1)
end
-- Any other message `fast` takes: its entry written (as a string: `v`, the stored one).
local function fast(gid, K, v, pos, final)
  local ttl, lane = K.ttl, K.lane
  local token, _, lane_seq_s = unpos(pos, nil)
  -- a final without a source position: the general path
  if final and token == '' then return false end
  local d, o, u, t, c, l, x = string.match(v,
    '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)(.*)$')
  if c ~= '' or l ~= lane or not (x == '' or string.find(x, '^|open|0|%-1|||%d*$')) then
    return false
  end
  if not final then token = '' end
  local up = up_s(ttl)
  if u == up and t == ttl then fast_due[gid] = true end
  local head = d .. '|' .. o .. '|' .. up .. '|' .. ttl .. '|' .. token .. '|' .. l
  if lane_seq_s then
    cache[gid] = head .. '|open|0|-1|||' .. lane_seq_s
  else
    cache[gid] = head
  end
  if final then
    close(gid, d, lane)
    fast_closed[gid] = true
  end
  fast_ttl[gid] = ttl
  dirty[gid] = true
  fast_dest = d
  return true
end
for m = 0, nmsg - 1 do
  local gid, pos = ARGV[base + m + 1], ARGV[PB + m + 1]
  local K = kinds[ARGV[KB + m + 1]] or kindof(ARGV[KB + m + 1])
  local flags, ttl, lane, F = K.flags, K.ttl, K.lane, K.F
  local decision = nil
  local seq = F.seq  -- logical order: its sequence number
  -- its token, and lane order's sequence number, if any (recorded, decides nothing)
  local token, lane_seq, lane_seq_s
  local v = cache[gid]
  if held_lanes[lane] then
    decision = '!s'
  elseif F.fast and type(v) == 'string' and not fast_ttl[gid] then
    -- (an entry this call wrote as a string already, its group's next message in the
    -- call, goes to the general path, which decodes it once)
    if not F.f then  -- a member that writes nothing (`same`)
      decision = same(v, K)
      if decision ~= nil then mem[#mem + 1] = m end
    end
    if decision == nil and fast(gid, K, v, pos, F.f) then
      decision = fast_dest
      if not F.f then mem[#mem + 1] = m end
    end
  end
  if decision == nil and (gid ~= '' or F.m or (wait and has(flags, 'g'))) then
    token, lane_seq, lane_seq_s = unpos(pos, seq)
  end
  if decision ~= nil then  -- decided above
  elseif has(flags, 'm') then
    -- Multicast (router/table/multicast.py): a copy straight to each destination in charge of
    -- no group (but ones closed earlier in this batch) with no earlier copy waiting,
    -- leased to the batch; the others parked behind the destination's waiting copies.
    local straight, parked_to = {}, {}
    for d in string.gmatch(token, '[^,]+') do
      local pg = '~*' .. d
      local pe = entry(pg)
      if not pe and eff(d) == 0 then
        straight[#straight + 1] = d
        if not marked[d] then
          marked[d] = true
          marks[#marks + 1] = lease_s
          marks[#marks + 1] = d .. '|' .. batch
        end
      else
        parked_to[#parked_to + 1] = d
        if pe then
          parked_message(pg, pe, flags, ttl, '')
        else
          join(pg, flags, ttl, '', lane)
        end
      end
    end
    decision = '!m' .. table.concat(straight, ',') .. '|' .. table.concat(parked_to, ',')
  else
    local e = false
    if gid ~= '' then e = entry(gid) end
    if e and e.state == 'pinned' then  -- its first message: an ordinary open entry now
      e.state = 'open'
      if seq then e.next, e.origin = 0, token end
      touch(gid)
    end
    -- Logical order: lanes do not matter (a first message after a final that went
    -- straight, the ID reused, follows the lane rules).
    local logical = seq ~= nil and e and e.next >= 0
      and not (seq == 0 and e.closing ~= '' and e.closing ~= '!stop' and e.state == 'open')
    if e and not logical and e.closing ~= '!stop' and e.lane ~= '' and e.lane ~= lane then
      if not has(flags, 'c') and not has(flags, 's') then
        -- a first message: the ID reused on another lane, whose old group's lane may be
        -- behind (its final not routed yet). Wait for the release, at most the hold
        -- timeout (then 's': the old group never ended, the new one spans lanes).
        out[2] = out[2] + 1
        held_lanes[lane] = true
        decision = '!h'
      else
        decision = '!x'
      end
    elseif e then
      e.updated = now_s
      if e.lane == '' then e.lane = lane end
      touch(gid)
      if e.closing == '!stop' and e.state == 'open' and has(flags, 'p') and e.dest ~= '!' then
        decision = '!P' .. e.dest  -- its stop not settled yet (a replay): closed there again
      elseif e.closing == '!stop' and e.state == 'open' then
        decision = '!p'
      elseif e.closing == '!stop' then  -- stopped in the room: behind its parked ones
        decision = park(gid, e, token)
      elseif has(flags, 'p') and e.state == 'admitted' and e.dest ~= '!' then
        -- its destination is the drain's (the room partition's owner may be writing it,
        -- a chain too): stopped in the room, the message parked behind the others; the
        -- drain dead-letters what is left and closes the group there (drain/step.py)
        reopen(gid)
        e.closing = '!stop'
        out[4] = out[4] + 1
        decision = park(gid, e, token)
      elseif has(flags, 'p') then
        reopen(gid)
        e.closing = '!stop'
        if e.state ~= 'open' then  -- it leaves the room
          if e.state == 'waiting' then room_n = room_n - 1 end
          e.state, e.parks = 'open', 0
          joined[gid], parked[gid] = nil, nil
          redis.call('ZREM', K_ROOM, gid)
          redis.call('HDEL', K_ADMITTED, gid)
          forget_parks(K_PARKS, gid)
        end
        out[4] = out[4] + 1
        decision = '!P' .. e.dest
      elseif (e.state ~= 'open' or has(flags, 'g')) and not seq and after_final(e, flags, seq, token)
          and (not has(flags, 's') or e.state ~= 'open') then
        -- the ID reused after a final not yet released (router/table/room.py `reuses`): held
        -- until the old group's release; held too long, it joins the old group in the room
        if not has(flags, 's') then
          out[2] = out[2] + 1
          held_lanes[lane] = true
          decision = '!h'
        else
          decision = parked_message(gid, e, flags, ttl, token)
          if has(flags, 'g') and decision == '!w' then
            e.unstaged = token  -- its replay answers '!W' again (parked_message)
            decision = '!W'
          end
        end
      elseif e.state ~= 'open' then
        decision = parked_message(gid, e, flags, ttl, token)
      elseif logical and not (seq >= 0 and lane == e.lane and (seq == e.next
          or (seq < e.next and at_or_before(token, e.fence)))) then
        -- out of sequence, from another lane, or a duplicate: back to the room, admitted
        -- to the destination it holds; the drain forwards in sequence order
        reopen(gid)
        e.state = 'admitted'
        redis.call('HSET', K_ADMITTED, gid, e.dest)
        decision = parked_message(gid, e, flags, ttl, token)
      elseif wait and after_final(e, flags, seq, token)
          and (load[e.dest] or 0) - (freed[e.dest] or 0) - (closed_here[gid] and 0 or 1) > 0 then
        -- the ID reused (lane order, or a first member in logical order) while another
        -- group is in charge of the old group's destination: held until the old group's
        -- release, whatever the hold timeout (router/table/room.py `crowds`)
        out[2] = out[2] + 1
        held_lanes[lane] = true
        decision = '!h'
      elseif closed_here[gid] and taken[e.dest] and (wait or not has(flags, 's')) then
        -- the ID reused after its final in this batch, whose destination another group
        -- took since: a new group, which waits for the release
        out[2] = out[2] + 1
        held_lanes[lane] = true
        decision = '!h'
      else
        if closed_here[gid] and taken[e.dest] then out[1] = out[1] + 1 end
        decision = e.dest
        e.ttl = ttl
        -- the last routed, even if lower (a replay after an abort), and none if it carried
        -- none (a group without numbers, or the ID reused by one): what went there last
        e.routed, e.routed_s = lane_seq, lane_seq_s
        if e.next >= 0 and seq and (seq >= e.next or e.closing ~= '') then
          if e.closing ~= '' and seq < e.next then e.origin = token end  -- the ID reused
          e.next, e.fence = seq + 1, token  -- not a replay (or the ID reused)
        end
        if has(flags, 'f') then
          e.closing = token
          close(gid, e.dest, lane)
        elseif e.closing ~= '' then
          e.closing = ''
          reopen(gid)
        end
      end
    elseif gid ~= '' and has(flags, 'k') then
      decision = '!n'
    elseif gid ~= '' and has(flags, 'c') and not seq then
      out[5] = out[5] + 1
      decision = '!o'
    elseif gid ~= '' and has(flags, 'p') then
      cache[gid] = { dest = '!', opened = now_s, updated = now_s, ttl = ttl,
                     closing = '!stop', closing0 = '', lane = lane, state = 'open', parks = 0,
                     next = -1, fence = '', origin = '' }
      touch(gid)
      out[4] = out[4] + 1
      decision = '!p'
    elseif gid ~= '' and seq and seq ~= 0 and finished(gid, seq) then
      decision = '!D'  -- logical order: a late copy (a retry, a member skipped past a gap)
    elseif gid ~= '' and seq and seq ~= 0 then  -- logical order: its first may follow
      if wait and has(flags, 'g') then
        decision = stage(gid, flags, ttl, token, lane)
      else
        decision = join(gid, flags, ttl, token, lane)
      end
      cache[gid].next, cache[gid].origin = 0, token
    elseif gid == '' and batch_dest ~= nil and eff(batch_dest) == 0 then
      decision = batch_dest
    elseif wait and has(flags, 'g') then
      decision = stage(gid, flags, ttl, token, lane)  -- whole-group delivery
      if seq then cache[gid].next, cache[gid].origin = 0, token end
    else
      local i, busy
      i, busy = choose(lane, gid ~= '')
      local queued = room_n > 0 and gid ~= ''  -- first come, first served ...
      if wait and queued and not busy and not seq and (last_final[gid] or -1) >= m then
        local j = follow(lane)  -- ... but one complete here may follow its lane's final
        if j then i, queued = j, false end
      end
      if wait and (busy or queued) then  -- never shared, even forced
        if gid ~= '' then
          decision = join(gid, flags, ttl, token, lane)
          if seq then cache[gid].next, cache[gid].origin = 0, token end
        else
          local pg = '~' .. lane
          local pe = entry(pg)
          token = unpos(pos, seq)  -- (read only now for an ordinary message)
          if pe then
            decision = parked_message(pg, pe, flags, ttl, token)
          else
            decision = join(pg, flags, ttl, token, lane)
          end
        end
      elseif busy and hold and not has(flags, 's') then
        out[2] = out[2] + 1
        held_lanes[lane] = true
        decision = '!h'
      else
        if busy then out[1] = out[1] + 1 end
        decision = dests[i + 1]
        cursor = (i + 1) % ndest
        if gid == '' then
          batch_dest = decision
          if not marked[decision] then
            marked[decision] = true
            marks[#marks + 1] = lease_s
            marks[#marks + 1] = decision .. '|' .. batch
          end
        else
          local final = has(flags, 'f')
          local c = ''
          if final then c = token end
          if seq or again[gid] then  -- (the group has more messages in this call)
            cache[gid] = { dest = decision, opened = now_s, updated = now_s, ttl = ttl,
                           closing = c, closing0 = '', lane = lane, state = 'open',
                           parks = 0, next = -1, fence = '', origin = '', routed = lane_seq,
                           routed_s = lane_seq_s }
            if seq then
              cache[gid].next, cache[gid].fence, cache[gid].origin = seq + 1, token, token
            end
          else  -- its one message in this call: encoded at once, as encode_entry would
            local head = decision .. '|' .. now_s .. '|' .. up_s(ttl) .. '|' .. ttl .. '|' .. c
              .. '|' .. lane
            if lane_seq_s then head = head .. '|open|0|-1|||' .. lane_seq_s end
            cache[gid] = head
            fast_ttl[gid] = ttl
            if c ~= '' then fast_closed[gid] = true else mem[#mem + 1] = m end
          end
          load[decision] = load[decision] + 1
          out[3] = out[3] + 1
          if (freed[decision] or 0) > 0 then taken[decision] = true end
          touch(gid)
          if final then close(gid, decision, lane) end
        end
      end
    end
  end
  out[9 + m] = decision  -- after the 8 leading values
end

-- Write back what changed, in chunks (unpack has a stack limit).
local hset, zadd, cadd, crem = {}, {}, {}, {}
local function flush(cmd, key, args, force)
  if #args > 0 and (force or #args >= 2000) then
    redis.call(cmd, key, unpack(args))
    for k in pairs(args) do args[k] = nil end
  end
end
-- An entry's deadline (update time + TTL), formatted once per update time and TTL.
local dues = {}  -- TTL -> the deadline of an entry used now
local function due_at(updated, ttl)
  if updated ~= up_s(ttl) then return num(tonumber(updated) + tonumber(ttl)) end
  local due = dues[ttl]
  if not due then
    due = num(tonumber(updated) + tonumber(ttl))
    dues[ttl] = due
  end
  return due
end
local n, nz = 0, 0  -- entries in hset, scores in zadd
for gid in pairs(dirty) do
  local e = cache[gid]
  n = n + 1
  hset[2 * n - 1] = gid
  if type(e) == 'string' then  -- written by `fast` only: used now, open, closing if final
    hset[2 * n] = e
    local ttl = fast_ttl[gid]
    if not fast_due[gid] then
      nz = nz + 1
      zadd[2 * nz - 1] = due_at(up_s(ttl), ttl)
      zadd[2 * nz] = gid
    end
    if fast_closed[gid] then
      cadd[#cadd + 1] = now_s
      cadd[#cadd + 1] = gid
      flush('ZADD', K_CLOSING, cadd, false)
    end
  else
    -- used now: its update time rounded up to its TTL's step (prelude `updated_at`)
    if e.updated == now_s then e.updated = up_s(e.ttl) end
    hset[2 * n] = encode_entry(e)
    if e.due0 ~= e.updated .. '|' .. e.ttl then
      nz = nz + 1
      zadd[2 * nz - 1] = due_at(e.updated, e.ttl)
      zadd[2 * nz] = gid
    end
    local closing = e.closing
    if closing ~= '' and closing ~= '!stop' and closing ~= e.closing0 and e.state == 'open' then
      cadd[#cadd + 1] = now_s
      cadd[#cadd + 1] = gid
      flush('ZADD', K_CLOSING, cadd, false)
    elseif e.closing0 ~= '' and e.closing0 ~= '!stop'
        and (closing == '' or closing == '!stop' or e.state ~= 'open') then
      crem[#crem + 1] = gid  -- no longer closing, or back in the room (logical order)
      flush('ZREM', K_CLOSING, crem, false)
    end
  end
  if n == 1000 then
    flush('HSET', K_ENTRIES, hset, true)
    flush('ZADD', K_DEADLINES, zadd, true)
    n, nz = 0, 0
  end
end
flush('HSET', K_ENTRIES, hset, true)
flush('ZADD', K_DEADLINES, zadd, true)
flush('ZADD', K_CLOSING, cadd, true)
flush('ZREM', K_CLOSING, crem, true)

for d, l in pairs(load) do
  if l ~= load0[d] then redis.call('HSET', K_LOAD, d, l) end
end
if cursor ~= cursor0 then redis.call('SET', K_CURSOR, cursor) end
if #marks > 0 then redis.call('ZADD', K_INFLIGHT, unpack(marks)) end
for gid in pairs(joined) do redis.call('ZADD', K_ROOM, now_s, gid) end
for gid in pairs(parked) do redis.call('ZADD', K_PARKS, lease_s, batch .. '|' .. gid) end
redis.call('HINCRBY', K_STATS, 'messages', nmsg + remembered)
if remembered > 0 then redis.call('HINCRBY', K_STATS, 'remembered', remembered) end
if all_draining then redis.call('HINCRBY', K_STATS, 'drain_ignored', 1) end
local counters = { 'shared', 'held', 'created', 'stopped', 'orphans' }
for i = 1, 5 do
  if out[i] > 0 then redis.call('HINCRBY', K_STATS, counters[i], out[i]) end
end
out[9 + nmsg] = table.concat(mem, ',')
out[10 + nmsg] = redis.call('HGET', K_STATS, 'generation') or '0'
out[11 + nmsg] = now_s
return out
