package postfix

import (
	"bufio"
	"strconv"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
)

// MaxReplyLen is the longest reply line WriteReply writes, in bytes,
// counting "action=" and not counting the "\n" terminator: within the 512
// bytes (510 plus CRLF) of an SMTP reply line (RFC 5321, section 4.5.3.1.5),
// so the text survives intact into Postfix's reply to the client.
const MaxReplyLen = 510

// Texts sent when a Defer or Reject Decision has none: Postfix treats an
// all-numeric action without text as OK, so a numeric reply always carries
// text.
const (
	DefaultDeferText  = "Rate limit exceeded, try again later"
	DefaultRejectText = "Rate limit exceeded"
)

// WriteReply writes the reply to a request at protocol_state state (the
// request's ProtocolState) to w as "action=...\n\n" and flushes w. The
// mapping from Decision to access(5) action is described in the package
// documentation. Only the write or flush can fail; WriteReply returns their
// error. It does not allocate when w's buffer holds MaxReplyLen+2 bytes
// (the bufio default of 4096 does).
func WriteReply(w *bufio.Writer, d policy.Decision, state string) error {
	if w.Available() < MaxReplyLen+2 {
		if err := w.Flush(); err != nil {
			return err
		}
	}
	if _, err := w.Write(AppendReply(w.AvailableBuffer(), d, state)); err != nil {
		return err
	}
	return w.Flush()
}

// AppendReply appends the reply that WriteReply writes, "action=...\n\n", to
// dst and returns the extended slice. The reply line is at most MaxReplyLen
// bytes of valid UTF-8 without control characters, whatever d contains
// (mta.ReplyText). An Action outside the policy package's range answers
// DUNNO (fail open).
func AppendReply(dst []byte, d policy.Decision, state string) []byte {
	limit := len(dst) + MaxReplyLen
	dst = append(dst, "action="...)
	switch d.Action {
	case policy.Defer:
		dst = appendNumeric(dst, d, 450, "4.7.1", '4', DefaultDeferText, limit)
	case policy.Reject:
		dst = appendNumeric(dst, d, 550, "5.7.1", '5', DefaultRejectText, limit)
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
	return append(dst, '\n', '\n')
}

// appendNumeric appends "code enhanced text" for Defer (class '4') and Reject
// (class '5'), replacing a code or enhanced status code of the wrong class.
func appendNumeric(dst []byte, d policy.Decision, defCode int, defEnhanced string, class byte, defText string, limit int) []byte {
	code := d.Code
	if code/100 != int(class-'0') {
		code = defCode
	}
	enhanced := d.Enhanced
	if !mta.ValidEnhanced(enhanced, class) {
		enhanced = defEnhanced
	}
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, ' ')
	dst = append(dst, enhanced...)
	n := len(dst)
	dst = appendText(dst, d.Text, limit)
	if len(dst) == n {
		dst = append(dst, ' ')
		dst = append(dst, defText...)
	}
	return dst
}

// appendLogText appends " text" for HOLD and WARN, whose text Postfix only
// logs: Decision.Text, else Decision.Reason, else nothing.
func appendLogText(dst []byte, d policy.Decision, limit int) []byte {
	text := d.Text
	if text == "" {
		text = d.Reason
	}
	return appendText(dst, text, limit)
}

// appendHeader appends "PREPEND Name: value" if h is a "Name: value" header
// with a valid field name (RFC 5322, section 3.6.8) that fits.
func appendHeader(dst []byte, h string, limit int) ([]byte, bool) {
	colon := -1
	for i := 0; i < len(h); i++ {
		c := h[i]
		if c == ':' {
			colon = i
			break
		}
		if c < '!' || c > '~' {
			return dst, false
		}
	}
	const verb = "PREPEND "
	if colon <= 0 || len(dst)+len(verb)+colon+1 > limit {
		return dst, false
	}
	dst = append(dst, verb...)
	dst = append(dst, h[:colon+1]...)
	return appendText(dst, h[colon+1:], limit), true
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

// holdAllowed reports whether Postfix executes HOLD at protocol state: not
// before MAIL FROM and not in VRFY or ETRN (smtpd_check.c,
// can_delegate_action). Unknown states are allowed.
func holdAllowed(state string) bool {
	switch state {
	case policy.StateConnect, policy.StateEHLO, policy.StateHELO,
		policy.StateVrfy, policy.StateEtrn:
		return false
	}
	return true
}

// prependAllowed reports whether Postfix executes PREPEND at protocol state:
// where it executes HOLD, except in smtpd_end_of_data_restrictions (access(5),
// "PREPEND"; smtpd_check.c).
func prependAllowed(state string) bool {
	return state != policy.StateEndOfMessage && holdAllowed(state)
}
