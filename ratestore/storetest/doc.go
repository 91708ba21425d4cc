// Package storetest is the conformance suite of every rate-state store
// (ratestore's Memory and Persistent, redisstore's Store): the policy.Store
// contract, and random traces of stacked requests in every mode and
// algorithm that must agree, to Tolerance relative, with
// policy.EvaluateStack over a fresh in-memory store. Run calls Opener once
// per subtest, one at a time.
package storetest
