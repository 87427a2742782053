-- End the leases that expired, and admit waiting groups to the destinations that became
-- clean (router/table/room.py `expire`). route.lua does the same before every batch it routes;
-- the sweeper calls this every round, so that a side where nothing is routed any more (the
-- senders stopped, every source read) does not keep the leases of a batch that will never
-- settle (its unit died, or its transaction failed and it was replayed under another ID):
-- such a lease kept its destination unclean, so nothing was admitted to it, and a park
-- lease kept its admitted group from opening, until routing.max_wait_ms timed the waiting
-- groups out.
--
-- KEYS: 1 inflight  2 parks  3 room  4 entries  5 load  6 cursor  7 admitted  8 draining
-- ARGV: 1 now in ms, or '' for the Redis server clock   2 n, then every destination name
--       of the side
-- Returns: {leases ended, groups admitted}
local K_INFLIGHT, K_PARKS, K_ROOM, K_ENTRIES, K_LOAD, K_CURSOR, K_ADMITTED, K_DRAINING =
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ended = end_leases(K_INFLIGHT, K_PARKS, now)
local dests = {}
for i = 1, tonumber(ARGV[2]) do dests[i] = ARGV[2 + i] end
local admitted = 0
if #dests > 0 then
  admitted = admit(K_ROOM, K_ENTRIES, K_LOAD, K_CURSOR, K_INFLIGHT, K_ADMITTED, dests, K_DRAINING)
end
return { ended, admitted }
