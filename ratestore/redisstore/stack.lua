-- ratelimitd: decide stacks of rate limits atomically, on the server's
-- clock, with the arithmetic of Go package ratelimit (Check and Next):
-- Exim's exponential rate (Exim specification, chapter "Rate limiting"),
-- GCRA, its cooldown variant and the EARRRL half-life estimator. One call
-- decides one or more requests' stacks (a batch), one request after the
-- other, each seeing what the previous ones stored.
--
-- KEYS     the state key of every item of every request, in order (all
--          in one hash slot)
-- ARGV[1]  phase: "d" decide and commit, "c" check only (no writes),
--          "w" commit with the verdict given per request
-- ARGV[2], ARGV[3]  "" "" to use Redis TIME, or the caller's now as
--          Unix seconds and nanoseconds (tests and simulation)
-- ARGV[4]  S, the number of limit specifications; then 5 values per
--          specification: limit, period (ns), mode (0 leaky, 1 strict,
--          2 forgiving, 3 readonly), algorithm (0 exponential, 1 gcra,
--          2 cooldown, 3 earrrl), half-life (ns; 0: the period's time
--          constant)
-- then one string, the requests packed little-endian (struct format
--          '<I4B' per request, '<I4d' per item, one after the other):
--          per request its number of items n and a flag ("d": 1 if the
--          message was already refused, so leaky limits are not charged;
--          "w": 1 if the stack admitted the request; "c": ignored), then
--          per item spec*4 + count + 2*refuses (spec counted from 0;
--          count and refuses 0/1) and the cost. One string instead of
--          four values per item spares Redis an object, a Lua string and
--          a number conversion per value.
--
-- A state is the 20-byte string struct.pack('<i8I4d', sec, nsec, rate):
-- a time and a rate whose meaning is the algorithm's (ratelimit.State).
-- Unix nanoseconds do not fit a Lua number (a double) exactly, so times
-- are kept as seconds and nanoseconds and subtracted in parts. This
-- script writes 28 bytes ('<i8I4dd'): the state, then the key's expiry as
-- it set it (Unix ms on Redis's clock). A later write that needs no later
-- expiry keeps it (SET KEEPTTL): setting an expiry costs Redis about a
-- third of a decision. One that needs a later one sets it an eighth of
-- the state's lifetime later than needed, so a steady sender's key gets a
-- new expiry every so often, not at every message. States of 20 bytes
-- (written by Store.Update and Store.Merge) have no known expiry.
--
-- Returns {sec, nsec, items}: items is one string of 29 bytes per item, a
-- flag byte over + 2*stored + 4*(1 if there was a previous state) +
-- 8*(1 if the stored value was undecodable and counted as none), then
-- that state (20 bytes; zeros if none) and 8 bytes of padding. One string
-- instead of two values per item spares Redis and the daemon a reply
-- object per value.

local MAXF = 1.7976931348623157e308
local MININTERVAL = 1e-10
local exp, log, floor = math.exp, math.log, math.floor
local call, spack, sunpack, tonumber, sformat = redis.call, struct.pack, struct.unpack, tonumber, string.format

local phase = ARGV[1]
local caller = ARGV[2] ~= ''
local nows, nowns
if caller then
  nows, nowns = tonumber(ARGV[2]), tonumber(ARGV[3])
else
  local t = call('TIME')
  nows, nowns = tonumber(t[1]), tonumber(t[2]) * 1000
end

-- addns returns the time (sec, nsec) ns nanoseconds (>= 0, rounded toward
-- zero as ratelimit's addNs does) after now.
local function addns(ns)
  local t = nowns + floor(ns)
  local carry = floor(t / 1e9)
  return nows + carry, t - carry * 1e9
end

-- Expiries (ms) at which a state is negligible (ratelimit.Limit.Negligible).
-- Exponential: after w periods with r*exp(-w) <= 1/2 and 1/w <= 1/2, a
-- request of cost >= 1 measures exactly its cost.
local function expttl(x, period)
  local w = log(2 * x)
  if not (w > 2) then w = 2 end
  return floor(w * period / 1e6) + 1
end
-- EARRRL: once the estimate is below a millionth of the limit.
local function earttl(c, lambda, period, lim)
  local d = log(c * lambda * period / (lim * 1e-6)) / lambda
  if not (d > 0) then d = 0 end
  return floor(d / 1e6) + 1
end

-- measure applies ratelimit.Limit.Check to the stored state (ps, pns, pr;
-- ps nil for none). It returns over, the counted state (sec, nsec, rate,
-- expiry in ms) and the denied state likewise (sec nil when a denial keeps
-- the stored state).
local function measure(alg, lim, period, mode, cost, hl, ps, pns, pr)
  if alg == 1 or alg == 2 then
    -- GCRA and cooldown: the arrival time advances by cost*period/lim.
    local spend = cost * period / lim
    local ahead = spend
    if ps then
      local backlog = -((nows - ps) * 1e9 + (nowns - pns))
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
    local over = ahead > period * (1 + 1e-12)
    if mode == 2 then
      local ds, dns = addns(period)
      return over, cs, cns, 0, floor((ahead + extra) / 1e6) + 1, ds, dns, 0, floor((period + extra) / 1e6) + 1
    end
    return over, cs, cns, 0, floor((ahead + extra) / 1e6) + 1
  elseif alg == 3 then
    -- EARRRL: the decayed count N, the estimate N*lambda before the update.
    local lambda
    if hl > 0 then lambda = log(2) / hl else lambda = 1 / period end
    local n = 0
    if ps then
      local dt = (nows - ps) * 1e9 + (nowns - pns)
      if dt < 0 then dt = 0 end
      n = pr * exp(-lambda * dt)
    end
    local est = n * lambda * period
    if est > MAXF then est = MAXF end
    local c = cost + n
    if c > MAXF then c = MAXF end
    local over = est > lim
    if mode == 2 then
      local lp = lambda * period
      local nmax = lim / lp * exp(lp * cost / lim)
      if c < nmax then nmax = c end
      return over, nows, nowns, c, earttl(c, lambda, period, lim), nows, nowns, nmax, earttl(nmax, lambda, period, lim)
    end
    return over, nows, nowns, c, earttl(c, lambda, period, lim)
  end
  -- Exponential (seed 001): r = (1-exp(-w))*cost/w + exp(-w)*r_prev.
  local r = 0
  if ps then
    local w = ((nows - ps) * 1e9 + (nowns - pns)) / period
    if w < MININTERVAL then w = MININTERVAL end
    -- expm1(-w) (Lua 5.1 has none), sharing exp(-w) with the decay
    -- term. Kahan's form: with u = exp(x) rounded, (u-1)*x/log(u)
    -- cancels the rounding of u, so it stays accurate for tiny |x|,
    -- where exp(x)-1 loses every digit.
    local u = exp(-w)
    local em
    if u == 1 then
      em = -w
    elseif u - 1 == -1 then
      em = -1
    else
      em = (u - 1) * -w / log(u)
    end
    r = -em * cost / w + u * pr
  end
  if r < cost then r = cost end
  if r > MAXF then r = MAXF end
  if mode == 2 then
    local d = r
    if d > lim then d = lim end
    return r > lim, nows, nowns, r, expttl(r, period), nows, nowns, d, expttl(d, period)
  end
  return r > lim, nows, nowns, r, expttl(r, period)
end

-- The limit specifications.
local nspec = tonumber(ARGV[4])
local LIM, PER, MODE, ALG, HL = {}, {}, {}, {}, {}
local a = 5
for s = 0, nspec - 1 do
  LIM[s], PER[s], MODE[s] = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  ALG[s], HL[s] = tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  a = a + 5
end

-- The states read, and those written by earlier requests of the batch:
-- key -> raw state, false for none.
-- (MGET answers false for a key holding another type; its state is
-- replaced like an undecodable one.)
local cache = {}
do
  local vals = call('MGET', unpack(KEYS))
  for i = 1, #KEYS do cache[KEYS[i]] = vals[i] end
end

local out = {nows, nowns}
local o = 2 -- out index of the item before the current one (x2)
local k = 0 -- KEYS index of the item before the current one
local specs, counts = {}, {}
local cs, cns, cr, ct, ds, dns, dr, dt = {}, {}, {}, {}, {}, {}, {}, {}
local pexp = {} -- each item's stored expiry (Unix ms), 0 if unknown
local nowms = nows * 1000 + floor(nowns / 1e6)
local reqs = ARGV[a]
local pos, last = 1, #reqs
while pos <= last do
  local n, flag
  n, flag, pos = sunpack('<I4B', reqs, pos)
  flag = flag == 1
  local admitted = true
  if phase == 'd' then admitted = not flag end
  for i = 1, n do
    local code, cost
    code, cost, pos = sunpack('<I4d', reqs, pos)
    local s = floor(code / 4)
    local key = KEYS[k + i]
    local raw = cache[key]
    local ps, pns, pr, pe
    local bad = 0
    if raw then
      if #raw == 28 then
        ps, pns, pr, pe = sunpack('<i8I4dd', raw)
      elseif #raw == 20 then
        ps, pns, pr = sunpack('<i8I4d', raw)
      else
        -- Undecodable (another program wrote it): this key starts
        -- afresh and the caller is told (flag 8); the other items and
        -- requests are decided as usual.
        raw, bad = '', 8
      end
    else
      raw = ''
    end
    pexp[i] = pe or 0
    local over
    over, cs[i], cns[i], cr[i], ct[i], ds[i], dns[i], dr[i], dt[i] =
      measure(ALG[s], LIM[s], PER[s], MODE[s], cost, HL[s], ps, pns, pr)
    -- The stack rule, ratelimit.StackAdmits (kept in step by storetest).
    if over and code % 4 >= 2 then admitted = false end
    specs[i], counts[i] = s, code % 2 == 1
    out[o + 2 * i - 1] = raw
    out[o + 2 * i] = (over and 1 or 0) + bad
  end
  if phase == 'w' then admitted = flag end
  if phase ~= 'c' then
    for i = 1, n do
      -- ratelimit.Limit.Next: readonly stores nothing; an admitted
      -- request (or any in strict mode) stores the counted state; a
      -- denied one the denied state (forgiving) or nothing.
      local mode = MODE[specs[i]]
      if counts[i] and mode ~= 3 then
        local s, ns, r, ttl
        if admitted or mode == 1 then
          s, ns, r, ttl = cs[i], cns[i], cr[i], ct[i]
        else
          s, ns, r, ttl = ds[i], dns[i], dr[i], dt[i]
        end
        if s then
          local key = KEYS[k + i]
          local v
          if caller then
            -- Expiries count on Redis's clock: with the caller's
            -- time (tests, replays) they are made at least an hour
            -- long.
            if ttl < 3600000 then ttl = 3600000 end
            v = spack('<i8I4d', s, ns, r)
            call('SET', key, v, 'PX', sformat('%d', ttl))
          elseif pexp[i] >= nowms + ttl then
            v = spack('<i8I4dd', s, ns, r, pexp[i])
            call('SET', key, v, 'KEEPTTL')
          else
            local at = nowms + ttl + floor(ttl / 8)
            v = spack('<i8I4dd', s, ns, r, at)
            call('SET', key, v, 'PXAT', sformat('%d', at))
          end
          cache[key] = v
          out[o + 2 * i] = out[o + 2 * i] + 2
        end
      end
    end
  end
  o = o + 2 * n
  k = k + n
end
-- The answer: each item's flag byte, previous state and padding.
local F, Z8, Z28 = {}, string.rep('\0', 8), string.rep('\0', 28)
for f = 0, 15 do F[f] = string.char(f) end
local parts, np = {}, 0
for x = 3, o, 2 do
  local raw, c = out[x], out[x + 1]
  if raw == '' then
    parts[np + 1], parts[np + 2] = F[c], Z28
    np = np + 2
  elseif #raw == 28 then
    parts[np + 1], parts[np + 2] = F[c + 4], raw
    np = np + 2
  else
    parts[np + 1], parts[np + 2], parts[np + 3] = F[c + 4], raw, Z8
    np = np + 3
  end
end
return {nows, nowns, table.concat(parts, '', 1, np)}
