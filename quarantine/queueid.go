package quarantine

import (
	"regexp"
	"time"
)

// Queue IDs reach postsuper, postcat or exim as argv, so only these pass:
// Postfix short (src/global/mail_queue.h) and long (postconf(5)
// enable_long_queue_ids) forms, Exim's (spec chapter "How Exim receives
// and delivers mail"), XXXXXX-XXXXXXXXXXX-XXXX since 4.97.
const (
	maxQueueIDLen = 32
	postfixSafe   = "0123456789BCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz" // safe_ultostr.c
)

var queueIDSyntax = regexp.MustCompile(`^(?:[0-9A-F]{6,}|[` + postfixSafe + `]{10,}z[` + postfixSafe[:51] + `]+|` +
	`[0-9A-Za-z]{6}-(?:[0-9A-Za-z]{6}-[0-9A-Za-z]{2}|[0-9A-Za-z]{11}-[0-9A-Za-z]{4}))$`)

// ValidQueueID reports whether id is a Postfix or Exim queue ID (at most
// 32 ASCII letters, digits and dashes, not starting with '-').
func ValidQueueID(id string) bool {
	return len(id) <= maxQueueIDLen && queueIDSyntax.MatchString(id)
}

// QueuedMessage is one message of the MTA's queue listing (Postfix:
// postqueue -j, postqueue(1)).
type QueuedMessage struct {
	Queue      string // "hold", "incoming", "active", "deferred", "maildrop"
	QueueID    string // not yet checked with ValidQueueID
	Arrival    time.Time
	Sender     string // "" for the null sender
	Recipients []string
	Size       int64 // bytes (Postfix: message_size); 0 if unknown
}
