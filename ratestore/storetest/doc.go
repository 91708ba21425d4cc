// Package storetest is the conformance suite every rate-state store passes
// (ratestore's Memory and Persistent, ratestore/redisstore's Store): the
// policy.Store contract, and random traces of stacked requests in every
// mode and algorithm whose results must agree, to Tolerance relative, with
// policy.EvaluateStack over a fresh in-memory store. The Redis store's Lua
// copy of the stack rule and arithmetic is held to the reference here.
//
// A store that implements policy.StackEvaluator is driven through it and
// must measure at the time it is given; any other store goes through
// policy.EvaluateStack. Run calls Opener once per subtest, one subtest at a
// time. The traces follow the Exim specification's ratelimit ACL condition
// (chapter "Access control lists", "Rate limiting incoming messages") and
// Tony Finch's "ratelimit clarifications".
package storetest
