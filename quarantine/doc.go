// Package quarantine stores the mail ratelimitd holds or freezes, for
// "ratelimitd quarantine list|show|thaw|delete". A held entry is a record
// of a message the MTA keeps in its own hold queue (Postfix HOLD,
// released with postsuper -H); a frozen entry stores the whole message,
// which the MTA was told to discard (thawed by SMTP re-injection).
//
// The Store keeps its buckets in the daemon's BoltDB file: sealed entry
// records (statedb.Seal) in quarantine/meta, messages in chunks
// (message.go), an instance index, suspensions and a byte total, each
// counted in statedb's manifest. A write returns once committed and
// fsync'd, so a message the MTA is told to discard is already durable;
// New refuses a database with NoSync (ErrNoSync). Messages are checked
// against their SHA-256 when read (ErrCorrupt). An unreadable entry is
// never dropped: only the operator's `state check --salvage` moves it to
// quarantine/damaged.
//
// A Store is safe for concurrent use; BoltDB serialises writes. The life
// cycle of the entries (release, expiry, automatic release) is package
// quarantine/lifecycle's. PreviewMessage shows a message with
// github.com/emersion/go-message (RFC 5322, RFC 2045-2047).
package quarantine
