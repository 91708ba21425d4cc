#!lua
-- ratelimitd: decide stacks of rate limits atomically, on the server's
-- clock, with the arithmetic of Go package ratelimit (Check and Next):
-- Exim's exponential rate (Exim specification, chapter "Access control
-- lists", section "Rate limiting incoming messages"), GCRA, cooldown and
-- EARRRL. One call decides one or more requests' stacks, one after the
-- other, each seeing what the previous ones stored.
--
-- A rate key's record (PREFIX{KEY}): the key's expiry as last set (Unix
-- ms on Redis's clock, '<d'), then per limit a length byte, its name and
-- its state struct.pack('<i8I4d', sec, nsec, rate) (ratelimit.State;
-- Unix nanoseconds do not fit a double, so times are kept in two parts).
-- A record that does not parse is another program's value: every limit
-- of its rate key starts afresh (flag 8) and the next write replaces it.
--
-- KEYS     the records of the requests: every key the script touches
--          (with a Cluster all of one slot, as the shebang's lack of
--          flags requires)
-- ARGV[1]  phase: "d" decide and commit, "c" check only (no writes),
--          "w" commit with the verdict given per request
-- ARGV[2], ARGV[3]  "" "" to use Redis TIME, "?" "" to read TIME only if
--          a request is decided here (else the answer's time is 0 0), or
--          the caller's now as Unix seconds and nanoseconds (tests)
-- ARGV[4]  S, the number of limit specifications; then 6 values each:
--          name, limit, period (ns), mode (0 leaky, 1 strict, 2 forgiving,
--          3 readonly), algorithm (0 exponential, 1 gcra, 2 cooldown,
--          3 earrrl), half-life (ns; 0: the period)
-- then one string, little-endian: '<I4' how many KEYS, from the first,
--          to read at once (MGET), 'B' 1 if the caller wants the records
--          left; then per request '<I4BI2': its number of items n, a flag
--          ("d": 1 if already refused, so leaky limits are not charged;
--          "w": 1 if the stack admitted it) and m, its number of keys if
--          the caller decided it (the fast path), else 0; then m times
--          '<I4I4Bd': the record's index, the ARGV index of the record
--          expected (the one to store follows it), the expiry kind (0 keep,
--          1 PEXPIREAT, 2 PEXPIRE, 3 compare only) and its argument (ms);
--          then n times '<I4I4d': spec*4 + count + 2*refuses, the record's
--          index (from 1) and the cost
-- then per key of the requests with m > 0, the records expected and to store.
--
-- The fast path: each record of a request decided by the caller is
-- stored with SET ... KEEPTTL GET, whose answer must be the one expected;
-- if one is not, the request is decided here from the old records and
-- the records it does not change are put back.
--
-- A record is written once per request (SET), with a new expiry only when
-- a state needs a later one than the key has, and then an eighth of the
-- state's lifetime more (setting an expiry is costly).
--
-- Returns {sec, nsec, items, records}: items is per item a flag byte,
-- over + 2*stored + 4*(had a state) + 8*(the value was undecodable) +
-- 32*(decided by the caller and confirmed), then
-- that state (20 bytes; zeros if none). records (phase "d"): per key of
-- each request decided here, in order of first use, '<I2' its length and
-- the record it left.

local MAXF = 1.7976931348623157e308
local MININTERVAL = 1e-10
local exp, log, floor = math.exp, math.log, math.floor
local call, pcall_, spack, sunpack, tonumber, sformat, type = redis.call, redis.pcall, struct.pack, struct.unpack, tonumber,
  string.format, type
local sbyte, ssub, schar = string.byte, string.sub, string.char

local phase = ARGV[1]
local caller = ARGV[2] ~= '' and ARGV[2] ~= '?'
local nows, nowns, nowms
-- clock reads the time the script measures at, once: the caller's, or
-- Redis TIME. With ARGV[2] "?" it is read only if a request is decided
-- here (not by the fast path), else the answer's time is 0 0.
local function clock()
  if nows then return end
  if caller then
    nows, nowns = tonumber(ARGV[2]), tonumber(ARGV[3])
  else
    local t = call('TIME')
    nows, nowns = tonumber(t[1]), tonumber(t[2]) * 1000
  end
  nowms = nows * 1000 + floor(nowns / 1e6)
end
if ARGV[2] ~= '?' then clock() end

local nspec = tonumber(ARGV[4])
local a = 5 + 6 * nspec
local reqs = ARGV[a]

-- The records, as read or written by earlier requests of the batch: key
-- -> the record ('' for none; a record that does not parse counts as
-- none, and slow() sets bad[key]).
local cache = {}
local K = KEYS

-- The fast path: the caller decided the request from the records it
-- expects (per key: the ARGV index e of its expected record, the one to
-- store at e + 1; what to do with the key's expiry, and its argument).
local pos, last = 6, #reqs
-- The records of the requests decided here, one MGET for all; whether
-- the caller wants the records left (it has a fast path).
local nread, wantrecs = sunpack('<I4B', reqs)
if nread > 0 then
  local vals = call('MGET', unpack(KEYS, 1, nread))
  for i = 1, nread do cache[KEYS[i]] = vals[i] or '' end
end

-- fastkey stores key's new record and reports whether the old one was
-- the expected one. It keeps nothing in cache (a script call pays for
-- every entry it adds): a later request of the call finds the record in
-- Redis, and only a record the script read already is updated in cache.
-- When the old record was not the expected one (another host wrote it
-- since), the key holds the caller's record until the script, deciding
-- the request itself from the old record (cache), writes its own or puts
-- the old one back (dirty[key]: the old record, false for none).
local bad -- made by slow(): bad[key] once key's record does not parse
local dirty -- made by the first refusal
local function fastkey(key, e, kind)
  local cur
  if kind == 3 then
    cur = pcall_('GET', key)
    return cur == ARGV[e]
  end
  cur = pcall_('SET', key, ARGV[e + 1], 'KEEPTTL', 'GET')
  -- An error (not a string) wrote nothing.
  if type(cur) == 'table' then return false end
  if cur == ARGV[e] then
    if cache[key] ~= nil then
      cache[key] = ARGV[e + 1]
      if bad then bad[key] = false end
    end
    return true
  end
  dirty = dirty or {}
  dirty[key], cache[key] = cur or false, cur or ''
  if bad then bad[key] = nil end
  return false
end

-- expire sets key's expiry as kind says.
local function expire(key, kind, ms)
  if kind == 1 then
    call('PEXPIREAT', key, sformat('%d', ms))
  elseif kind == 2 then
    call('PEXPIRE', key, sformat('%d', ms))
  end
end

-- fast confirms a fast request of m keys, whose keys' data is at pos:
-- every key stored, each expiry set; or, if a record was not the
-- expected one, nothing changed. FD holds 4 values per key k from
-- FD[4k-3]: the key, e, the kind, the ms.
local FD
local function fast(m)
  if m == 1 then
    local ki, e, kind, ms
    ki, e, kind, ms, pos = sunpack('<I4I4Bd', reqs, pos)
    local key = K[ki]
    if not fastkey(key, e, kind) then return false end
    expire(key, kind, ms)
    return true
  end
  FD = FD or {}
  for k = 1, m do
    local ki
    ki, FD[4 * k - 2], FD[4 * k - 1], FD[4 * k], pos = sunpack('<I4I4Bd', reqs, pos)
    FD[4 * k - 3] = K[ki]
  end
  for k = 1, m do
    if not fastkey(FD[4 * k - 3], FD[4 * k - 2], FD[4 * k - 1]) then
      for j = 1, k - 1 do
        if FD[4 * j - 1] ~= 3 then
          local key, old = FD[4 * j - 3], ARGV[FD[4 * j - 2]]
          dirty = dirty or {}
          dirty[key], cache[key] = old, old
          if bad then bad[key] = nil end
        end
      end
      return false
    end
  end
  for k = 1, m do
    expire(FD[4 * k - 3], FD[4 * k - 1], FD[4 * k])
  end
  return true
end

-- The answer: per item its flag byte and previous state; records, the
-- records left by the requests decided here.
local parts, np = {}, 0
local FZ = '\32' .. string.rep('\0', 20)
local recs, nrec = {}, 0

-- decide is made by slow(), once a request is to be decided here: the
-- fast path needs none of what it makes, and a script call pays for
-- every table and function it makes.
local decide
local function slow()
  clock()
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

  -- ZEXP is an empty record: no expiry known, no entry.
  local ZEXP = spack('<d', 0)

  -- write stores record v (the expiry it holds is the key's) of key, whose
  -- states need it to live until need (Unix ms; with the caller's time, a
  -- lifetime in ms), with slack more when a later expiry must be set.
  local function write(key, v, need, slack)
    if dirty then dirty[key] = nil end
    if caller then
      -- Expiries count on Redis's clock: with the caller's time (tests,
      -- replays) they are made at least an hour long.
      if need < 3600000 then need = 3600000 end
      call('SET', key, v, 'PX', sformat('%d', need))
      return v
    end
    local at = sunpack('<d', v)
    if at >= need then
      call('SET', key, v, 'KEEPTTL')
      return v
    end
    at = need + slack
    v = spack('<d', at) .. ssub(v, 9)
    call('SET', key, v, 'PXAT', sformat('%d', at))
    return v
  end

  -- The limit specifications; HEAD[s] starts a record's entry of limit
  -- s (its name's length and its name).
  local NAME, HEAD, LIM, PER, MODE, ALG, HL = {}, {}, {}, {}, {}, {}, {}
  local x = 5
  for s = 0, nspec - 1 do
    NAME[s], LIM[s], PER[s] = ARGV[x], tonumber(ARGV[x + 1]), tonumber(ARGV[x + 2])
    MODE[s], ALG[s], HL[s] = tonumber(ARGV[x + 3]), tonumber(ARGV[x + 4]), tonumber(ARGV[x + 5])
    HEAD[s] = schar(#NAME[s]) .. NAME[s]
    x = x + 6
  end

  bad = {}
  -- valid reports whether record v parses: the expiry, then whole entries.
  local function valid(v)
    local p, last = 9, #v
    if last < 8 then return false end
    while p <= last do
      p = p + 21 + sbyte(v, p)
    end
    return p == last + 1
  end

  -- record returns the record of key ('' for none).
  local function record(key)
    if bad[key] ~= nil then return cache[key] end
    local v, b = cache[key], false
    if v == nil then
      v = pcall_('GET', key) -- an error: not a string
      if type(v) == 'table' then v, b = '', true end
      v = v or ''
    end
    if v ~= '' and not valid(v) then v, b = '', true end
    cache[key], bad[key] = v, b
    return v
  end

  -- find returns the position of limit s's state in record v, or nil.
  local function find(v, s)
    local h = HEAD[s]
    local p, last, n = 9, #v, #h
    while p < last do
      if ssub(v, p, p + n - 1) == h then return p + n end
      p = p + 21 + sbyte(v, p)
    end
    return nil
  end

  local IC, IK, ICOST = {}, {}, {} -- the current request's items
  local OR, OF = {}, {} -- per item its previous state ('' for none), its flag
  local cs, cns, cr, ct, ds, dns, dr, dt = {}, {}, {}, {}, {}, {}, {}, {}
  local Z20 = string.rep('\0', 20)
  local F = {} -- flag byte c -> the one-character string

  -- decide decides here a request of n items, packed at pos (flag as
  -- in the packed request), and adds its answer to parts.
  decide = function(n, flag)
    for i = 1, n do
      local code, ki
      code, ki, ICOST[i], pos = sunpack('<I4I4d', reqs, pos)
      IC[i], IK[i] = code, K[ki]
    end
    local admitted = true
    if phase == 'd' then admitted = not flag end
    for i = 1, n do
      local code, key = IC[i], IK[i]
      local v = record(key)
      local s = floor(code / 4)
      local at = v ~= '' and find(v, s)
      local raw = at and ssub(v, at, at + 19) or ''
      local ps, pns, pr
      if raw ~= '' then ps, pns, pr = sunpack('<i8I4d', raw) end
      local b = bad[key] and 8 or 0
      local over
      over, cs[i], cns[i], cr[i], ct[i], ds[i], dns[i], dr[i], dt[i] =
        measure(ALG[s], LIM[s], PER[s], MODE[s], ICOST[i], HL[s], ps, pns, pr)
      -- The stack rule, ratelimit.StackAdmits (kept in step by storetest).
      if over and code % 4 >= 2 then admitted = false end
      OR[i] = raw
      OF[i] = (over and 1 or 0) + b
    end
    if phase == 'w' then admitted = flag end
    if phase ~= 'c' then
      -- ratelimit.Limit.Next: readonly stores nothing; an admitted
      -- request (or any in strict mode) stores the counted state; a
      -- denied one the denied state (forgiving) or nothing. Each record
      -- changed is written once, after its request's last item.
      local key, v, need, slack = nil, nil, 0, 0
      for i = 1, n do
        local code = IC[i]
        local s = floor(code / 4)
        local mode = MODE[s]
        if code % 2 == 1 and mode ~= 3 then
          local ss, ns, r, ttl
          if admitted or mode == 1 then
            ss, ns, r, ttl = cs[i], cns[i], cr[i], ct[i]
          else
            ss, ns, r, ttl = ds[i], dns[i], dr[i], dt[i]
          end
          if ss then
            if IK[i] ~= key then
              if key then cache[key], bad[key] = write(key, v, need, slack), false end
              key, need, slack = IK[i], 0, 0
              v = cache[key]
              if v == '' then v = ZEXP end
            end
            local st = spack('<i8I4d', ss, ns, r)
            local at = find(v, s)
            if at then
              v = ssub(v, 1, at - 1) .. st .. ssub(v, at + 20)
            else
              v = v .. HEAD[s] .. st
            end
            if caller then
              if ttl > need then need = ttl end
            elseif nowms + ttl > need then
              need, slack = nowms + ttl, floor(ttl / 8)
            end
            OF[i] = OF[i] + 2
          end
        end
      end
      if key then cache[key], bad[key] = write(key, v, need, slack), false end
    end
    if dirty then
      -- The records of a refused fast request that the script left as
      -- they were: put them back.
      for i = 1, n do
        local key = IK[i]
        local old = dirty[key]
        if old ~= nil then
          if old then call('SET', key, old, 'KEEPTTL') else call('DEL', key) end
          dirty[key] = nil
        end
      end
    end
    if phase == 'd' and wantrecs == 1 then
      -- The records the request leaves, for the caller's fast path: per
      -- key (in order of first use) its length and the record.
      for i = 1, n do
        local key, first = IK[i], true
        for j = 1, i - 1 do
          if IK[j] == key then first = false end
        end
        if first then
          local v = cache[key]
          if bad[key] or not v then v = '' end
          nrec = nrec + 1
          recs[nrec] = spack('<I2', #v) .. v
        end
      end
    end
    for i = 1, n do
      local raw, c = OR[i], OF[i]
      if raw ~= '' then
        c = c + 4
      else
        raw = Z20
      end
      local f = F[c]
      if not f then
        f = schar(c)
        F[c] = f
      end
      parts[np + 1], parts[np + 2] = f, raw
      np = np + 2
    end
  end
end

while pos <= last do
  local n, flag, m
  n, flag, m, pos = sunpack('<I4BI2', reqs, pos)
  if m > 0 and fast(m) then
    -- Confirmed: the items (16 bytes each) are not needed.
    pos = pos + 16 * n
    for i = 1, n do parts[np + i] = FZ end
    np = np + n
  else
    if not decide then slow() end
    decide(n, flag == 1)
  end
end

return {nows or 0, nowns or 0, table.concat(parts, '', 1, np), table.concat(recs, '', 1, nrec)}
