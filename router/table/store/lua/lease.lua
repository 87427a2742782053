-- Renew a batch's in-flight leases (see route.lua: "dest|batch" -> lease expiry), all or
-- none: only if every one of them still exists. One that is gone expired and was removed
-- by a route call, which may since have given its destination to a new group: the batch
-- must then not be produced (the unit rewinds it; its replay is routed afresh). One that
-- expired but is still there was seen by no route call since, so renewing it is safe.
--
-- KEYS: 1 inflight (zset "dest|batch" -> lease expiry)
-- ARGV: 1 batch ID   2 lease ms   then the destinations the batch sends ordinary messages to
-- Returns: 1 if renewed to (Redis server clock) now + lease, 0 if a lease was gone.
local K_INFLIGHT = KEYS[1]
local batch = ARGV[1]
local t = redis.call('TIME')
local expiry = string.format('%.0f',
  tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[2]))
for i = 3, #ARGV do
  if not redis.call('ZSCORE', K_INFLIGHT, ARGV[i] .. '|' .. batch) then return 0 end
end
for i = 3, #ARGV do
  redis.call('ZADD', K_INFLIGHT, 'XX', expiry, ARGV[i] .. '|' .. batch)
end
return 1
