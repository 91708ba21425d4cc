package quarantine

import (
	"strings"
	"time"
)

// Queue-ID syntax. A queue ID comes from the MTA through the policy
// protocol or the milter, so any local user who can reach the policy port
// can send one; it is later passed to postsuper/postcat/exim as one argv
// element. Only the MTAs' own syntaxes are accepted, which excludes every
// word those tools treat specially ("ALL", "-" for standard input, option
// letters) and everything a shell or a terminal would interpret.
//
// Postfix (src/global/mail_queue.h, postconf(5) enable_long_queue_ids):
//
//   - short form: the microseconds as exactly five upper-case hex digits,
//     then the inode number in upper-case hex: [0-9A-F]{6,}, typically 10
//     to 12 characters;
//   - long form: the seconds (six or more characters) and microseconds
//     (exactly four) in a base-52 alphabet without vowels
//     (0-9, BCDFGHJKLMNPQRSTVWXYZ, bcdfghjklmnpqrstvwxyz), then 'z', then
//     the inode number in the same alphabet without 'z' (base 51).
//
// Exim (specification, chapter "How Exim receives and delivers mail",
// message IDs): base-62 alphanumerics in dash-separated groups, either
// the classic 16-character XXXXXX-XXXXXX-XX or the 23-character
// XXXXXX-XXXXXXXXXXX-XXXX used since Exim 4.97.
const (
	// maxQueueIDLen bounds any accepted queue ID (a 64-bit inode number
	// is 16 hex or 12 base-51 digits).
	maxQueueIDLen = 32
	// postfixSafe is Postfix's "safe" base-52 alphabet (safe_ultostr.c).
	postfixSafe = "0123456789BCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz"
)

// ValidQueueID reports whether id is a queue ID in one of the syntaxes
// described above: a Postfix short or long queue ID, or an Exim message ID
// (classic or 4.97+). An ID that passes never starts with '-', contains no
// space, control character, shell metacharacter or non-ASCII byte, and is
// at most 32 bytes long. It is safe for concurrent use.
func ValidQueueID(id string) bool {
	if id == "" || len(id) > maxQueueIDLen {
		return false
	}
	return postfixShort(id) || postfixLong(id) || eximID(id)
}

func postfixShort(id string) bool {
	if len(id) < 6 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if (c < '0' || c > '9') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

func postfixLong(id string) bool {
	sep := strings.LastIndexByte(id, 'z')
	if sep < 10 || sep == len(id)-1 {
		return false
	}
	for i := 0; i < sep; i++ {
		if strings.IndexByte(postfixSafe, id[i]) < 0 {
			return false
		}
	}
	// The inode part is base 51: the alphabet without 'z' (and the last
	// 'z' is the separator, so none follows it).
	for i := sep + 1; i < len(id); i++ {
		if strings.IndexByte(postfixSafe[:51], id[i]) < 0 {
			return false
		}
	}
	return true
}

func eximID(id string) bool {
	var groups []int
	switch len(id) {
	case 16:
		groups = []int{6, 6, 2}
	case 23:
		groups = []int{6, 11, 4}
	default:
		return false
	}
	pos := 0
	for g, n := range groups {
		if g > 0 {
			if id[pos] != '-' {
				return false
			}
			pos++
		}
		for _, c := range []byte(id[pos : pos+n]) {
			if !isAlnum(c) {
				return false
			}
		}
		pos += n
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

// QueuedMessage is one message in the MTA's queue as the MTA lists it
// (Postfix: one JSON object of postqueue -j, postqueue(1)): what the life
// cycle needs to find the queue ID of a message held before the MTA had
// one.
type QueuedMessage struct {
	// Queue is the queue the message is in: "hold", "incoming",
	// "active", "deferred" or "maildrop" (Postfix).
	Queue string
	// QueueID is the MTA's queue ID, not yet checked with ValidQueueID.
	QueueID string
	// Arrival is when the message entered the queue, to the second.
	Arrival time.Time
	// Sender is the envelope sender ("" for the null sender).
	Sender string
	// Recipients are the envelope recipients still queued.
	Recipients []string
	// Size is the message's size in bytes as the MTA reports it (Postfix:
	// message_size, the content without envelope records); 0 if unknown.
	Size int64
}
