// Package quarantine stores held mail (a record of a message in the MTA's
// hold queue) and frozen mail (the whole message, thawed by SMTP
// re-injection) in the daemon's BoltDB file: sealed records and chunked
// messages checked against their SHA-256. Writes return once fsync'd. The
// Store is safe for concurrent use; the life cycle is package lifecycle's.
package quarantine
