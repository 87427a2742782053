-- Chained drains (router/table/chain.py is the specification): admit complete waiting groups,
-- and lanes' parked ordinary messages, to a destination behind the admitted groups a drain
-- batch forwards whole to it, in the drainer's order, so that the batch writes them back to
-- back in its transaction.
--
-- KEYS: 1 entries  2 load  3 room  4 admitted  5 parks  6 inflight  7 draining  8 owners
-- ARGV: n lanes the drainer claimed (its room partitions: owners.lua), then pairs of lane,
--       claim token; then n destinations, then per destination: its name, n heads, the heads (the admitted
--       groups the batch forwards whole to it), n candidates, then per candidate its
--       guarantee ID, the parks the drainer holds, the source position of the final it holds
--       ('' for a lane's ordinary messages);
--       then n, then every destination name of the side (for the draining rule)
-- Returns: per destination that took any, {name, gid, gid, ...}; or {-1, lane} if a
-- lane's claim is newer than the caller's (it lost the room partition): nothing changed.
local K_ENTRIES, K_LOAD, K_ROOM, K_ADMITTED, K_PARKS, K_INFLIGHT, K_DRAINING, K_OWNERS =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local i = 1
local function nextarg()
  local v = ARGV[i]
  i = i + 1
  return v
end
local fences = {}
for _ = 1, 2 * tonumber(nextarg()) do fences[#fences + 1] = nextarg() end
local fenced_by = fenced_lane(K_OWNERS, fences)
if fenced_by then return { -1, fenced_by } end
local plan = {}
for _ = 1, tonumber(nextarg()) do
  local p = { dest = nextarg(), heads = {}, cands = {} }
  for _ = 1, tonumber(nextarg()) do p.heads[#p.heads + 1] = nextarg() end
  for _ = 1, tonumber(nextarg()) do
    p.cands[#p.cands + 1] = { nextarg(), tonumber(nextarg()), nextarg() }
  end
  plan[#plan + 1] = p
end
local dests, isdest = {}, {}
for _ = 1, tonumber(nextarg()) do
  local d = nextarg()
  dests[#dests + 1] = d
  isdest[d] = true
end
local draining = draining_set(K_DRAINING, dests)
local fenced, leased = {}, {}
for _, m in ipairs(redis.call('ZRANGE', K_INFLIGHT, 0, -1)) do
  fenced[string.match(m, '^([^|]*)|')] = true
end
for _, m in ipairs(redis.call('ZRANGE', K_PARKS, 0, -1)) do
  leased[string.match(m, '^[^|]*|(.*)$')] = true
end

local function chainable(p)
  local unique, n = {}, 0
  for _, h in ipairs(p.heads) do
    if not unique[h] then
      unique[h] = true
      n = n + 1
    end
  end
  if n == 0 or not isdest[p.dest] or draining[p.dest] or fenced[p.dest] then return false end
  if tonumber(redis.call('HGET', K_LOAD, p.dest) or '0') ~= n then return false end
  if redis.call('ZSCORE', K_ROOM, '~*' .. p.dest) then return false end
  for h in pairs(unique) do
    local v = redis.call('HGET', K_ENTRIES, h)
    if not v then return false end
    local e = decode_entry(v)
    if e.state ~= 'admitted' or e.dest ~= p.dest then return false end
  end
  return true
end

local out = {}
for _, p in ipairs(plan) do
  if chainable(p) then
    local taken = { p.dest }
    for _, c in ipairs(p.cands) do
      local gid, parks, final = c[1], c[2], c[3]
      local v = not leased[gid] and redis.call('ZSCORE', K_ROOM, gid)
        and redis.call('HGET', K_ENTRIES, gid)
      if v then
        local e = decode_entry(v)
        local ok = e.state == 'waiting' and e.parks == parks
        if ok and string.sub(gid, 1, 1) == '~' then
          ok = string.sub(gid, 1, 2) ~= '~*'  -- a lane's ordinary messages, not copies
        elseif ok then
          ok = e.next < 0 and e.closing ~= '' and e.closing ~= '!stop' and e.closing == final
        end
        if ok then
          redis.call('ZREM', K_ROOM, gid)
          e.state, e.dest = 'admitted', p.dest
          redis.call('HSET', K_ENTRIES, gid, encode_entry(e))
          redis.call('HSET', K_ADMITTED, gid, p.dest)
          redis.call('HINCRBY', K_LOAD, p.dest, 1)
          taken[#taken + 1] = gid
        end
      end
    end
    if #taken > 1 then out[#out + 1] = taken end
  end
end
return out
