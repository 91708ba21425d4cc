-- ratelimitd: decide a stack of exponential rate limits atomically, on the
-- server's clock (Exim specification, chapter "Rate limiting"; the same
-- arithmetic as Go package ratelimit, checkExp and Limit.Next).
--
-- KEYS[i]  state key of item i (all in one hash slot)
-- ARGV[1]  phase: "d" decide and commit, "c" check only (no writes),
--          "w" commit with the verdict given in ARGV[2]
-- ARGV[2]  "d": "1" if the message was already refused (leaky limits are
--          not charged); "w": "1" if the stack admitted the request
-- ARGV[3], ARGV[4]  "" "" to use Redis TIME, or the caller's now as
--          Unix seconds and nanoseconds (tests and simulation)
-- then 6 values per item: limit, period (ns), mode (0 leaky, 1 strict,
--          2 forgiving, 3 readonly), cost, count (0/1), refuses (0/1)
--
-- A state is the 20-byte string struct.pack('<i8I4d', sec, nsec, rate):
-- the time of the last counted update and the rate, in cost per period,
-- at that time. Unix nanoseconds do not fit a Lua number (a double) exactly,
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

local n = #KEYS
local out = {nows, nowns}
local rates, counts, modes, lims, periods = {}, {}, {}, {}, {}
local admitted = true
if phase == 'd' then admitted = not flag end
for i = 1, n do
  local b = 4 + (i - 1) * 6
  local lim, period, mode = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3])
  local cost = tonumber(ARGV[b + 4])
  local raw = redis.call('GET', KEYS[i])
  local r = 0
  if raw then
    local ps, pns, prate = struct.unpack('<i8I4d', raw)
    local w = ((nows - ps) * 1e9 + (nowns - pns)) / period
    if w < MININTERVAL then w = MININTERVAL end
    r = -expm1(-w) * cost / w + math.exp(-w) * prate
  else
    raw = ''
  end
  if r < cost then r = cost end
  if r > MAXF then r = MAXF end
  local over = r > lim
  if over and ARGV[b + 6] == '1' then admitted = false end
  rates[i], lims[i], periods[i], modes[i] = r, lim, period, mode
  counts[i] = ARGV[b + 5] == '1'
  out[3 * i] = raw
  out[3 * i + 1] = over and 1 or 0
  out[3 * i + 2] = 0
end
if phase == 'w' then admitted = flag end
if phase ~= 'c' then
  for i = 1, n do
    local mode, r = modes[i], rates[i]
    local store = false
    if counts[i] and mode ~= 3 then
      if admitted or mode == 1 then
        store = true
      elseif mode == 2 then
        store = true
        if r > lims[i] then r = lims[i] end
      end
    end
    if store then
      -- Expire once the state is negligible (ratelimit.Limit.Negligible):
      -- after w periods with r*exp(-w) <= 1/2 and 1/w <= 1/2 a request of
      -- cost >= 1 measures exactly its cost, as on a fresh key.
      local w = math.log(2 * r)
      if not (w > 2) then w = 2 end
      local ttl = math.floor(w * periods[i] / 1e6) + 1
      redis.call('SET', KEYS[i], struct.pack('<i8I4d', nows, nowns, r), 'PX', ttl)
      out[3 * i + 2] = 1
    end
  end
end
return out
