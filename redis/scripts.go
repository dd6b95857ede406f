package redis

import goredis "github.com/redis/go-redis/v9"

// The Lua scripts run atomically in Redis: each is one round trip, and no
// other command of any client runs in the middle of one. Seqs are stream
// entry ids "<seq>-0". Every entry carries v, the seq of the entry before
// it in the stream (0 for the first), so a reader knows whether it missed
// one; e, the event as JSON. A delta, the bulk of a stream, is kept
// without its JSON, as its fields: p (the part), d (the delta text), a
// (created_at, Unix ns), t (the turn) and h (the thread). Trimming drops
// entries plainly: the event log folds the text so far of parts still
// streaming and publishes it as rows (forge.Event.TextSoFar).
//
// Per session (one hash slot, {session}): s the stream, o the text so far
// rows (part -> its latest row, an event as JSON, forgotten at the part's
// next model.message), m the meta hash (last: the last seq published;
// turn: the running turn; ended: the last turn that ended; wr: the process
// that last held the session; tr: a seq at or above every trimmed one,
// below every kept one), w the writer hold (a token, with a TTL).

// publishLua is the publish function both publish scripts run: it
// appends a session's n events, read from ARGV at base (8 values each),
// and returns its answer.
const publishLua = `
local function publish(stream, open, meta, hold, mode, token, maxlen, retention, runningTTL, channel, base, n)
  local m = redis.call('HMGET', meta, 'wr', 'last', 'turn', 'ended')
  if mode == 'release' then
    if redis.call('GET', hold) ~= token then return {'lost'} end
  elseif mode == 'unheld' then
    if redis.call('EXISTS', hold) == 1 then return {'busy'} end
    if m[1] ~= token then return {'stale'} end
  end
  local function done(r)
    if mode == 'release' then redis.call('DEL', hold) end
    return r
  end
  if n == 0 then return done({'ok'}) end
  local lastStr = m[2] or '0'
  local running = m[3] or ''
  local ended = m[4] or ''
  local wasRunning = running
  local deltasOnly = true
  local prev = tonumber(lastStr)
  for k = 0, n - 1 do
    local i = base + k * 8
    local seq = tonumber(ARGV[i])
    local kind, turn = ARGV[i + 1], ARGV[i + 2]
    if kind ~= 'r' then
      if seq <= prev then return done({'conflict', tostring(prev)}) end
      if kind == 'd' and turn ~= '' and (turn == ended or (running ~= '' and running ~= turn)) then
        return done({'ended', turn})
      end
      if kind ~= 'd' then deltasOnly = false end
      prev = seq
    else
      -- A row may create the open hash: it needs its TTL.
      deltasOnly = false
    end
  end
  for k = 0, n - 1 do
    local i = base + k * 8
    local seq, kind, turn, part = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3]
    local json = ARGV[i + 7]
    if kind == 'r' then
      redis.call('HSET', open, part, json)
    elseif kind == 'd' then
      redis.call('XADD', stream, seq .. '-0', 'v', lastStr, 'p', part, 'd', ARGV[i + 4], 'a', ARGV[i + 5], 't', turn, 'h', ARGV[i + 6])
    else
      redis.call('XADD', stream, seq .. '-0', 'v', lastStr, 'e', json)
    end
    if kind == 'b' then
      redis.call('HSET', meta, 'turn', turn)
      running = turn
    elseif kind == 'e' then
      if running == '' or running == turn then
        redis.call('HDEL', meta, 'turn')
        running = ''
      end
      redis.call('HSET', meta, 'ended', turn)
    elseif kind == 'm' then
      redis.call('HDEL', open, part)
    end
    if kind ~= 'r' then
      redis.call('PUBLISH', channel, seq .. ' ' .. lastStr .. ' ' .. json)
      lastStr = seq
    end
  end
  redis.call('HSET', meta, 'last', lastStr)
  local limit = tonumber(maxlen)
  local len = redis.call('XLEN', stream)
  if len > limit then
    -- Drop the oldest half; the first kept entry tells up to where.
    redis.call('XTRIM', stream, 'MAXLEN', len - math.floor(len / 2))
    local first = redis.call('XRANGE', stream, '-', '+', 'COUNT', 1)
    if #first > 0 then
      redis.call('HSET', meta, 'tr', tostring(tonumber(string.sub(first[1][1], 1, -3)) - 1))
    end
  end
  -- The keys of a running turn got its TTL when it began (and with each
  -- stored event since): its deltas, the bulk of the traffic, leave it be.
  if not (deltasOnly and running ~= '' and wasRunning ~= '' and m[2]) then
    local ttl = retention
    if running ~= '' then ttl = runningTTL end
    redis.call('PEXPIRE', stream, ttl)
    redis.call('PEXPIRE', open, ttl)
    redis.call('PEXPIRE', meta, ttl)
  end
  return done({'ok'})
end
`

// publishScript appends events to a session's stream and publishes each
// on the session's channel.
//
// KEYS: stream, open, meta, hold.
// ARGV: mode (plain | release | unheld), token (release: the hold's token;
// unheld: this process's writer id), maxlen, retention ms, running TTL ms,
// channel, then 8 values per event: seq, kind (b turn.created, e
// turn.done, m a model.message: forget its part's row, d delta, "" other,
// r a text so far row to keep for the part: not an entry, it goes before
// its event), turn, part, delta text, created_at ns, thread, event JSON.
//
// Returns {"ok"}, {"lost"} (release: the hold expired), {"busy"} or
// {"stale"} (unheld: another process holds the session or wrote it last),
// {"conflict", last} (a seq not above the last one) or {"ended", turn} (a
// delta of a turn that ended or is not the running one). Nothing is
// written unless it returns ok; release mode ends the hold either way.
var publishScript = goredis.NewScript(publishLua + `
return publish(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], 7, (#ARGV - 6) / 8)
`)

// publishGroupScript is publishScript for several sessions of one server
// in one call (publishGroups): each is published, or not, on its own,
// exactly as publishScript would in the order given.
//
// KEYS: stream, open, meta, hold of each session. ARGV: mode, token,
// maxlen, retention ms, running TTL ms, then per session: channel, n (its
// events' count), its events' 8 values each. Returns each session's answer.
var publishGroupScript = goredis.NewScript(publishLua + `
local out = {}
local i = 6
for s = 0, #KEYS / 4 - 1 do
  local n = tonumber(ARGV[i + 1])
  out[s + 1] = publish(KEYS[s * 4 + 1], KEYS[s * 4 + 2], KEYS[s * 4 + 3], KEYS[s * 4 + 4],
    ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[i], i + 2, n)
  i = i + 2 + n * 8
end
return out
`)

// turnScript marks a turn running (begin) or ended (end).
//
// KEYS: stream, open, meta. ARGV: begin | end, turn, retention ms,
// running TTL ms.
var turnScript = goredis.NewScript(`
local stream, open, meta = KEYS[1], KEYS[2], KEYS[3]
local ttl = ARGV[4]
if ARGV[1] == 'begin' then
  redis.call('HSET', meta, 'turn', ARGV[2])
else
  local running = redis.call('HGET', meta, 'turn')
  if running and running ~= ARGV[2] then return 0 end
  redis.call('HDEL', meta, 'turn')
  redis.call('HSET', meta, 'ended', ARGV[2])
  ttl = ARGV[3]
end
redis.call('PEXPIRE', stream, ttl)
redis.call('PEXPIRE', open, ttl)
redis.call('PEXPIRE', meta, ttl)
return 1
`)

// acquireScript takes a session's writer hold.
//
// KEYS: hold, meta. ARGV: token, writer id, hold TTL ms, retention ms.
// Returns -1 when another process holds it, 1 when this process was the
// session's last writer (its seq block is still good), 0 otherwise.
var acquireScript = goredis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[3]) then return -1 end
local last = redis.call('HGET', KEYS[2], 'wr')
redis.call('HSET', KEYS[2], 'wr', ARGV[2])
if redis.call('PTTL', KEYS[2]) < 0 then redis.call('PEXPIRE', KEYS[2], ARGV[4]) end
if last == ARGV[2] then return 1 end
return 0
`)

// snapshotScript reads what a new subscription starts from.
//
// KEYS: stream, open, meta. ARGV: after (a seq).
// Returns {text so far rows (flat field/value list; none unless entries
// above the seq were trimmed), entries after the seq, the last seq
// published}.
var snapshotScript = goredis.NewScript(`
local m = redis.call('HMGET', KEYS[3], 'last', 'tr')
local rows = {}
if tonumber(m[2] or '0') > tonumber(ARGV[1]) then rows = redis.call('HGETALL', KEYS[2]) end
local entries = redis.call('XRANGE', KEYS[1], '(' .. ARGV[1] .. '-0', '+')
return {rows, entries, m[1] or '0'}
`)

// lockScript takes a named lock, or extends it for its holder.
//
// KEYS: the lock. ARGV: this process's token, TTL ms. Returns 1 when this
// process holds it now, 0 when another does.
var lockScript = goredis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// unlockScript releases a named lock if this process holds it.
var unlockScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)
