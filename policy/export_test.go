package policy

// InFlight returns the number of messages remembered (bounded): in flight,
// and finished ones kept for their later requests or a join.
func (e *Engine) InFlight() int {
	n := 0
	for i := range e.msgs.shards {
		sh := &e.msgs.shards[i]
		sh.mu.Lock()
		n += sh.inUse
		sh.mu.Unlock()
	}
	return n
}
