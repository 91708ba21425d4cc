package redisstore

import "errors"

var (
	// ErrUnavailable wraps every failure to get an answer from Redis in
	// time: no connection, timeout, failover in progress, error reply.
	// Failover decides per its OnError on it.
	ErrUnavailable = errors.New("redisstore: redis unavailable")

	// ErrProtocol is returned for an answer the store cannot read: a
	// state of the wrong length or a script answer of the wrong shape.
	ErrProtocol = errors.New("redisstore: unexpected answer from redis")

	// ErrAlgorithm is the StackResult.Err of an item whose algorithm the
	// script does not implement (baseline).
	ErrAlgorithm = errors.New("redisstore: algorithm not supported by the redis backend")

	// ErrConfig is returned by New for unusable Options.
	ErrConfig = errors.New("redisstore: invalid options")
)
