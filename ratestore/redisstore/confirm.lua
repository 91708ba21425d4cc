#!lua
-- ratelimitd: the fast path's compare-and-set of a request the caller
-- decided (fast.go), for a call that carries that one request (a Redis
-- Cluster call holds one slot's keys): stack.lua's fixed cost per call
-- is about three times this script's.
-- KEYS the request's records; per key k, ARGV from 4k-3: the record
-- expected, the record to store, the expiry kind (0 keep, 1 PEXPIREAT,
-- 3 compare only) and its argument (Unix ms).
-- Either every record was the one expected and each is stored, or
-- nothing changes. Returns 1 if stored, 0 if not.
local call, pcall_ = redis.call, redis.pcall
for k = 1, #KEYS do
  local key, want, kind = KEYS[k], ARGV[4 * k - 3], ARGV[4 * k - 1]
  local cur
  if kind == '3' then
    cur = pcall_('GET', key)
  else
    cur = pcall_('SET', key, ARGV[4 * k - 2], 'KEEPTTL', 'GET')
  end
  if type(cur) == 'table' then return 0 end -- not a string: nothing written
  if (cur or '') ~= want then
    -- Put back what was stored: this key's record and the earlier ones.
    for j = k, 1, -1 do
      local old = ARGV[4 * j - 3]
      if j == k then old = cur or '' end
      if ARGV[4 * j - 1] ~= '3' then
        if old == '' then call('DEL', KEYS[j]) else call('SET', KEYS[j], old, 'KEEPTTL') end
      end
    end
    return 0
  end
end
for k = 1, #KEYS do
  if ARGV[4 * k - 1] == '1' then call('PEXPIREAT', KEYS[k], ARGV[4 * k]) end
end
return 1
