// Package quarantine stores the mail ratelimitd holds or freezes, for
// "ratelimitd quarantine list|show|thaw|delete". A held entry records a
// message in the MTA's hold queue (Postfix HOLD, released with postsuper
// -H); a frozen entry stores the whole message, which the MTA discards
// (thawed by SMTP re-injection).
//
// The Store keeps sealed records (statedb.Seal) and chunked messages in
// the daemon's BoltDB file; writes return once fsync'd (ErrNoSync
// otherwise), messages are checked against their SHA-256 (ErrCorrupt).
// A Store is safe for concurrent use. The entries' life cycle is package
// quarantine/lifecycle's.
package quarantine
