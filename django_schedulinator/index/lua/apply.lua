-- Apply changes to the index, never letting an older row revision overwrite a newer one.
--
-- KEYS[1] due set, KEYS[2] revisions hash (schedule id -> last revision written),
-- KEYS[3] in-flight set, KEYS[4] layout (the shard count of the layout this hash tag
-- belongs to: see claim.lua), KEYS[5] build marker (JSON with "shards": read only when
-- KEYS[4] is absent, on an index built before it existed)
-- ARGV[1] claim token whose in-flight entries to release ('' for none), ARGV[2] a JSON
-- array of [schedule id, row revision, op, score (epoch ms)] (one argument: cheap to send),
-- ARGV[3] the shard count the caller routed the changes by.
-- A shard that records another layout refuses every change (nothing written, nothing
-- released): the caller routed by a shard count the index is no longer laid out for (a
-- write-back that a rebuild for a new INDEX_SHARDS overtook, a process still on the old
-- count), and its change would land in a dropped shard or in the wrong one. The caller
-- routes it again by the layout the reply gives.
-- Ops:
--   S  set the entry to score        (skipped if the index holds a newer revision)
--   R  remove the entry              (same guard; the revision is kept to block late writes)
--   F  forget: the row is gone       (entry and revision removed)
--   Q  requeue at score unless an entry exists (ZADD NX): "re-check this row later"
--   s, r  as S and R, but only for a revision newer than the one recorded: reconcile heals
--         writes that never landed without re-adding entries that are in flight
-- Reply: {applied, stale, changed, unrecorded}: changed counts writes that altered the due
-- set, unrecorded those of them for rows the index held no revision of (new rows, or an
-- index that lost its data); refused: {0, 0, 0, 0, the shard count the shard records}.
local layout = tonumber(redis.call('GET', KEYS[4]))
if not layout then
  local marker = redis.call('GET', KEYS[5])
  -- A marker written before shards existed records none: one.
  layout = marker and (tonumber(string.match(marker, '"shards": *(%d+)')) or 1)
end
if layout and layout ~= tonumber(ARGV[3]) then
  return {0, 0, 0, 0, layout}
end
local token = ARGV[1]
local changes = cjson.decode(ARGV[2])
local applied, stale, changed, unrecorded = 0, 0, 0, 0
for _, change in ipairs(changes) do
  -- ids travel as strings: a Lua number would print large ids in exponent form
  local sid, rev, op, score = change[1], change[2], change[3], change[4]
  if op == 'S' or op == 'R' or op == 's' or op == 'r' then
    local current = tonumber(redis.call('HGET', KEYS[2], sid))
    local strict = op == 's' or op == 'r'
    if current and (current > rev or (strict and current == rev)) then
      stale = stale + 1
    else
      redis.call('HSET', KEYS[2], sid, rev)
      local delta
      if op == 'S' or op == 's' then
        delta = redis.call('ZADD', KEYS[1], 'CH', score, sid)
      else
        delta = redis.call('ZREM', KEYS[1], sid)
      end
      changed = changed + delta
      if not current then
        unrecorded = unrecorded + delta
      end
      applied = applied + 1
    end
  elseif op == 'F' then
    changed = changed + redis.call('ZREM', KEYS[1], sid)
    redis.call('HDEL', KEYS[2], sid)
    applied = applied + 1
  elseif op == 'Q' then
    changed = changed + redis.call('ZADD', KEYS[1], 'NX', score, sid)
    applied = applied + 1
  else
    return redis.error_reply('unknown index op ' .. tostring(op))
  end
  if token ~= '' then
    redis.call('ZREM', KEYS[3], sid .. '@' .. token)
  end
end
return {applied, stale, changed, unrecorded}
