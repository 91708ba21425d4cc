package quarantine

import (
	"strings"
	"time"
)

// Queue IDs reach postsuper, postcat or exim as argv, so only these pass:
//   - Postfix short form (src/global/mail_queue.h): [0-9A-F]{6,};
//   - Postfix long form (postconf(5) enable_long_queue_ids): 10+ chars of
//     postfixSafe, 'z', then the inode number without 'z';
//   - Exim (spec chapter "How Exim receives and delivers mail"):
//     XXXXXX-XXXXXX-XX, or XXXXXX-XXXXXXXXXXX-XXXX since 4.97.
const (
	maxQueueIDLen = 32
	postfixSafe   = "0123456789BCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz" // safe_ultostr.c
)

// ValidQueueID reports whether id is a Postfix or Exim queue ID: at most
// 32 ASCII letters, digits and dashes, not starting with '-'. Safe for
// concurrent use.
func ValidQueueID(id string) bool {
	if id == "" || len(id) > maxQueueIDLen {
		return false
	}
	sep := strings.LastIndexByte(id, 'z')
	return len(id) >= 6 && strings.Trim(id, "0123456789ABCDEF") == "" ||
		sep >= 10 && sep < len(id)-1 && only(id[:sep], postfixSafe) && only(id[sep+1:], postfixSafe[:51]) ||
		eximID(id)
}

func only(s, set string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(set, s[i]) < 0 {
			return false
		}
	}
	return true
}

func eximID(id string) bool {
	groups := map[int][]int{16: {6, 6, 2}, 23: {6, 11, 4}}[len(id)]
	if groups == nil {
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
