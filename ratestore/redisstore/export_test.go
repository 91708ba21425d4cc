package redisstore

// AtCallerTime returns o for a store that measures at the time
// EvaluateStack is given, not Redis TIME.
func AtCallerTime(o Options) Options {
	o.callerTime = true
	return o
}
