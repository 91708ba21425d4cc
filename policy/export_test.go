package policy

import "slices"

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

// NextStep is compiled.nextStep of the limit named name, or "".
func (e *Engine) NextStep(name string) string {
	c := e.cfg.Load()
	i := slices.IndexFunc(c.limits, func(l limit) bool { return l.name == name })
	if i < 0 {
		return ""
	}
	return c.nextStep(i)
}
