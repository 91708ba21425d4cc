-- ratelimitd: after an outage, keep the stricter of the shared state and
-- the state this host decided alone (Store.Merge, Failover).
-- KEYS[1] the state key; ARGV[1] the limit's period (ns); ARGV[2], ARGV[3],
-- ARGV[4] the local state's time (Unix seconds, nanoseconds) and rate.
-- Each state's rate is decayed to now (Redis TIME) as ratelimit's
-- exponential algorithm does without a new request (r*exp(-interval)); the
-- higher one is kept, with the expiry stack.lua gives it. Returns 1 if the
-- local state was stored, else 0.
local t = redis.call('TIME')
local nows, nowns = tonumber(t[1]), tonumber(t[2]) * 1000
local period = tonumber(ARGV[1])
local function decayed(s, ns, r)
  local w = ((nows - s) * 1e9 + (nowns - ns)) / period
  if w < 0 then w = 0 end
  return math.exp(-w) * r
end
local ls, lns, lr = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local mine = decayed(ls, lns, lr)
local raw = redis.call('GET', KEYS[1])
if raw then
  local s, ns, r = struct.unpack('<i8I4d', raw)
  if decayed(s, ns, r) >= mine then return 0 end
end
local w = math.log(2 * lr)
if not (w > 2) then w = 2 end
local left = w * period - ((nows - ls) * 1e9 + (nowns - lns))
if left <= 0 then return 0 end
redis.call('SET', KEYS[1], struct.pack('<i8I4d', ls, lns, lr), 'PX', math.floor(left / 1e6) + 1)
return 1
