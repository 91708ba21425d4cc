-- ratelimitd: decide a stack of rate limits atomically, on the server's
-- clock, with the arithmetic of Go package ratelimit (Check and Next):
-- Exim's exponential rate (Exim specification, chapter "Rate limiting"),
-- GCRA, its cooldown variant and the EARRRL half-life estimator.
--
-- KEYS[i]  state key of item i (all in one hash slot)
-- ARGV[1]  phase: "d" decide and commit, "c" check only (no writes),
--          "w" commit with the verdict given in ARGV[2]
-- ARGV[2]  "d": "1" if the message was already refused (leaky limits are
--          not charged); "w": "1" if the stack admitted the request
-- ARGV[3], ARGV[4]  "" "" to use Redis TIME, or the caller's now as
--          Unix seconds and nanoseconds (tests and simulation)
-- then 8 values per item: limit, period (ns), mode (0 leaky, 1 strict,
--          2 forgiving, 3 readonly), cost, count (0/1), refuses (0/1),
--          algorithm (0 exponential, 1 gcra, 2 cooldown, 3 earrrl),
--          half-life (ns; 0: the period's time constant)
--
-- A state is the 20-byte string struct.pack('<i8I4d', sec, nsec, rate):
-- a time and a rate whose meaning is the algorithm's (ratelimit.State). Unix nanoseconds do not fit a Lua number (a double) exactly,
-- so times are kept as seconds and nanoseconds and subtracted in parts.
--
-- Returns {sec, nsec, then per item: prev state ("" if none), over (0/1),
-- stored (0/1)}.

local MAXF = 1.7976931348623157e308
local MININTERVAL = 1e-10

-- expm1 is exp(x)-1 accurate to a few ulps (Lua 5.1 has none). Kahan's
-- form: with u = exp(x) rounded, (u-1)*x/log(u) cancels the rounding of u,
-- so it stays accurate for tiny |x|, where exp(x)-1 loses every digit.
local function expm1(x)
  local u = math.exp(x)
  if u == 1 then return x end
  local um1 = u - 1
  if um1 == -1 then return -1 end
  return um1 * x / math.log(u)
end

local phase = ARGV[1]
local flag = ARGV[2] == '1'
local nows, nowns
if ARGV[3] == '' then
  local t = redis.call('TIME')
  nows, nowns = tonumber(t[1]), tonumber(t[2]) * 1000
else
  nows, nowns = tonumber(ARGV[3]), tonumber(ARGV[4])
end

-- addns returns the time (sec, nsec) ns nanoseconds (>= 0, rounded toward
-- zero as ratelimit's addNs does) after now.
local function addns(ns)
  local t = nowns + math.floor(ns)
  local carry = math.floor(t / 1e9)
  return nows + carry, t - carry * 1e9
end

-- since returns the nanoseconds from (s, ns) to now, computed in parts so
-- that it is exact while below 2^53.
local function since(s, ns)
  return (nows - s) * 1e9 + (nowns - ns)
end

-- measure applies ratelimit.Limit.Check to the stored state (ps, pns, pr;
-- ps nil for none). It returns over, the counted state, the denied state
-- (nil when a denial keeps the stored state) and for each of those the
-- expiry in ms: when the state is negligible (ratelimit.Limit.Negligible).
local function measure(alg, lim, period, mode, cost, hl, ps, pns, pr)
  if alg == 1 or alg == 2 then
    -- GCRA and cooldown: the arrival time advances by cost*period/limit.
    local spend = cost * period / lim
    local ahead = spend
    if ps then
      local backlog = -since(ps, pns)
      if alg == 2 then
        ahead = backlog + spend
        if ahead < 0 then ahead = spend end
      else
        if backlog < 0 then backlog = 0 end
        ahead = backlog + spend
      end
    end
    -- A GCRA state is negligible once its arrival time has passed, a
    -- cooldown state a period after it.
    local extra = 0
    if alg == 2 then extra = period end
    local cs, cns = addns(ahead)
    local counted = {cs, cns, 0, math.floor((ahead + extra) / 1e6) + 1}
    local denied
    if mode == 2 then
      local ds, dns = addns(period)
      denied = {ds, dns, 0, math.floor((period + extra) / 1e6) + 1}
    end
    return ahead > period * (1 + 1e-12), counted, denied
  elseif alg == 3 then
    -- EARRRL: the decayed count N, the estimate N*lambda before the update.
    local lambda
    if hl > 0 then lambda = math.log(2) / hl else lambda = 1 / period end
    local n = 0
    if ps then
      local dt = since(ps, pns)
      if dt < 0 then dt = 0 end
      n = pr * math.exp(-lambda * dt)
    end
    local est = n * lambda * period
    if est > MAXF then est = MAXF end
    -- Negligible once the estimate is below a millionth of the limit.
    local function ttl(c)
      local d = math.log(c * lambda * period / (lim * 1e-6)) / lambda
      if not (d > 0) then d = 0 end
      return math.floor(d / 1e6) + 1
    end
    local c = cost + n
    if c > MAXF then c = MAXF end
    local counted = {nows, nowns, c, ttl(c)}
    local denied
    if mode == 2 then
      local lp = lambda * period
      local nmax = lim / lp * math.exp(lp * cost / lim)
      if c < nmax then nmax = c end
      denied = {nows, nowns, nmax, ttl(nmax)}
    end
    return est > lim, counted, denied
  end
  -- Exponential (seed 001): r = (1-exp(-w))*cost/w + exp(-w)*r_prev.
  local r = 0
  if ps then
    local w = since(ps, pns) / period
    if w < MININTERVAL then w = MININTERVAL end
    r = -expm1(-w) * cost / w + math.exp(-w) * pr
  end
  if r < cost then r = cost end
  if r > MAXF then r = MAXF end
  -- Negligible after w periods with r*exp(-w) <= 1/2 and 1/w <= 1/2:
  -- then a request of cost >= 1 measures exactly its cost.
  local function ttl(x)
    local w = math.log(2 * x)
    if not (w > 2) then w = 2 end
    return math.floor(w * period / 1e6) + 1
  end
  local counted = {nows, nowns, r, ttl(r)}
  local denied
  if mode == 2 then
    local d = r
    if d > lim then d = lim end
    denied = {nows, nowns, d, ttl(d)}
  end
  return r > lim, counted, denied
end

local n = #KEYS
local out = {nows, nowns}
local counteds, denieds, counts, modes = {}, {}, {}, {}
local admitted = true
if phase == 'd' then admitted = not flag end
for i = 1, n do
  local b = 4 + (i - 1) * 8
  local lim, period, mode = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local cost, alg, hl = tonumber(ARGV[b + 4]), tonumber(ARGV[b + 7]), tonumber(ARGV[b + 8])
  local raw = redis.call('GET', KEYS[i])
  local ps, pns, pr
  if raw then
    ps, pns, pr = struct.unpack('<i8I4d', raw)
  else
    raw = ''
  end
  local over, counted, denied = measure(alg, lim, period, mode, cost, hl, ps, pns, pr)
  if over and ARGV[b + 6] == '1' then admitted = false end
  counteds[i], denieds[i], modes[i] = counted, denied, mode
  counts[i] = ARGV[b + 5] == '1'
  out[3 * i] = raw
  out[3 * i + 1] = over and 1 or 0
  out[3 * i + 2] = 0
end
if phase == 'w' then admitted = flag end
if phase ~= 'c' then
  for i = 1, n do
    -- ratelimit.Limit.Next: readonly stores nothing; an admitted request
    -- (or any in strict mode) stores the counted state; a denied one the
    -- denied state (forgiving) or nothing.
    local mode, st = modes[i], nil
    if counts[i] and mode ~= 3 then
      if admitted or mode == 1 then
        st = counteds[i]
      else
        st = denieds[i]
      end
    end
    if st then
      local ttl = st[4]
      -- Expiries count on Redis's clock: with the caller's time (tests,
      -- replays) they are made at least an hour long.
      if ARGV[3] ~= '' and ttl < 3600000 then ttl = 3600000 end
      redis.call('SET', KEYS[i], struct.pack('<i8I4d', st[1], st[2], st[3]), 'PX', ttl)
      out[3 * i + 2] = 1
    end
  end
end
return out
