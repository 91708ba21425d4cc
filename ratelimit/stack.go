package ratelimit

import "time"

// StackAdmits is the stack rule, the verdict each limit's Next is given:
// admitted unless refused or refusing(i) for some i in [0, n), a limit over
// whose action stops delivery. redisstore's script holds a copy.
func StackAdmits(refused bool, n int, refusing func(i int) bool) bool {
	for i := 0; i < n && !refused; i++ {
		refused = refusing(i)
	}
	return !refused
}

// Reapply returns what to store for a request measured from prev, giving
// next, when the stored state is now old: next, or if old is not prev the
// request measured again from old (no concurrent update is lost).
func (l Limit) Reapply(old, prev, next State, now time.Time, cost float64, admitted bool) (State, bool) {
	if old == prev {
		return next, true
	}
	return l.Next(l.Check(old, now, cost), admitted)
}
