// Package quarantine stores the mail ratelimitd holds (a record of a
// message in the MTA's hold queue, Postfix HOLD) or freezes (the whole
// message, which the MTA discards; thawed by SMTP re-injection).
//
// The Store keeps sealed records (statedb.Seal) and chunked messages in
// the daemon's BoltDB file; writes return once fsync'd (ErrNoSync),
// messages are checked against their SHA-256 (ErrCorrupt). Safe for
// concurrent use; the life cycle is package quarantine/lifecycle's.
package quarantine
