// Package quarantine stores the mail that ratelimitd holds or freezes, so
// that operators can list, show, thaw and delete it ("ratelimitd
// quarantine ..."), and expires what is left.
//
// Two kinds of entry share one index:
//
//   - held: the MTA keeps the message in its own hold queue (Postfix HOLD,
//     released with postsuper -H); the quarantine keeps the record, with
//     the MTA queue ID once known (SetQueueID links a hold decided at
//     Postfix's RCPT stage to the END-OF-MESSAGE request via the policy
//     "instance" attribute);
//   - frozen: the complete message is stored here and the MTA is told to
//     discard its copy; thawing re-injects it over SMTP.
//
// # Durability
//
// The Store lives in the daemon's single BoltDB file (go.etcd.io/bbolt),
// in its own top-level buckets: quarantine/meta (ID -> JSON Entry),
// quarantine/body (ID -> message bytes of a frozen entry up to ChunkSize,
// or of any size frozen before chunking), quarantine/body-chunks and
// quarantine/body-chunked (larger messages in 1 MiB chunks, each
// committed while the message is read, and the entry's reference to them;
// see Store.FreezeFrom), quarantine/index-instance (instance NUL ID -> ""), quarantine/info
// (format version; running total of stored message bytes) and
// quarantine/suspended (rate key -> Suspension).
//
// What happens to the entries over time (release through the MTA's queue,
// re-injection, expiry with a DSN, automatic release, exactly-once claims)
// is package quarantine/lifecycle's; QueuedMessage is how an MTA's queue
// listing describes a message to it.
//
// The Store's code follows its steps: store.go opens the file and lays out
// the records, write.go records new entries (Freeze, Hold) and their queue
// IDs, list.go reads them (Get, Message, List, Stats), transitions.go moves
// an entry between states (Claim, MarkThawed, Delete, Expire, ...).
//
// Freeze writes the record and the message in one transaction and returns
// only after BoltDB has committed and fsync'd it: a message the MTA is
// told to discard must already be durable, so a caller that gets an error
// from Freeze temp-fails the message. New refuses a database with NoSync set (ErrNoSync). Each
// message is checked against its SHA-256 when read back (ErrCorrupt).
//
// # Concurrency
//
// A Store is safe for concurrent use. BoltDB admits one writer at a time,
// so writes are serialised, each costing one fsync. BoltDB locks the file:
// while the daemon runs, the CLI goes through its admin socket; Open, the
// offline path, gives up with ErrLocked after Options.LockTimeout.
//
// # Message display
//
// PreviewMessage parses a stored message with github.com/emersion/go-message
// (RFC 5322 header, RFC 2045-2047 MIME, charsets via go-message/charset),
// tolerating broken headers, for "quarantine show".
package quarantine
