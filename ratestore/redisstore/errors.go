package redisstore

import "errors"

var (
	// ErrUnavailable wraps every failure to get a timely answer from
	// Redis; Failover applies OnError to it.
	ErrUnavailable = errors.New("redisstore: redis unavailable")

	// ErrProtocol is returned for an answer the store cannot read.
	ErrProtocol = errors.New("redisstore: unexpected answer from redis")

	// ErrAlgorithm is the StackResult.Err of an item the script does not
	// implement (baseline).
	ErrAlgorithm = errors.New("redisstore: algorithm not supported by the redis backend")

	// ErrConfig is returned by New for unusable Options.
	ErrConfig = errors.New("redisstore: invalid options")
)
