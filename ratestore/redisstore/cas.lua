-- ratelimitd: compare-and-set one rate state (Store.Update, Store.Delete)
-- in its rate key's record (stack.lua describes it).
-- KEYS[1] the record; KEYS[2] the state's key in the earlier layout (read
-- when the record has no entry for the limit, as stack.lua does; deleted
-- with the state; the record itself when there is none). ARGV[1] the
-- limit; ARGV[2] the value read ("" for none); ARGV[3] the new value (""
-- deletes the entry); ARGV[4] the expiry it needs (Unix ms): the key's
-- expiry is moved there if it is earlier. Returns 1 if stored, 0 if the
-- state changed since it was read.
local sub = string.sub
local v, at, head = readEntry(KEYS[1], ARGV[1])
local cur = ''
if at then
  cur = sub(v, at, at + 19)
elseif KEYS[2] ~= KEYS[1] then
  cur = redis.pcall('GET', KEYS[2])
  if type(cur) ~= 'string' then cur = '' end
end
if cur ~= ARGV[2] then return 0 end
if v == '' then v = struct.pack('<d', 0) end
if ARGV[3] == '' then
  if at then v = sub(v, 1, at - #head - 1) .. sub(v, at + 20) end
  if KEYS[2] ~= KEYS[1] then redis.call('DEL', KEYS[2]) end
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
