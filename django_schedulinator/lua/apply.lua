-- Apply changes to the index, never letting an older row revision overwrite a newer one.
--
-- KEYS[1] due set, KEYS[2] revisions hash (schedule id -> last revision written),
-- KEYS[3] in-flight set
-- ARGV[1] claim token whose in-flight entries to release ('' for none), then groups of
-- four: schedule id, row revision, op, score (epoch ms). Ops:
--   S  set the entry to score        (skipped if the index holds a newer revision)
--   R  remove the entry              (same guard; the revision is kept to block late writes)
--   F  forget: the row is gone       (entry and revision removed)
--   Q  requeue at score unless an entry exists (ZADD NX): "re-check this row later"
-- Reply: {applied, stale}
local token = ARGV[1]
local applied, stale = 0, 0
for i = 2, #ARGV, 4 do
  local sid, op = ARGV[i], ARGV[i + 2]
  if op == 'S' or op == 'R' then
    local rev = tonumber(ARGV[i + 1])
    local current = tonumber(redis.call('HGET', KEYS[2], sid))
    if current and current > rev then
      stale = stale + 1
    else
      redis.call('HSET', KEYS[2], sid, rev)
      if op == 'S' then
        redis.call('ZADD', KEYS[1], ARGV[i + 3], sid)
      else
        redis.call('ZREM', KEYS[1], sid)
      end
      applied = applied + 1
    end
  elseif op == 'F' then
    redis.call('ZREM', KEYS[1], sid)
    redis.call('HDEL', KEYS[2], sid)
    applied = applied + 1
  elseif op == 'Q' then
    redis.call('ZADD', KEYS[1], 'NX', ARGV[i + 3], sid)
    applied = applied + 1
  else
    return redis.error_reply('unknown index op ' .. tostring(op))
  end
  if token ~= '' then
    redis.call('ZREM', KEYS[3], sid .. '@' .. token)
  end
end
return {applied, stale}
