package ratelimit

import "time"

// StackAdmits is the stack rule, the verdict each limit's Next is given: a
// request is admitted unless refused (an earlier request of its message
// was) or refusing(i) reports, for a limit i in [0, n), that it is over
// with an action that stops delivery (not warn). So a leaky limit counts a
// request only if every limit let it through (Exim's leaky mode over a
// stack, as in Finch's "ratelimit clarifications"). redisstore's script
// holds a copy, kept in step by ratestore/storetest. refusing is called in
// order until one refuses.
func StackAdmits(refused bool, n int, refusing func(i int) bool) bool {
	if refused {
		return false
	}
	for i := range n {
		if refusing(i) {
			return false
		}
	}
	return true
}

// Reapply returns what to store for a request measured from prev, giving
// next, when the stored state is now old: next if old is still prev, else
// Next of the request measured again from old, so a concurrent update is
// never lost.
func (l Limit) Reapply(old, prev, next State, now time.Time, cost float64, admitted bool) (State, bool) {
	if old == prev {
		return next, true
	}
	return l.Next(l.Check(old, now, cost), admitted)
}
