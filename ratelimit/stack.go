package ratelimit

import "time"

// StackAdmits is the stack rule: whether a request's stack of n limits
// admits it, the verdict every limit's Next is given. A request refused
// before the stack was measured (refused: an earlier request of the same
// message was already refused) is not admitted; otherwise it is admitted
// unless refusing(i) reports, for one of the limits i in [0, n), that the
// limit is over and its action keeps the message from delivery (hold,
// freeze, defer, reject; not warn). A limit that could not be measured
// takes no part: refusing reports false for it.
//
// So a leaky limit counts a request only if every limit of the stack let
// it through: Exim's leaky mode (Exim specification, chapter "Access
// control lists", section "Rate limiting incoming messages") applied to a
// stack of limits, as in Tony Finch's "ratelimit clarifications". The
// policy engine's reference stack evaluation and the Go stores
// (ratestore's Memory, redisstore's multi-slot path) decide with this
// function; redisstore's Lua script holds its own copy, kept in step by
// the conformance suite (ratestore/storetest). refusing is called once per limit, in order,
// until one refuses; StackAdmits allocates nothing.
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

// Reapply returns the state to store for a request of cost at now that
// was measured from the stored state prev and gave next (Next's result),
// when the stored state is now old: next when old is still prev, else the
// request measured again from old and Next(…, admitted) of that, so a
// state changed by a concurrent request since the measurement is never
// lost. The bool is Next's: whether to store the state at all.
func (l Limit) Reapply(old, prev, next State, now time.Time, cost float64, admitted bool) (State, bool) {
	if old == prev {
		return next, true
	}
	return l.Next(l.Check(old, now, cost), admitted)
}
