package redisstore

// A rate key's record (stack.lua): the key's expiry as the scripts last
// set it (Unix ms, float64, little-endian), then per limit a length
// byte, the limit's name and its stateLen-byte state.

// recordExpiryLen is the length of a record's expiry.
const recordExpiryLen = 8

// recordEach calls fn with each limit's name and state in record v until
// fn returns false; it reports whether v parses as a record (nothing is
// passed to fn if it does not).
func recordEach(v string, fn func(name, state string) bool) bool {
	if !recordValid(v) {
		return false
	}
	for p := recordExpiryLen; p < len(v); {
		n := int(v[p])
		if !fn(v[p+1:p+1+n], v[p+1+n:p+1+n+stateLen]) {
			break
		}
		p += 1 + n + stateLen
	}
	return true
}

// recordValid reports whether v parses as a record: the expiry, then
// whole entries.
func recordValid(v string) bool {
	if len(v) < recordExpiryLen {
		return false
	}
	p := recordExpiryLen
	for p < len(v) {
		p += 1 + int(v[p]) + stateLen
	}
	return p == len(v)
}

// recordState returns the state of limit in record v ("" if v has none
// or does not parse).
func recordState(v, limit string) string {
	var st string
	recordEach(v, func(name, state string) bool {
		if name == limit {
			st = state
			return false
		}
		return true
	})
	return st
}
