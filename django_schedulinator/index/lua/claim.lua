-- Claim up to ARGV[1] due entries of the index, atomically.
--
-- KEYS[1] due set      member = schedule id, score = next run (epoch ms)
-- KEYS[2] in-flight    member = "<schedule id>@<claim token>", score = lease deadline (epoch ms)
-- KEYS[3] marker       exists once the index (this shard of it) has been built from SQL:
--                      JSON that records "shards", the shard count it was built for
-- KEYS[4] wake flag    set when runs were queued in SQL (run now, backfill): take them now
-- KEYS[5] layout       the shard count of the layout this hash tag belongs to, written by a
--                      rebuild before it touches an entry (and kept in a shard a new layout
--                      dropped); absent on an index built before it existed
-- ARGV[1] batch limit, ARGV[2] lease (ms), ARGV[3] claim token, ARGV[4] requeue limit,
-- ARGV[5] "now" in epoch ms: the pass's "now" read on shard 0 (a sharded index), or a
-- test's controlled clock; '' for Redis TIME
-- ARGV[6] the shard count the caller expects: a layout or a marker that records another is
-- an index built (or being rebuilt) for another layout, from which nothing is claimed
--
-- "now" is Redis TIME, so every claimer on every host agrees on it; it is returned so the
-- caller re-checks the rows against the very same instant. Every step is bounded by a LIMIT.
-- Reply: {built (0/1), now, requeued, earliest remaining due score or -1, woken (0/1),
--         shards recorded (the other layout when it differs; 0: no marker), id, score, ...}
local now
if ARGV[5] ~= '' then
  now = tonumber(ARGV[5])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local woken = redis.call('DEL', KEYS[4])
local expected = tonumber(ARGV[6])
local marker = redis.call('GET', KEYS[3])
local layout = tonumber(redis.call('GET', KEYS[5]))
if layout and layout ~= expected then
  return {0, now, 0, -1, woken, layout}
end
if not marker then
  return {0, now, 0, -1, woken, 0}
end
-- A marker written before shards existed records none: one.
local shards = tonumber(string.match(marker, '"shards": *(%d+)')) or 1
if shards ~= expected then
  return {0, now, 0, -1, woken, shards}
end

-- A lease that expired belongs to a process that died or stalled: make its entry due again.
-- NX keeps any score written meanwhile (by a sync, a rebuild or the finishing worker).
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[4]))
for _, member in ipairs(expired) do
  redis.call('ZREM', KEYS[2], member)
  local sid = string.match(member, '^(%d+)@')
  if sid then
    redis.call('ZADD', KEYS[1], 'NX', now, sid)
  end
end

local lease_until = now + tonumber(ARGV[2])
local suffix = '@' .. ARGV[3]
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[1]))
local reply = {1, now, #expired, -1, woken, shards}
for i = 1, #due, 2 do
  redis.call('ZREM', KEYS[1], due[i])
  redis.call('ZADD', KEYS[2], lease_until, due[i] .. suffix)
  reply[#reply + 1] = due[i]
  reply[#reply + 1] = due[i + 1]
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] then
  reply[4] = tonumber(head[2])
end
return reply
