package redisstore

// recordExpiryLen is the length of a record's expiry (float64 Unix ms).
const recordExpiryLen = 8

// recordEach calls fn per limit's name and state in record v until fn
// returns false; it reports whether v parses.
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

// recordValid reports whether v is an expiry, then whole entries.
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

// recordState returns limit's state in record v ("" if none).
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
