-- ratelimitd: compare-and-set one rate state in its rate key's record
-- (Store.Update, Store.Delete; stack.lua describes the record).
-- KEYS[1] the record. ARGV[1] the limit; ARGV[2] the state read ("" for
-- none); ARGV[3] the new state ("" deletes the entry); ARGV[4] the expiry
-- it needs (Unix ms): the key's expiry is moved there if it is earlier.
-- Returns 1 if stored, 0 if the state changed since it was read.
local sub = string.sub
local v, at, head = readEntry(KEYS[1], ARGV[1])
local cur = ''
if at then cur = sub(v, at, at + 19) end
if cur ~= ARGV[2] then return 0 end
if v == '' then v = struct.pack('<d', 0) end
if ARGV[3] == '' then
  if at then v = sub(v, 1, at - #head - 1) .. sub(v, at + 20) end
  if #v == 8 then
    redis.call('DEL', KEYS[1])
    return 1
  end
elseif at then
  v = sub(v, 1, at - 1) .. ARGV[3] .. sub(v, at + 20)
else
  v = v .. head .. ARGV[3]
end
local e = struct.unpack('<d', v)
local need = tonumber(ARGV[4])
if e >= need then
  redis.call('SET', KEYS[1], v, 'KEEPTTL')
else
  redis.call('SET', KEYS[1], struct.pack('<d', need) .. sub(v, 9), 'PXAT', ARGV[4])
end
return 1
