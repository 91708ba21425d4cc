package redisstore

import "errors"

var (
	// ErrUnavailable wraps every failure to get an answer from Redis in
	// time: connection refused or lost, timeout (Options.Timeout), a
	// failover in progress, or an error reply. Failover switches to its
	// error policy on it.
	ErrUnavailable = errors.New("redisstore: redis unavailable")

	// ErrProtocol is returned when Redis answers something the store
	// cannot read (a state of the wrong length, a script answer of the
	// wrong shape): another program wrote under the key prefix, or
	// another version of the script ran.
	ErrProtocol = errors.New("redisstore: unexpected answer from redis")

	// ErrAlgorithm is set as StackResult.Err for an item whose algorithm
	// the Redis script does not know.
	ErrAlgorithm = errors.New("redisstore: algorithm not supported by the redis backend")

	// ErrConfig is returned by New for unusable Options.
	ErrConfig = errors.New("redisstore: invalid options")
)
