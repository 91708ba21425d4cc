package redisstore

// AtCallerTime returns o for a store that measures at the time
// EvaluateStack is given, not Redis TIME.
func AtCallerTime(o Options) Options {
	o.callerTime = true
	return o
}

// Scripts returns the source of each script as loaded, by name.
func Scripts() map[string]string {
	stack, confirm, merge, cas := scriptSources()
	return map[string]string{"stack.lua": stack, "confirm.lua": confirm, "merge.lua": merge, "cas.lua": cas}
}
