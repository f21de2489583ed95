-- Write the entries a chunk of rows calls for (the rebuild), and say what each one found.
--
-- KEYS[1] due set, KEYS[2] revisions hash (schedule id -> last revision written),
-- KEYS[3] layout (the shard count of the layout this hash tag belongs to: see claim.lua)
-- ARGV[1] '1' for a dry run (nothing written), else ''; ARGV[2] a JSON array of
-- [schedule id, row revision, op, score (epoch ms)], op S (an entry at score) or R (none);
-- ARGV[3] the shard count the rebuild builds for. The rebuild records it in KEYS[3] before
-- its first chunk: a shard that records another refuses the chunk (a rebuild for another
-- count took over since, its lock having expired).
-- The guard is apply.lua's: a change whose row revision is older than the one recorded is
-- refused (stale), and a written one records its revision. Unlike apply.lua, the script
-- reads the chunk's scores and revisions in one call each and writes in one call per key,
-- instead of three calls per row: the rebuild writes every row, a million of them.
-- Reply: {stale, found}: found has one letter per change, in order: a (added: no entry
-- before), f (fixed: the entry had another score), r (removed), u (unchanged). The letter
-- says what the index held, whether or not a stale change was written. Refused: {0, '',
-- the shard count the shard records}.
local dry = ARGV[1] == '1'
local layout = tonumber(redis.call('GET', KEYS[3]))
if not dry and layout and layout ~= tonumber(ARGV[3]) then
  return {0, '', layout}
end
local changes = cjson.decode(ARGV[2])
if #changes == 0 then
  return {0, ''}
end
local ids = {}
for i, change in ipairs(changes) do
  -- ids travel as strings: a Lua number would print large ids in exponent form
  ids[i] = change[1]
end
local scores = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local revisions = redis.call('HMGET', KEYS[2], unpack(ids))
local found, zadd, zrem, hset = {}, {}, {}, {}
local stale = 0
for i, change in ipairs(changes) do
  local sid, rev, op, score = change[1], change[2], change[3], change[4]
  local held = scores[i] and tonumber(scores[i])
  local kind
  if op == 'S' then
    kind = (not held and 'a') or (held ~= score and 'f') or 'u'
  elseif op == 'R' then
    kind = held and 'r' or 'u'
  else
    return redis.error_reply('unknown rebuild op ' .. tostring(op))
  end
  found[i] = kind
  local current = tonumber(revisions[i])
  if current and current > rev then
    stale = stale + 1
  else
    if kind == 'a' or kind == 'f' then
      zadd[#zadd + 1] = score
      zadd[#zadd + 1] = sid
    elseif kind == 'r' then
      zrem[#zrem + 1] = sid
    end
    if current ~= rev then
      hset[#hset + 1] = sid
      hset[#hset + 1] = rev
    end
  end
end
if not dry then
  if #zadd > 0 then
    redis.call('ZADD', KEYS[1], unpack(zadd))
  end
  if #zrem > 0 then
    redis.call('ZREM', KEYS[1], unpack(zrem))
  end
  if #hset > 0 then
    redis.call('HSET', KEYS[2], unpack(hset))
  end
end
return {stale, table.concat(found)}
