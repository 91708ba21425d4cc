-- ratelimitd: after an outage, keep the stricter of the shared state and
-- the state this host decided alone (Store.Merge, Failover).
-- KEYS[1] the state key; ARGV[1] how to compare: "t" the later time wins
-- (GCRA, cooldown: the arrival time), "r" the higher rate decayed to now
-- wins (exponential, EARRRL), with ARGV[2] the decay time constant (ns);
-- ARGV[3], ARGV[4], ARGV[5] the local state's time (Unix seconds,
-- nanoseconds) and rate; ARGV[6] its expiry (Unix ms).
-- Returns 1 if the local state was stored, else 0.
local t = redis.call('TIME')
local nows, nowns = tonumber(t[1]), tonumber(t[2]) * 1000
local tau = tonumber(ARGV[2])
local ls, lns, lr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local function key(s, ns, r)
  if ARGV[1] == 't' then return (s - ls) * 1e9 + (ns - lns) end
  local w = ((nows - s) * 1e9 + (nowns - ns)) / tau
  if w < 0 then w = 0 end
  return math.exp(-w) * r
end
local raw = redis.call('GET', KEYS[1])
if raw then
  local s, ns, r = struct.unpack('<i8I4d', raw)
  if key(s, ns, r) >= key(ls, lns, lr) then return 0 end
end
local at = tonumber(ARGV[6])
if at <= nows * 1000 + nowns / 1e6 then return 0 end
redis.call('SET', KEYS[1], struct.pack('<i8I4d', ls, lns, lr), 'PXAT', ARGV[6])
return 1
