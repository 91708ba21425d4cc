-- ratelimitd: after an outage, add what this host counted alone to the
-- shared state (Store.Merge, Failover), exactly once per outage.
-- KEYS[1] the rate key's record (stack.lua describes it); KEYS[2] the
-- outage's marker for the limit's state: when it exists the outage was
-- merged already (a retried or restarted merge) and nothing is added;
-- KEYS[3] the limit's reset marker (Store.Delete): while it lives the
-- state was reset after the host counted it, and nothing is added.
-- ARGV[1] algorithm (0 exponential, 1 gcra, 2 cooldown, 3 earrrl);
-- ARGV[2] limit; ARGV[3] period (ns); ARGV[4] decay time constant (ns:
-- the period for the exponential, 1/lambda for EARRRL); ARGV[5], ARGV[6],
-- ARGV[7] the host's outage delta: time (Unix seconds, nanoseconds) and
-- rate (ratelimit.State) as counted from no state; ARGV[8] how long the
-- marker lives (ms); ARGV[9] the limit.
--
-- The sum: the exponential rate and EARRRL's count are sums of decayed
-- contributions, so both are decayed to now and added; GCRA's and
-- cooldown's arrival time is advanced by the host's backlog still ahead
-- of now (max(tat, now) + max(delta - now, 0)). A value that is not a
-- record counts as none and is replaced. The key's expiry is moved later
-- if the sum needs it, as stack.lua does.
-- Returns 1 if added, 0 if a marker was there already.
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[8]) == false then return 0 end
local t = redis.call('TIME')
local nows, nowns = tonumber(t[1]), tonumber(t[2]) * 1000
local alg, lim, period, tau = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local ls, lns, lr = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local floor, exp, log = math.floor, math.exp, math.log
local sub = string.sub
local v, at, head = readEntry(KEYS[1], ARGV[9])
local ps, pns, pr
if at then ps, pns, pr = struct.unpack('<i8I4d', sub(v, at, at + 19)) end
-- ago is how long before now (ns, >= 0) the time (s, ns) was.
local function ago(s, ns)
  local d = (nows - s) * 1e9 + (nowns - ns)
  if d < 0 then d = 0 end
  return d
end
local s, ns, r, ttl
if alg == 1 or alg == 2 then
  local ahead = -ago(ls, lns)
  if ls > nows or (ls == nows and lns > nowns) then
    ahead = (ls - nows) * 1e9 + (lns - nowns)
  end
  if ahead < 0 then ahead = 0 end
  local base = 0
  if ps and (ps > nows or (ps == nows and pns > nowns)) then
    base = (ps - nows) * 1e9 + (pns - nowns)
  end
  local total = base + ahead
  local carry = floor((nowns + total) / 1e9)
  s, ns, r = nows + carry, nowns + total - carry * 1e9, 0
  local extra = 0
  if alg == 2 then extra = period end
  ttl = floor((total + extra) / 1e6) + 1
else
  local sum = lr * exp(-ago(ls, lns) / tau)
  if ps then sum = sum + pr * exp(-ago(ps, pns) / tau) end
  s, ns, r = nows, nowns, sum
  if alg == 3 then
    local d = log(sum * period / tau / (lim * 1e-6)) * tau
    if not (d > 0) then d = 0 end
    ttl = floor(d / 1e6) + 1
  else
    local w = log(2 * sum)
    if not (w > 2) then w = 2 end
    ttl = floor(w * period / 1e6) + 1
  end
end
local need = nows * 1000 + floor(nowns / 1e6) + ttl
local st = struct.pack('<i8I4d', s, ns, r)
if v == '' then v = struct.pack('<d', 0) end
if at then
  v = sub(v, 1, at - 1) .. st .. sub(v, at + 20)
else
  v = v .. head .. st
end
local e = struct.unpack('<d', v)
if e >= need then
  redis.call('SET', KEYS[1], v, 'KEEPTTL')
else
  local when = need + floor(ttl / 8)
  redis.call('SET', KEYS[1], struct.pack('<d', when) .. sub(v, 9), 'PXAT', string.format('%d', when))
end
return 1
