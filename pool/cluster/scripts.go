package cluster

import "github.com/redis/go-redis/v9"

// The semaphore's scripts. Each operation is one script, so that it is
// atomic on the server, and each reads the clock with TIME, so that lease
// expiry never depends on the gateways' clocks. Times are milliseconds.
//
// Keys of one replica (prefix P = "{name}:", a Redis Cluster hash tag, so
// that every key of a deployment lives in one slot):
//
//	P sem:<replica>:h   ZSET lease id -> expiry          the leases held
//	P sem:<replica>:q   ZSET gateway  -> ticket          gateways waiting, in ticket order
//	P sem:<replica>:qx  ZSET gateway  -> expiry          when a waiting gateway's place lapses
//	P sem:<replica>:r   ZSET "gateway|n" -> expiry       slots reserved for gateways not yet rejoined
//	P seq               STRING                           ticket counter
//	P gw                ZSET gateway  -> expiry          gateways alive (heartbeats)
//	P stats:<gateway>   STRING (JSON, PX)                a gateway's published stats
//
// A lease id is "<gateway>:<n>", so that a gateway can find its own.
//
// Every key has a TTL: a script that writes a key sets its expiry to the
// longest any of its members can live (lease_ttl; twice that for
// reservations), so that nothing stays once every gateway is gone, even
// killed.

// scriptNow reads the server clock in milliseconds.
const scriptNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// scriptReserved sums the live reservations of KEYS[4] into "reserved".
const scriptReserved = `
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
local reserved = 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[4], 0, -1)) do
  local i = string.find(m, '|', 1, true)
  reserved = reserved + tonumber(string.sub(m, i + 1))
end
`

// acquireScript grants up to ARGV[4] leases to gateway ARGV[1].
//
// KEYS: holders, queue, queue expiry, reserved, seq, gateways. ARGV:
// gateway, lease id prefix, first lease number, wanted, limit, ttl,
// channel, replica, queue place ttl, leases the gateway holds.
//
// Fairness: a gateway may take a free slot only if fewer gateways wait
// before it in the queue than there are free slots (a gateway not in the
// queue counts as last). Alone, it takes as many as it wants and are free;
// with others waiting, an even part of the free slots (at least one), and
// then goes to the back of the queue when it still wants more. So waiting
// gateways are served round robin in ticket order: none starves, however
// many callers another gateway has. When slots stay free for gateways
// behind, PUBLISH tells them to try at once. A gateway left short of its
// fair part (limit / gateways waiting, at least 1) PUBLISHes "q|replica"
// each time it asks, so that gateways keeping their leases for their own
// calls (see limiter) give back what is beyond their part: a notice that
// a gateway missed, or an answer telling it no one waits that crossed
// one, costs at most one PollInterval.
//
// A waiting gateway's place lapses after the queue place ttl (about 1 s)
// unless it asks again (it does every PollInterval while it waits), so a
// dead gateway first in the queue stops blocking the others within it,
// whether or not it held leases; its leases lapse after ttl.
//
// Returns {granted, free after the grant, other gateways waiting,
// gateways alive}: the last keeps the membership (the local share's
// divisor) as fresh as the calls.
var acquireScript = redis.NewScript(scriptNow + scriptReserved + `
local gw = ARGV[1]
local want, limit, ttl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for _, g in ipairs(stale) do redis.call('ZREM', KEYS[2], g) end
if #stale > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now) end
local free = limit - redis.call('ZCARD', KEYS[1]) - reserved
local q = redis.call('ZRANGE', KEYS[2], 0, -1)
local pos = #q
for i, g in ipairs(q) do
  if g == gw then pos = i - 1 break end
end
local inq = pos < #q
local others = #q
if inq then others = others - 1 end
local k = 0
if free > 0 and pos < free then
  if others == 0 then
    k = math.min(want, free)
  else
    k = math.min(want, math.max(1, math.floor(free / (others + 1))))
  end
end
local first = tonumber(ARGV[3])
for i = 0, k - 1 do
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[2] .. (first + i))
end
if k > 0 then redis.call('PEXPIRE', KEYS[1], ttl) end
if k > 0 and inq then
  redis.call('ZREM', KEYS[2], gw)
  inq = false
end
if want > k then
  if not inq then
    redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[5]), gw)
  end
  if tonumber(ARGV[10]) + k < math.max(1, math.floor(limit / (others + 1))) then
    redis.call('PUBLISH', ARGV[7], 'q|' .. ARGV[8])
  end
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[9]), gw)
  for _, i in ipairs({2, 3, 5}) do redis.call('PEXPIRE', KEYS[i], ttl) end
else
  redis.call('ZREM', KEYS[3], gw)
end
if others > 0 and free - k > 0 then redis.call('PUBLISH', ARGV[7], ARGV[8]) end
return {k, free - k, others, redis.call('ZCOUNT', KEYS[6], '(' .. now, '+inf')}
`)

// releaseScript removes leases and, when gateways wait, tells them.
//
// KEYS: holders, queue. ARGV: channel, replica, lease ids...
// Returns how many leases were removed.
var releaseScript = redis.NewScript(`
local n = 0
for i = 3, #ARGV do n = n + redis.call('ZREM', KEYS[1], ARGV[i]) end
if n > 0 and redis.call('ZCARD', KEYS[2]) > 0 then redis.call('PUBLISH', ARGV[1], ARGV[2]) end
return n
`)

// leaveScript takes a gateway that no longer waits out of the queue.
//
// KEYS: queue, queue expiry. ARGV: gateway, channel, replica.
var leaveScript = redis.NewScript(`
local n = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
if n > 0 and redis.call('ZCARD', KEYS[1]) > 0 then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return n
`)

// syncScript refreshes the leases a gateway holds (registering again any
// that expired) and, with full = 1 (rejoining after an outage), also
// removes the gateway's leases it no longer holds, drops its own
// reservation and reserves a share for every gateway it last saw alive
// that has no heartbeat now: they are still serving on their local share
// and will register their calls when they rejoin.
//
// KEYS: holders, reserved, gateways, queue. ARGV: gateway, ttl, full, n,
// then n reservations "gateway|slots", then the gateway's lease ids.
// Returns {how many leases had to be added again, other gateways waiting}.
var syncScript = redis.NewScript(scriptNow + `
local gw, ttl, full, nres = ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1', tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local added = 0
local mine = {}
for i = 5 + nres, #ARGV do
  mine[ARGV[i]] = true
  added = added + redis.call('ZADD', KEYS[1], now + ttl, ARGV[i])
end
if #ARGV >= 5 + nres then redis.call('PEXPIRE', KEYS[1], ttl) end
if full then
  local pre = gw .. ':'
  for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if string.sub(m, 1, #pre) == pre and not mine[m] then redis.call('ZREM', KEYS[1], m) end
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  local have = {}
  for _, m in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do
    local g = string.sub(m, 1, string.find(m, '|', 1, true) - 1)
    if g == gw then redis.call('ZREM', KEYS[2], m) else have[g] = true end
  end
  for i = 5, 4 + nres do
    local m = ARGV[i]
    local g = string.sub(m, 1, string.find(m, '|', 1, true) - 1)
    local hb = redis.call('ZSCORE', KEYS[3], g)
    if not have[g] and (not hb or tonumber(hb) <= now) then
      redis.call('ZADD', KEYS[2], now + 2 * ttl, m)
      redis.call('PEXPIRE', KEYS[2], 2 * ttl)
    end
  end
end
local waiting = redis.call('ZCARD', KEYS[4])
if redis.call('ZSCORE', KEYS[4], gw) then waiting = waiting - 1 end
return {added, waiting}
`)

// heartbeatScript marks a gateway alive for ttl, publishes its stats for
// as long, and returns the gateways alive.
//
// KEYS: gateways, the gateway's stats key. ARGV: gateway, ttl, stats JSON.
var heartbeatScript = redis.NewScript(scriptNow + `
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
return redis.call('ZRANGE', KEYS[1], 0, -1)
`)
