-- Drop what a sweeper published from the head of an outbox list: only the items still at
-- the head as it read them (router/table/store/outboxes.py). Another sweeper may have
-- published and dropped some of them meanwhile, and a later item may sit where they were:
-- it stays, so an event is published at least once, never dropped unpublished.
-- KEYS: 1 the list   ARGV: the items published, in the order read from the head
-- Returns: how many were dropped.
local head = redis.call('LRANGE', KEYS[1], 0, #ARGV - 1)
local n = 0
for i = 1, #head do
  if head[i] ~= ARGV[i] then break end
  n = i
end
if n > 0 then redis.call('LTRIM', KEYS[1], n, -1) end
return n
