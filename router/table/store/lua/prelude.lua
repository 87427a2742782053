-- Shared by every table script (router/table/store/codec.py prepends it): the entry codec and the
-- waiting room's admission. router/table/room.py is the specification of the room.
--
-- An entry: "dest|opened|updated|ttl|closing|lane", then "|state|parks" for a group in
-- the waiting room (state 'waiting', 'staged' or 'admitted'; parks: its messages parked so
-- far) or pinned before its first message (state 'pinned', router/table/placement.py), then
-- "|next|fence|origin" for a group in logical order (the next sequence number to go
-- straight to its destination, the source position of the last one that did, and of the
-- member that started this group under its ID: drain markers name it; next is -1 in lane
-- order), then "|routed" once a member in lane order with a sequence number ('q<n>' in
-- route.lua) went straight to the destination: the last such number as of the entry's last
-- write (route.lua `fast`), for operators (router/table/view.py) ('' if none), then
-- "|parked|unstaged" once a message of the group was parked: the source position of its last parked message and of the one that hit the
-- staging bound, so that an aborted batch's replay counts no park twice (router/table/room.py
-- `replayed`). Every shorter form, as earlier versions wrote it, still decodes, and an entry
-- without them encodes as before (router/table/store/codec.py: the same codec).
-- Decoding is most of a route call's time per message, so the forms are read field by
-- field, each match anchored and succeeding (a failed match backtracks through every
-- field): the first six, then the rest two or one at a time. A shape no version wrote
-- goes to `decode_entry_any`, the general decoder (both give the same entry).
local function decode_entry_any(v)
  local d, o, u, t, c, rest = string.match(v, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|?(.*)$')
  local l, s, p, n, f, g, r, pk, us = string.match(rest,
    '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  if not l then
    l, s, p, n, f, g, r = string.match(rest,
      '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  end
  if not l then
    l, s, p, n, f, g = string.match(rest, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  end
  if not l then
    l, s, p, n, f = string.match(rest, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
    g = ''
  end
  if not l then
    l, s, p = string.match(rest, '^([^|]*)|([^|]*)|([^|]*)$')
    n, f, g = '-1', '', ''
  end
  if not l then l, s, p = rest, 'open', '0' end
  local routed = tonumber(r or '')
  return { dest = d, opened = o, updated = u, ttl = t, closing = c, closing0 = c, lane = l,
           state = s, parks = tonumber(p), next = tonumber(n), fence = f, origin = g,
           routed = routed, routed_s = routed and string.format('%.0f', routed),
           parked = pk or '', unstaged = us or '' }
end

local function decode_entry(v)
  local d, o, u, t, c, l, x = string.match(v,
    '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)(.*)$')
  if not d then return decode_entry_any(v) end
  local s, p, n, f, g, r, pk, us = 'open', '0', '-1', '', '', nil, nil, nil
  if x ~= '' then
    s, p, x = string.match(x, '^|([^|]*)|([^|]*)(.*)$')
    if s and x ~= '' then
      n, f, x = string.match(x, '^|([^|]*)|([^|]*)(.*)$')
      if n and x ~= '' then
        g, x = string.match(x, '^|([^|]*)(.*)$')
        if x ~= '' then
          r, x = string.match(x, '^|([^|]*)(.*)$')
          if x ~= '' then pk, us, x = string.match(x, '^|([^|]*)|([^|]*)(.*)$') end
        end
      end
    end
    if not (s and n and x == '') then return decode_entry_any(v) end
  end
  local routed = nil
  if r and r ~= '' then
    routed = tonumber(r)
    -- kept as written if '%.0f' writes it back so (encode_entry): an integer under 1e15
    if routed and not (#r < 16 and string.find(r, '^%-?[1-9]%d*$')) and r ~= '0' then r = nil end
  else
    r = nil
  end
  return { dest = d, opened = o, updated = u, ttl = t, closing = c, closing0 = c, lane = l,
           state = s, parks = tonumber(p), next = tonumber(n), fence = f, origin = g,
           routed = routed, routed_s = routed and (r or string.format('%.0f', routed)),
           parked = pk or '', unstaged = us or '' }
end

local function encode_entry(e)
  local v = e.dest .. '|' .. e.opened .. '|' .. e.updated .. '|' .. e.ttl .. '|' .. e.closing
    .. '|' .. e.lane
  local marks = (e.parked or '') ~= '' or (e.unstaged or '') ~= ''
  if e.next >= 0 or e.routed or marks then
    v = v .. '|' .. e.state .. '|' .. e.parks .. '|' .. e.next .. '|' .. e.fence .. '|'
      .. (e.origin or '')
    if e.routed then
      v = v .. '|' .. (e.routed_s or string.format('%.0f', e.routed))
    elseif marks then
      v = v .. '|'
    end
    if marks then v = v .. '|' .. (e.parked or '') .. '|' .. (e.unstaged or '') end
  elseif e.state and e.state ~= 'open' then
    v = v .. '|' .. e.state .. '|' .. e.parks
  end
  return v
end

-- An entry's update time is the time route.lua last used it rounded up to a step of its
-- TTL / DUE_STEPS (router/table/routing.py `updated_at`): never earlier than the group's
-- last message, at most a step later, so its deadline (update time + TTL) is never short
-- of a TTL after that message; a busy group's entry then changes once per step, and a
-- message in the same step writes nothing (route.lua `fast`). The deadlines set holds
-- each entry's deadline; earlier versions left a score up to a step early, never late,
-- so sweep.lua still checks its candidates against their entries.
local DUE_STEPS = 16
local function updated_at(now, ttl)
  local step = math.max(1, math.floor((tonumber(ttl) or 0) / DUE_STEPS))
  return math.ceil(now / step) * step
end

-- Logical order: whether source position `token` is on the lane of `fence` and not after.
local function at_or_before(token, fence)
  if fence == '' then return false end
  local tl, to = string.match(token, '^(.*)/(%d+)$')
  local fl, fo = string.match(fence, '^(.*)/(%d+)$')
  if not to or not fo then return false end
  return tl == fl and tonumber(to) <= tonumber(fo)
end

-- Park leases (zset "batch|gid" -> expiry): drop every one of a group.
local function forget_parks(k_parks, gid)
  for _, m in ipairs(redis.call('ZRANGE', k_parks, 0, -1)) do
    if string.match(m, '^[^|]*|(.*)$') == gid then redis.call('ZREM', k_parks, m) end
  end
end

-- Leases that ended (zset member -> expiry, Redis clock ms): in-flight leases of ordinary
-- messages and park leases whose batch will never settle (its unit died, or its
-- transaction failed and the batch was replayed under another ID). Removed before anything
-- reads them: a lease still there fences its destination (admission) or keeps its group
-- from opening (settle's drains, the drain step's room_state). Returns how many ended.
local function end_leases(k_inflight, k_parks, now)
  local at = string.format('%.0f', now)
  return redis.call('ZREMRANGEBYSCORE', k_inflight, '-inf', at)
    + redis.call('ZREMRANGEBYSCORE', k_parks, '-inf', at)
end

local function has_parks(k_parks, gid)
  for _, m in ipairs(redis.call('ZRANGE', k_parks, 0, -1)) do
    if string.match(m, '^[^|]*|(.*)$') == gid then return true end
  end
  return false
end

-- Draining destinations (set k_draining, router/table/placement.py): nothing new is placed on
-- them, unless every destination is draining (then none is). Returns dest -> true, and
-- whether every destination was draining.
local function draining_set(k_draining, dests)
  local isdest, out, n = {}, {}, 0
  for _, d in ipairs(dests) do isdest[d] = true end
  for _, d in ipairs(redis.call('SMEMBERS', k_draining)) do
    if isdest[d] and not out[d] then
      out[d] = true
      n = n + 1
    end
  end
  if n > 0 and n == #dests then return {}, true end
  return out, false
end

-- Admit waiting groups, oldest first (by wait start, then ID: the room's order), while one
-- can be: a group (or a lane's ordinary messages) to the first clean destination at or
-- after the cursor, which moves past it (clean: in charge of no group, no ordinary message
-- of any batch in flight to it, not draining); a destination's multicast copies ('~*<dest>',
-- router/table/multicast.py) to that destination once it is in charge of no group. One that
-- cannot be admitted yet does not stop a younger one that can (router/table/room.py `admit`).
-- dests: the side's destination names, in order. Returns the number admitted.
local function admit(k_room, k_entries, k_load, k_cursor, k_inflight, k_admitted, dests,
                     k_draining)
  if redis.call('ZCARD', k_room) == 0 then return 0 end
  local n = #dests
  local load = {}
  local raw = redis.call('HGETALL', k_load)
  for i = 1, #raw, 2 do load[raw[i]] = tonumber(raw[i + 1]) end
  local leased = draining_set(k_draining, dests)
  for _, m in ipairs(redis.call('ZRANGE', k_inflight, 0, -1)) do
    leased[string.match(m, '^([^|]*)|')] = true
  end
  local cursor = tonumber(redis.call('GET', k_cursor) or '0') % n
  local admitted, moved = 0, false
  while true do
    -- the oldest copies whose destination is in charge of no group (their rank in the room)
    local gid, d, rank = nil, nil, nil
    for i = 1, n do
      if (load[dests[i]] or 0) == 0 then
        local r = redis.call('ZRANK', k_room, '~*' .. dests[i])
        if r and (rank == nil or r < rank) then gid, d, rank = '~*' .. dests[i], dests[i], r end
      end
    end
    -- the oldest other waiting group, if a destination is clean (at most n copies groups
    -- wait, so one of the first n + 1 is another group, if any waits)
    local pick = nil
    for k = 0, n - 1 do
      local i = (cursor + k) % n
      if (load[dests[i + 1]] or 0) == 0 and not leased[dests[i + 1]] then
        pick = i
        break
      end
    end
    if pick ~= nil then
      for r, member in ipairs(redis.call('ZRANGE', k_room, 0, n)) do
        if rank ~= nil and r - 1 > rank then break end
        if string.sub(member, 1, 2) ~= '~*' then
          gid, d, rank = member, dests[pick + 1], r - 1
          cursor = (pick + 1) % n
          moved = true
          break
        end
      end
    end
    if gid == nil then break end
    redis.call('ZREM', k_room, gid)
    local e = decode_entry(redis.call('HGET', k_entries, gid))
    e.state, e.dest = 'admitted', d
    redis.call('HSET', k_entries, gid, encode_entry(e))
    redis.call('HSET', k_admitted, gid, d)
    load[d] = 1
    redis.call('HINCRBY', k_load, d, 1)
    admitted = admitted + 1
  end
  if moved then redis.call('SET', k_cursor, cursor) end
  return admitted
end

-- Lane ownership (owners.lua; router/table/store/owners.py): a call that speaks for lanes
-- (source or room partitions) gives the token of each lane's claim it holds; a token older
-- than the lane's latest claim means the caller lost the lane (a unit resumed after its
-- consumer session ended: a zombie), and the call must change nothing. Returns the first
-- such lane, or nil. A lane whose claim was lost (Redis came back without it) takes the
-- newest token a call gives, so that the owner's next call fences the zombie again; only
-- once no lane of the call is fenced (a refused call writes no claim either). `fences` is
-- lane, token, ... (one HGET per lane: any number of lanes, no unpack() limit)
local function fenced_lane(k_owners, fences)
  local newer = {}
  for i = 1, #fences, 2 do
    local tok = tonumber(fences[i + 1])
    local have = tonumber(redis.call('HGET', k_owners, fences[i]) or '')
    if have and tok < have then return fences[i] end
    if not have or tok > have then newer[#newer + 1] = i end
  end
  for _, i in ipairs(newer) do redis.call('HSET', k_owners, fences[i], fences[i + 1]) end
  return nil
end
