-- Renew a batch's leases, all or none: its in-flight leases (see route.lua: "dest|batch" ->
-- lease expiry) only if every one of them still exists, and, if it parked messages in the
-- waiting room, its park leases ("batch|gid" -> expiry) only if some still exist (they were
-- set and are renewed together, so they lapse together). One that is gone expired and was
-- removed by a route call or the sweeper, which may since have given its destination to a
-- new group, or opened (or released) the group whose park it fenced: the batch must then
-- not be produced (the unit rewinds it; its replay is routed afresh). One that expired but
-- is still there was seen by nobody since, so renewing it is safe.
--
-- KEYS: 1 inflight (zset "dest|batch" -> lease expiry)  2 parks (zset "batch|gid" -> expiry)
-- ARGV: 1 batch ID   2 lease ms   3 '1' if the batch parked messages in the room, else '0'
--       then the destinations the batch sends ordinary messages to
-- Returns: 1 if renewed to (Redis server clock) now + lease, 0 if a lease was gone.
local K_INFLIGHT, K_PARKS = KEYS[1], KEYS[2]
local batch = ARGV[1]
local t = redis.call('TIME')
local expiry = string.format('%.0f',
  tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2]))
for i = 4, #ARGV do
  if not redis.call('ZSCORE', K_INFLIGHT, ARGV[i] .. '|' .. batch) then return 0 end
end
local parks = {}
if ARGV[3] == '1' then
  local prefix = batch .. '|'
  for _, m in ipairs(redis.call('ZRANGE', K_PARKS, 0, -1)) do
    if string.sub(m, 1, #prefix) == prefix then parks[#parks + 1] = m end
  end
  if #parks == 0 then return 0 end
end
for i = 4, #ARGV do
  redis.call('ZADD', K_INFLIGHT, 'XX', expiry, ARGV[i] .. '|' .. batch)
end
for _, m in ipairs(parks) do redis.call('ZADD', K_PARKS, 'XX', expiry, m) end
return 1
