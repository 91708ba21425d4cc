#!lua
-- ratelimitd: reading a rate key's record (stack.lua describes it); cas.lua
-- and merge.lua follow this in one script each (Store prepends it).
-- readEntry returns the record at key ('' when there is none, or when the
-- value is not a record: another program's, replaced at the next write),
-- the position of limit name's state in it (nil if it has none) and the
-- start of name's entry (its length byte and name).
local function readEntry(key, name)
  local sub, byte = string.sub, string.byte
  local head = string.char(#name) .. name
  local v = redis.pcall('GET', key)
  if type(v) ~= 'string' then v = '' end
  if v ~= '' then
    local p = 9
    while p <= #v do p = p + 21 + byte(v, p) end
    if #v < 8 or p ~= #v + 1 then v = '' end
  end
  local p = 9
  while p < #v do
    if sub(v, p, p + #head - 1) == head then return v, p + #head, head end
    p = p + 21 + byte(v, p)
  end
  return v, nil, head
end
