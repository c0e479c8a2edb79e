package redis

import goredis "github.com/redis/go-redis/v9"

// The Lua side of the backend: storage only. Scripts add, rewrite and
// remove claims atomically, issue tokens and reap the claims of ended
// leases; which claims hold a key is decided in Go (package backend's
// rules) from the queues the scripts return.
//
// Every script takes KEYS[1] = the prefix's token counter, which routes it
// (all keys of a Backend share one hash tag, so one node holds them all),
// and ARGV[1] = the hash tag "{prefix}". Lock keys, claim IDs, owners and
// values arrive only as ARGV, never in the script text.
//
// A claim's record at one lock key is the hash field <id> of {p}c:<key>,
// owner label and value included, so that a claim is one field to write
// and one to delete:
//
//	"<token> <lease> <permits> <shared 0|1> <admitted 0|1> <permit> <acquired-at ms> <stamp hex|0> <owner len> <owner><value>"
//
// Its place in the queue is the member <id> of the sorted set
// {p}q:<key>, scored by token. Its lease indexes it as "<id>\n<key>" in
// the set {p}lc:<lease>.
//
// Each admission and departure of a claim, "<a|d> <token> <key>", goes to
// the claim's channel {p}e:<token>, which its waiters hear; a claim
// admitted as it joins has no waiters yet (its token is new), so that
// admission is not sent. A departure from the head of the queue (no claim
// ahead of it at that moment) is "h <token> <server ms> <key>": claims
// only join at the back, so the claim just behind it has nothing ahead
// from then on (see wait.go's handedOff); "H" instead when the run also
// recorded that time in the claim behind (see handed). Each removal also
// tells the claim just behind the removed one, if any, on the channel of
// the Backend that named it, {p}b:<the name's first 12 characters> (see
// behind): an exclusive waiter its Backend named hears there of the one
// claim it waits for, so it subscribes to no claim channel (see
// registry.direct). Every change at a key goes to
// the key's channel {p}k:<key>, which its observers hear: one message per
// key and script run, published as the run ends, one entry per change in
// the order made,
//
//	"<kind> <head> <body len>\n<body>"
//
// where the kinds are j (a claim joined; head its lease's pttl, body its
// record), r (its record was rewritten: admitted or stamped; the same), v
// (its value was set; head its token, body the value) and d (it departed;
// head its token, no body). That is all an observer needs to follow the
// queue without reading it. An observer's read (observeScript) publishes
// "m <nonce>" on the channel last: the messages before it are in the
// read, those after it are not (see observe.go).

// lib holds the functions every script shares; each script is lib followed
// by its body.
const lib = `
local tag = ARGV[1]
local function fmt(n) return string.format('%d', n) end
-- now_us reads the server's clock once per run: a script runs as one
-- step, so one reading serves all its tokens and times.
local nowus
local function now_us()
  if not nowus then
    local t = redis.call('TIME')
    nowus = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return nowus
end
-- now_ms is that reading in milliseconds, as a string.
local function now_ms() return fmt(math.floor(now_us() / 1000)) end
-- parse reads a record: its fields, its owner (o) and its value (v).
local function parse(m)
  local t, l, n, sh, a, p, at, st, ol, i = string.match(m, '^(%d+) (%d+) (%d+) ([01]) ([01]) (%-?%d+) (%d+) (%x+) (%d+) ()')
  if not t then return nil end
  local j = i + tonumber(ol)
  return {t = t, l = l, n = n, sh = sh, a = a, p = p, at = at, st = st, o = string.sub(m, i, j - 1), v = string.sub(m, j)}
end
local function unparse(r)
  return table.concat({r.t, r.l, r.n, r.sh, r.a, r.p, r.at, r.st, #r.o, r.o .. r.v}, ' ')
end
-- newtoken issues a token: the larger of the last one plus one and the
-- server's clock in microseconds.
local function newtoken()
  local last = tonumber(redis.call('GET', KEYS[1]) or '0')
  local t = fmt(math.max(now_us(), last + 1))
  redis.call('SET', KEYS[1], t)
  return t
end
-- claimev tells a claim's waiters of its admission or departure; a
-- departure from the head of its queue carries the server's clock in ms.
local function claimev(what, token, key)
  local at = ''
  if what == 'h' or what == 'H' then at = now_ms() .. ' ' end
  redis.call('PUBLISH', tag .. 'e:' .. token, what .. ' ' .. token .. ' ' .. at .. key)
end
-- keyev records a change at key for its observers; flush publishes them.
local keyevs, evkeys = {}, {}
local function keyev(key, kind, head, body)
  body = body or ''
  local l = keyevs[key]
  if not l then
    l = {}
    keyevs[key] = l
    evkeys[#evkeys + 1] = key
  end
  l[#l + 1] = kind .. ' ' .. head .. ' ' .. #body .. '\n' .. body
end
local function flush()
  for _, k in ipairs(evkeys) do
    redis.call('PUBLISH', tag .. 'k:' .. k, table.concat(keyevs[k]))
  end
  keyevs, evkeys = {}, {}
end
-- pttlof returns a lease's remaining TTL in ms (-2 if it has ended), read
-- once per run and lease: nothing a script does renews a lease.
local pttls = {}
local function pttlof(lease)
  local p = pttls[lease]
  if not p then
    p = redis.call('PTTL', tag .. 'lease:' .. lease)
    pttls[lease] = p
  end
  return p
end
-- settle writes to the append-only file (and the replicas) the releases
-- and joins made without it since the last run that wrote to it (see
-- releaseScript and enqueueScript). A release's entries are written again
-- as an add and a remove, a join's as a remove and an add of the claim as
-- it is now (if it is still there), since Redis logs only commands that
-- change something; after a join the token counter is written too, so
-- that the file never holds a token above its counter. Every run that
-- writes settles first, so a removed entry is still absent when it is
-- settled, and the file never holds a later change without the releases
-- and joins before it. A run settles once, before its first write: at its
-- start, or for a join (see joinScript) before the first write it makes
-- to the file, none if it joins lazily, and before anything its reads
-- remove (see drop, reap, state and tail).
local settled = false
local function settle()
  if settled then return end
  settled = true
  local p = tag .. 'pend'
  local es = redis.call('SMEMBERS', p)
  if #es == 0 then return end
  -- Deleted first: a server over its memory limit refuses a command that
  -- may grow memory only as a run's first write, and the pairs below
  -- grow nothing, so a renewal or a release goes on there as before (the
  -- run's own writes that grow memory pass too: one run per settle).
  redis.set_repl(redis.REPL_NONE)
  redis.call('DEL', p)
  redis.set_repl(redis.REPL_ALL)
  local joined = false
  for _, e in ipairs(es) do
    local jid, jkey = string.match(e, '^j([^\n]*)\n(.*)$')
    local l, id, key = string.match(e, '^(%d+)\n([^\n]*)\n(.*)$')
    local m = jid and redis.call('HGET', tag .. 'c:' .. jkey, jid)
    local r = m and parse(m)
    if r then
      local q, c, x = tag .. 'q:' .. jkey, tag .. 'c:' .. jkey, jid .. '\n' .. jkey
      redis.call('ZREM', q, jid)
      redis.call('ZADD', q, r.t, jid)
      redis.call('HDEL', c, jid)
      redis.call('HSET', c, jid, m)
      redis.call('SREM', tag .. 'lc:' .. r.l, x)
      redis.call('SADD', tag .. 'lc:' .. r.l, x)
      joined = true
    elseif l then
      local q, c, x = tag .. 'q:' .. key, tag .. 'c:' .. key, id .. '\n' .. key
      redis.call('ZADD', q, 0, id)
      redis.call('ZREM', q, id)
      redis.call('HSET', c, id, '')
      redis.call('HDEL', c, id)
      redis.call('SADD', tag .. 'lc:' .. l, x)
      redis.call('SREM', tag .. 'lc:' .. l, x)
    end
  end
  local last = joined and redis.call('GET', KEYS[1])
  if last then redis.call('SET', KEYS[1], last) end
end
-- handed records in claim id, now at the head of key's queue, if it was
-- admitted when it joined (placed), that it came to hold now, and reports
-- whether it did: called only when the claim that left the head held it
-- alone (the caller says so, see releaseScript), so the one behind it
-- waited for it, and a placed claim holds once nothing is ahead (see
-- wait.go).
local function handed(key, id)
  local c = tag .. 'c:' .. key
  local m = redis.call('HGET', c, id)
  local r = m and parse(m)
  if not r or r.a ~= '1' then return false end
  r.at = now_ms()
  m = unparse(r)
  redis.call('HSET', c, id, m)
  keyev(key, 'r', fmt(pttlof(r.l)), m)
  return true
end
-- behind tells claim id, just behind the claim with token that left
-- key's queue, of that departure (what is as on the claim's channel, see
-- claimev), on the channel of the Backend whose names begin as id's do
-- (the first 12 characters; see backend.ClaimNames):
-- "<d|h|H> <token> <server ms|0> <id len> <id><key>".
local function behind(key, id, token, what)
  local at = '0'
  if what ~= 'd' then at = now_ms() end
  redis.call('PUBLISH', tag .. 'b:' .. string.sub(id, 1, 12),
    what .. ' ' .. token .. ' ' .. at .. ' ' .. #id .. ' ' .. id .. key)
end
-- drop removes claim id at key, whatever its token, and reports its
-- departure, on its channel and to the claim just behind it. m is its
-- record if the caller has read it already; alone says that the claim
-- held its key alone, so that the claim behind it, if placed, comes to
-- hold now (see handed; its departure is then "H").
local function drop(key, id, m, alone)
  settle()
  local c, q = tag .. 'c:' .. key, tag .. 'q:' .. key
  m = m or redis.call('HGET', c, id)
  local rank = redis.call('ZRANK', q, id)
  redis.call('ZREM', q, id)
  redis.call('HDEL', c, id)
  local r = m and parse(m)
  if r then
    redis.call('SREM', tag .. 'lc:' .. r.l, id .. '\n' .. key)
    local nx = rank and redis.call('ZRANGE', q, rank, rank)[1]
    local what = 'd'
    if rank == 0 then what = alone and nx and handed(key, nx) and 'H' or 'h' end
    claimev(what, r.t, key)
    keyev(key, 'd', r.t)
    if nx then behind(key, nx, r.t, what) end
  end
  return r ~= nil
end
-- reap removes every claim of a lease that has ended.
local function reap(lease)
  settle()
  local idx = tag .. 'lc:' .. lease
  for _, m in ipairs(redis.call('SMEMBERS', idx)) do
    local nl = string.find(m, '\n', 1, true)
    if nl then drop(string.sub(m, nl + 1), string.sub(m, 1, nl - 1)) end
  end
  redis.call('DEL', idx)
end
-- state reaps the claims of ended leases queued at key with a token up to
-- upto ('+inf' for all), then lists them in token order: {id, record,
-- lease pttl} per claim.
local function state(key, upto)
  local q, c = tag .. 'q:' .. key, tag .. 'c:' .. key
  local ids = redis.call('ZRANGEBYSCORE', q, '-inf', upto)
  local recs, leases, reaped, dead = {}, {}, {}, false
  for _, id in ipairs(ids) do
    local m = redis.call('HGET', c, id)
    local r = m and parse(m)
    if not r then
      settle()
      redis.call('ZREM', q, id)
      redis.call('HDEL', c, id)
    else
      recs[id], leases[id] = m, r.l
      if pttlof(r.l) == -2 and not reaped[r.l] then
        reap(r.l)
        reaped[r.l], dead = true, true
      end
    end
  end
  -- A reap removes claims and never changes a record, so the records read
  -- above serve the claims that remain.
  if dead then ids = redis.call('ZRANGEBYSCORE', q, '-inf', upto) end
  local out = {}
  for _, id in ipairs(ids) do
    local m = recs[id]
    if m then
      local p = pttlof(leases[id])
      out[#out + 1] = {id, m, p < 0 and -1 or p}
    end
  end
  return out
end
-- tail is state for the last n claims queued at key alone: it reaps the
-- claims of ended leases among them until they are all live (each pass
-- removes at least the claim it found dead), then lists them.
local function tail(key, n)
  local q, c = tag .. 'q:' .. key, tag .. 'c:' .. key
  while true do
    local out, dead = {}, false
    for _, id in ipairs(redis.call('ZRANGE', q, -n, -1)) do
      local m = redis.call('HGET', c, id)
      local r = m and parse(m)
      if not r then
        settle()
        redis.call('ZREM', q, id)
        redis.call('HDEL', c, id)
        dead = true
      elseif pttlof(r.l) == -2 then
        drop(key, id, m)
        reap(r.l)
        dead = true
      else
        out[#out + 1] = {id, m, pttlof(r.l)}
      end
    end
    if not dead then return out end
  end
end
-- stampmax returns the highest stamp recorded at any of keys, or '0'.
local function stampmax(keys)
  local best = '0'
  for _, k in ipairs(keys) do
    local s = redis.call('GET', tag .. 's:' .. k)
    if s and (best == '0' or s > best) then best = s end
  end
  return best
end
-- claimed returns the records of claim id with token at every key, or nil
-- if it is missing at any of them.
local function claimed(keys, id, token)
  local rs = {}
  for i, k in ipairs(keys) do
    local r = parse(redis.call('HGET', tag .. 'c:' .. k, id) or '')
    if not r or r.t ~= token then return nil end
    rs[i] = r
  end
  return rs
end
local function slice(from, n)
  local out = {}
  for i = 1, n do out[i] = ARGV[from + i - 1] end
  return out
end
`

// script makes a script of lib and body, which may return anywhere: it
// first settles the releases made without the append-only file, and the
// changes it recorded for the keys' observers are published once it has.
func script(body string) *goredis.Script { return wrapped(body, "settle()\n") }

// joinScript is script for enqueueScript, whose body settles (see settle)
// only before it writes to the append-only file: a join made without it
// (lazy) does not wait for an fsync, so neither does it write the joins
// and releases noted before it, which wait for the next run that writes.
func joinScript(body string) *goredis.Script { return wrapped(body, "") }

// wrapped makes a script of lib and body, running first what first says,
// then body, then publishing what body recorded for observers.
func wrapped(body, first string) *goredis.Script {
	return goredis.NewScript(lib + "local function body()\n" + body + "\nend\n" + first + "local reply = body()\nflush()\nreturn reply\n")
}

// readScript makes a script of lib and body that writes nothing: it has
// nothing to settle.
func readScript(body string) *goredis.Script {
	return goredis.NewScript(lib + body)
}

// enqueueScript adds a claim at every key of a request, with a fresh token.
//
// ARGV: tag, id, lease, permits, shared (0|1), mode, permit, owner, value,
// want stamp (0|1), placed (0|1), lazy (0|1), ahead, n keys, keys..., then
// in mode "cond" one expected last token per key ("0" for an empty queue).
//
// Mode "fair" always queues the claim; it is admitted at once (with the
// given permit) only when every queue was empty. A claim whose admission
// the caller says follows from its place in the queue alone ("placed": a
// single-key claim that takes no permit) is recorded as admitted from the
// start, so that the departure of the claim ahead is its handoff. Mode
// "cond" adds it, admitted, only if every queue's newest token is the
// expected one, that is no claim joined since the caller read the queues
// (claims only join at the back, and leaving only frees). In mode "fair"
// with ahead > 0, the states list only the last ahead claims of each queue
// (what package backend's Ahead says the caller's rules read), so that
// joining a long queue is not a read of all of it; a claim named id is
// looked for in the listed claims and, when they may not be the whole
// queue, by its record.
//
// With lazy set (a claim the rule admits only with nothing ahead, see
// joinsLazily), a claim that queues behind others is added without the
// append-only file and the replicas, and noted in {p}pend: it holds
// nothing until a claim ahead departs, a write that settles it first
// (see settle), so the server answers without waiting for an fsync. A
// crash before then loses the claim, which its waiter finds and joins
// again. The replies:
//
//	{"nolease"}                        the lease has ended
//	{"mismatch", key}                  key's queue agrees on another permit count
//	{"exists", record, states...}      a claim named id is already at the first key (whole queues)
//	{"changed", states...}             mode "cond": a queue is not as expected
//	{"ok", token, acquired-at, stamp}  added and admitted
//	{"queued", token, now, states...}  added behind states (the queues before it); now is the server's clock in ms
var enqueueScript = joinScript(`
local id, lease, n, shared, mode, permit = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local owner, value, wantstamp, placed, lazy = ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12]
local ahead, nk = tonumber(ARGV[13]), tonumber(ARGV[14])
local keys = slice(15, nk)
local pttl = pttlof(lease)
if pttl == -2 then return {'nolease'} end
local whole = mode == 'cond' or ahead == 0
local states = {}
for i, k in ipairs(keys) do
  if whole then states[i] = state(k, '+inf') else states[i] = tail(k, ahead) end
end
local function find()
  for _, c in ipairs(states[1]) do
    if c[1] == id then return c[2] end
  end
end
local own = find()
-- A tail shorter than ahead is the whole queue, a full one may not be: a
-- claim named id is looked for by its record then. One found waits again
-- with the whole queues of every key, the claims ahead of it included.
if not whole and (own or (#states[1] == ahead and redis.call('HEXISTS', tag .. 'c:' .. keys[1], id) == 1)) then
  for i, k in ipairs(keys) do states[i] = state(k, '+inf') end
  own = find()
end
if own then return {'exists', own, unpack(states)} end
local empty = true
for i, k in ipairs(keys) do
  local s = states[i]
  if #s > 0 then
    empty = false
    if parse(s[1][2]).n ~= n then return {'mismatch', k} end
    if mode == 'cond' and parse(s[#s][2]).t ~= ARGV[14 + nk + i] then return {'changed', unpack(states)} end
  elseif mode == 'cond' and ARGV[14 + nk + i] ~= '0' then
    return {'changed', unpack(states)}
  end
end
local adm = mode == 'cond' or empty
lazy = lazy == '1' and not adm
-- A lazy join writes nothing to the file: what is noted stays noted.
if lazy then redis.set_repl(redis.REPL_NONE) else settle() end
local token = newtoken()
local r = {t = token, l = lease, n = n, sh = shared, a = '0', p = '-1', at = '0', st = '0', o = owner, v = value}
if adm or placed == '1' then r.a, r.p, r.at = '1', permit, now_ms() end
local m = unparse(r)
for _, k in ipairs(keys) do
  redis.call('ZADD', tag .. 'q:' .. k, token, id)
  redis.call('HSET', tag .. 'c:' .. k, id, m)
  redis.call('SADD', tag .. 'lc:' .. lease, id .. '\n' .. k)
  if lazy then redis.call('SADD', tag .. 'pend', 'j' .. id .. '\n' .. k) end
  keyev(k, 'j', fmt(pttl), m)
end
if adm then
  local st = '0'
  if wantstamp == '1' then st = stampmax(keys) end
  return {'ok', token, r.at, st}
end
return {'queued', token, now_ms(), unpack(states)}
`)

// stateScript reaps and lists the queues of keys, each up to a token:
// a waiter needs only the claims up to its own.
//
// ARGV: tag, n keys, keys..., then per key the highest token to list
// ("+inf" for all). Reply: one state per key (see state in lib), then the
// server's clock in milliseconds: the time a waiter that this read finds
// holding records as its acquisition.
var stateScript = script(`
local nk = tonumber(ARGV[2])
local keys = slice(3, nk)
local out = {}
for i, k in ipairs(keys) do out[i] = state(k, ARGV[2 + nk + i]) end
out[nk + 1] = now_ms()
return out
`)

// observeScript reaps and lists the queue of one key. Unless nonce is
// "", it then publishes "m <nonce>" on the key's channel: the messages of
// the channel before that one are in the read (the reap's included),
// those after it are not.
//
// ARGV: tag, key, nonce. Reply: the key's state (see state in lib).
var observeScript = script(`
local s = state(ARGV[2], '+inf')
flush()
if ARGV[3] ~= '' then redis.call('PUBLISH', tag .. 'k:' .. ARGV[2], 'm ' .. ARGV[3]) end
return s
`)

// recordsScript returns the records of given claims, each named by a key
// and a token: what a waiter checks of the claims it waits for.
//
// ARGV: tag, n, then n pairs key, token. Reply: per pair the claim's
// record, or "" if no claim with that token is queued at that key.
var recordsScript = readScript(`
local out = {}
for i = 1, tonumber(ARGV[2]) do
  local k, t = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  local ids = redis.call('ZRANGEBYSCORE', tag .. 'q:' .. k, t, t)
  out[i] = ids[1] and redis.call('HGET', tag .. 'c:' .. k, ids[1]) or ''
end
return out
`)

// admitScript records that a claim holds its keys: its permit and the
// time, compared on the claim's identity (id and token) at every key.
// The time is the given one, or the server's clock when that is "": a
// claim already recorded as admitted (placed) holds from the read that
// found it free, and this run only records when, after the fact.
//
// ARGV: tag, id, token, permit, want stamp (0|1), acquired-at ms or "",
// n keys, keys... Reply: {"gone"} or {"ok", acquired-at, stamp}.
var admitScript = script(`
local id, token, permit, wantstamp, at = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local keys = slice(8, tonumber(ARGV[7]))
local rs = claimed(keys, id, token)
if not rs then return {'gone'} end
if at == '' then at = now_ms() end
for i, k in ipairs(keys) do
  local r = rs[i]
  r.a, r.p, r.at = '1', permit, at
  local m = unparse(r)
  redis.call('HSET', tag .. 'c:' .. k, id, m)
  claimev('a', token, k)
  keyev(k, 'r', fmt(pttlof(r.l)), m)
end
local st = '0'
if wantstamp == '1' then st = stampmax(keys) end
return {'ok', at, st}
`)

// stampScript records a holder's stamp, compared on its identity, and
// raises each key's highest stamp to it.
//
// ARGV: tag, id, token, stamp (hex), n keys, keys... Reply: 1, or 0 if the
// claim is gone.
var stampScript = script(`
local id, token, stamp = ARGV[2], ARGV[3], ARGV[4]
local keys = slice(6, tonumber(ARGV[5]))
local rs = claimed(keys, id, token)
if not rs then return 0 end
for i, k in ipairs(keys) do
  rs[i].st = stamp
  local m = unparse(rs[i])
  redis.call('HSET', tag .. 'c:' .. k, id, m)
  keyev(k, 'r', fmt(pttlof(rs[i].l)), m)
  local s = redis.call('GET', tag .. 's:' .. k)
  if not s or s < stamp then redis.call('SET', tag .. 's:' .. k, stamp) end
end
return 1
`)

// releaseScript removes a claim at every key where it still has the given
// token, or any token when that is "" (the claim of a failed Acquire,
// named by its acquisition's unique id).
//
// With lazy set (a claim whose holder removes it again should a server
// restart bring it back: see Backend.Release), a release that leaves
// every queue of the claim empty is made without the append-only file
// and the replicas: no claim waits on it, so nothing is granted by it,
// and the server answers without waiting for an fsync. It is noted in
// {p}pend, which the next run that writes settles (see settle). A crash
// before then brings the claim back as it was before the release.
//
// With alone set (the caller's rule says the claim held its keys alone,
// backend.HoldsAlone), the placed claim behind it learns from the release
// that it holds, which records when (see handed).
//
// ARGV: tag, id, token, lazy (0|1), alone (0|1), n keys, keys... Reply:
// how many keys it left.
var releaseScript = script(`
local id, token = ARGV[2], ARGV[3]
local keys = slice(7, tonumber(ARGV[6]))
local lazy, alone = ARGV[4] == '1', ARGV[5] == '1'
for _, k in ipairs(keys) do
  if lazy and redis.call('ZCARD', tag .. 'q:' .. k) > 1 then lazy = false end
end
if lazy then redis.set_repl(redis.REPL_NONE) end
local n = 0
for _, k in ipairs(keys) do
  local m = redis.call('HGET', tag .. 'c:' .. k, id)
  local r = m and parse(m)
  if r and (token == '' or r.t == token) and drop(k, id, m, alone) then
    n = n + 1
    if lazy then redis.call('SADD', tag .. 'pend', r.l .. '\n' .. id .. '\n' .. k) end
  end
end
return n
`)

// setValueScript replaces a claim's value at every key, compared on its
// identity.
//
// ARGV: tag, id, token, value, n keys, keys... Reply: 1, or 0 if the
// claim is gone.
var setValueScript = script(`
local id, token, value = ARGV[2], ARGV[3], ARGV[4]
local keys = slice(6, tonumber(ARGV[5]))
local rs = claimed(keys, id, token)
if not rs then return 0 end
for i, k in ipairs(keys) do
  rs[i].v = value
  redis.call('HSET', tag .. 'c:' .. k, id, unparse(rs[i]))
  keyev(k, 'v', token, value)
end
return 1
`)

// grantScript creates a lease. Its id follows the same rule as tokens
// (the last id plus one, or the server's clock in microseconds if that is
// larger), so that a server that lost the last ids (a failover, a restart
// without persistence) does not hand an id out again: a client still
// renewing the old lease would renew another client's.
// ARGV: tag, ttl ms. Reply: its id.
var grantScript = script(`
local last = tonumber(redis.call('GET', tag .. 'leases') or '0')
local id = fmt(math.max(now_us(), last + 1))
redis.call('SET', tag .. 'leases', id)
redis.call('SET', tag .. 'lease:' .. id, ARGV[2], 'PX', ARGV[2])
return id
`)

// keepAliveScript renews a lease for its TTL if it still exists; it never
// creates one. ARGV: tag, id. Reply: {TTL in ms, or -1 if it has ended;
// the number of entries in the lease's claim index}.
var keepAliveScript = script(`
local k = tag .. 'lease:' .. ARGV[2]
local ttl = redis.call('GET', k)
if not ttl then return {-1, 0} end
redis.call('PEXPIRE', k, ttl)
return {tonumber(ttl), redis.call('SCARD', tag .. 'lc:' .. ARGV[2])}
`)

// revokeScript ends a lease and removes its claims. ARGV: tag, id.
var revokeScript = script(`
redis.call('DEL', tag .. 'lease:' .. ARGV[2])
reap(ARGV[2])
return 1
`)

// reapScript removes the claims of a lease if it has ended. ARGV: tag, id.
var reapScript = script(`
if redis.call('EXISTS', tag .. 'lease:' .. ARGV[2]) == 1 then return 0 end
reap(ARGV[2])
return 1
`)
