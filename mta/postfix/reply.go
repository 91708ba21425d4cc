package postfix

import (
	"bufio"
	"cmp"
	"slices"
	"strconv"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
)

// MaxReplyLen is the longest reply line, in bytes, with "action=" and
// without "\n": within an SMTP reply line (RFC 5321 4.5.3.1.5).
const MaxReplyLen = 510

// WriteReply writes the reply to a request at protocol state state to w,
// "action=...\n\n" (package doc), and flushes. It does not allocate when
// w's buffer holds MaxReplyLen+2 bytes. An unknown Action answers DUNNO.
func WriteReply(w *bufio.Writer, d policy.Decision, state string) error {
	if w.Available() < MaxReplyLen+2 {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	dst := append(w.AvailableBuffer(), "action="...)
	limit := MaxReplyLen
	switch d.Action {
	case policy.Defer, policy.Reject:
		code, enhanced, text := mta.Refusal(&d)
		dst = strconv.AppendInt(dst, int64(code), 10)
		dst = append(dst, ' ')
		dst = append(dst, enhanced...)
		dst = appendText(dst, text, limit)
	case policy.Hold, policy.Freeze:
		if holdAllowed(state) {
			dst = append(dst, "HOLD"...)
		} else {
			dst = append(dst, "WARN"...)
		}
		dst = appendLogText(dst, d, limit)
	case policy.Warn:
		if d.Header != "" && prependAllowed(state) {
			if out, ok := appendHeader(dst, d.Header, limit); ok {
				dst = out
				break
			}
		}
		dst = append(dst, "WARN"...)
		dst = appendLogText(dst, d, limit)
	default: // Pass, and fail open on anything unknown.
		dst = append(dst, "DUNNO"...)
	}
	if _, err := w.Write(append(dst, '\n', '\n')); err != nil {
		return err
	}
	return w.Flush()
}

// appendLogText appends " text" for HOLD and WARN, whose text Postfix only
// logs: Decision.Text, else Decision.Reason, else nothing.
func appendLogText(dst []byte, d policy.Decision, limit int) []byte {
	return appendText(dst, cmp.Or(d.Text, d.Reason), limit)
}

// appendHeader appends "PREPEND Name: value" if h is a "Name: value" header
// with a valid field name (RFC 5322, section 3.6.8) that fits.
func appendHeader(dst []byte, h string, limit int) ([]byte, bool) {
	name, value, ok := mta.HeaderField(h)
	const verb = "PREPEND "
	if !ok || len(dst)+len(verb)+len(name)+1 > limit {
		return dst, false
	}
	dst = append(dst, verb...)
	dst = append(dst, h[:len(name)+1]...)
	return appendText(dst, value, limit), true
}

// appendText appends " " and s made safe (mta.ReplyText), if anything of
// s remains, so that len(dst) stays within limit.
func appendText(dst []byte, s string, limit int) []byte {
	if t := mta.ReplyText(s, limit-len(dst)-1); t != "" {
		dst = append(dst, ' ')
		dst = append(dst, t...)
	}
	return dst
}

// holdAllowed reports whether Postfix executes HOLD at state: not before
// MAIL, not in VRFY or ETRN (smtpd_check.c, can_delegate_action).
func holdAllowed(state string) bool {
	return !slices.Contains([]string{policy.StateConnect, policy.StateEHLO, policy.StateHELO,
		policy.StateVrfy, policy.StateEtrn}, state)
}

// prependAllowed: where HOLD is, but not at END-OF-MESSAGE (access(5)).
func prependAllowed(state string) bool {
	return state != policy.StateEndOfMessage && holdAllowed(state)
}
