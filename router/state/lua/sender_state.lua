-- A sender's open groups (`router/state/store.py`). KEYS[1]: the owner token's key,
-- KEYS[2]: the groups hash (guarantee ID -> JSON record with its opening token "token").
-- ARGV[1]: the caller's owner token; ARGV[2]: "put" (write records), "update" (write
-- records whose stored token is the same: a late checkpoint never touches a newer opening
-- of the ID) or "del" (remove records with that token); then pairs: ID, record (put,
-- update) or ID, token (del). A caller that is no longer the owner (a sender restarted
-- under the same ID took over) changes nothing: error FENCED.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return redis.error_reply('FENCED another sender took this sender ID over')
end
local op = ARGV[2]
local changed = 0
for i = 3, #ARGV, 2 do
  local gid, value = ARGV[i], ARGV[i + 1]
  if op == 'put' then
    redis.call('HSET', KEYS[2], gid, value)
    changed = changed + 1
  else
    local old = redis.call('HGET', KEYS[2], gid)
    if old then
      local token = cjson.decode(old)['token']
      local want = value
      if op == 'update' then want = cjson.decode(value)['token'] end
      if token == want then
        if op == 'update' then
          redis.call('HSET', KEYS[2], gid, value)
        else
          redis.call('HDEL', KEYS[2], gid)
        end
        changed = changed + 1
      end
    end
  end
end
return changed
