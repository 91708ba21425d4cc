// Package storetest is the conformance suite every rate-state store passes
// (Memory and Persistent of package ratestore, the Redis store of
// ratestore/redisstore): the policy.Store contract, and random traces of
// stacked requests in every mode and algorithm whose results must agree,
// to Tolerance (1e-12) relative, with the reference function
// policy.EvaluateStack over a fresh in-memory store.
//
// It is what keeps the stack rule's copies in step: the reference decides
// with ratelimit.StackAdmits, as the Go stores do, while the Redis store's
// Lua script holds its own copy of the rule and of the arithmetic, checked
// here against the reference on every trace.
//
// A store that implements policy.StackEvaluator is driven through it and
// must measure at the time it is given (the Redis store does in its tests);
// any other store is driven through policy.EvaluateStack. Run calls Opener
// once per subtest, one subtest at a time; failures are reported through
// the testing.T given. The traces follow the modes of the Exim
// specification's ratelimit ACL condition (chapter "Access control
// lists", section "Rate limiting incoming messages") and Tony Finch's
// "ratelimit clarifications" (forgiving mode, stacked limits).
package storetest
