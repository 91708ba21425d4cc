-- ratelimitd: compare-and-set one rate state (Store.Update).
-- KEYS[1] the state key; ARGV[1] the value read ("" for none); ARGV[2] the
-- new value; ARGV[3] its expiry (Unix ms). Returns 1 if stored, 0 if the state
-- changed since it was read.
local cur = redis.call('GET', KEYS[1])
if cur == false then cur = '' end
if cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PXAT', ARGV[3])
return 1
