package milter

import (
	"net"
	"strings"
)

// LocalUserHeader carries the uid of a local (sendmail) submission to the
// milter: Postfix does not pass pickup's Received: header to milters, so
// docs/postfix.md ("Local submissions") has pickup's cleanup PREPEND it.
const LocalUserHeader = "X-Ratelimitd-Local-User"

// nonSMTPClient reports whether a connect is Postfix's emulation for
// non-SMTP mail (non_smtpd_milters, MILTER_README): client localhost
// [127.0.0.1] on port 0, which no SMTP client has.
func nonSMTPClient(host string, port uint16, addr net.IP) bool {
	return port == 0 && host == "localhost" && addr != nil && addr.IsLoopback()
}

// localUser returns the uid in a LocalUserHeader value: 1 to 10 ASCII
// digits, surrounding white space ignored; ok is false for anything else.
func localUser(value string) (uid string, ok bool) {
	v := strings.TrimSpace(value)
	if len(v) == 0 || len(v) > 10 || strings.Trim(v, "0123456789") != "" {
		return "", false
	}
	return v, true
}
