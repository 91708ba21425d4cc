package maillog

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ErrNotExim is returned by ParseExim for a mainlog line not about a message.
var ErrNotExim = errors.New("maillog: not an Exim line about a message")

// IsEximLine reports whether s starts "2026-11-20 18:00:00 ", like Exim's.
func IsEximLine(s string) bool {
	return len(s) > 20 && s[4] == '-' && s[7] == '-' && s[10] == ' ' && s[13] == ':' && s[16] == ':'
}

// ParseExim parses one mainlog line (Exim specification, chapter "Log
// files"): "2026-11-20 18:00:00[.mmm][ +hhmm] [[pid]] ID FLAG ...", FLAG
// one of <= => -> *> ** == or "Completed"; times without an offset in loc.
func ParseExim(s string, loc *time.Location) (time.Time, Record, error) {
	var r Record
	if !IsEximLine(s) {
		return time.Time{}, r, fmt.Errorf("not an Exim mainlog line")
	}
	t, rest, err := parseEximStamp(s, loc)
	if err != nil {
		return time.Time{}, r, err
	}
	if strings.HasPrefix(rest, "[") {
		i := strings.IndexByte(rest, ']')
		if i < 0 {
			return t, r, fmt.Errorf("malformed [pid]")
		}
		rest = strings.TrimLeft(rest[i+1:], " ")
	}
	id, rest, _ := strings.Cut(rest, " ")
	if !ValidQueueID(id) || !strings.Contains(id, "-") { // a Postfix ID is no Exim ID
		return t, r, ErrNotExim
	}
	r.QueueID = id
	flag, rest, _ := strings.Cut(rest, " ")
	switch flag {
	case "<=":
		r.Kind = KindArrival
		err = parseArrival(&r, rest)
	case "=>", "->", "*>", "**", "==":
		r.Kind = KindTo
		err = parseEximRecipient(&r, rest)
		if flag == "**" || flag == "==" {
			// A bounce or a deferral, as Postfix's status= and dsn= say it.
			r.Status, r.DSN = "bounced", "5.0.0"
			if flag == "==" {
				r.Status, r.DSN = "deferred", "4.0.0"
			}
			r.DSN = RefineDSN(r.DSN, rest)
		}
	case "Completed":
		r.Kind = KindCompleted
	default:
		r.Kind = KindOther
	}
	return t, r, err
}

var enhancedCode = regexp.MustCompile(`\b[245]\.\d{1,3}\.\d{1,3}\b`)

// RefineDSN returns a generic status code (X.0.0) made precise by the
// first RFC 3463 code in text ("smtp; 550 5.1.1 <x>: no such user") if
// it is of the same class; else dsn.
func RefineDSN(dsn, text string) string {
	if code := enhancedCode.FindString(text); code != "" && strings.HasSuffix(dsn, ".0.0") && code[0] == dsn[0] {
		return code
	}
	return dsn
}

func parseEximStamp(s string, loc *time.Location) (time.Time, string, error) {
	layout, n := "2006-01-02 15:04:05", stampLen(s, 19)
	if z := s[n:]; len(z) >= 6 && z[0] == ' ' && (z[1] == '+' || z[1] == '-') && strings.Trim(z[2:6], "0123456789") == "" {
		layout, n = layout+" -0700", n+6
	}
	t, err := parseClock(layout, s[:n], loc)
	switch {
	case err != nil:
		return time.Time{}, "", err
	case t.Year() < minLogYear:
		return time.Time{}, "", fmt.Errorf("timestamp %q before %d", s[:10], minLogYear)
	case !strings.HasPrefix(s[n:], " "):
		return time.Time{}, "", fmt.Errorf("no space after the timestamp")
	}
	return t, strings.TrimLeft(s[n:], " "), nil
}

// eximTokens splits on spaces, keeping a quoted part (T="a b") whole.
func eximTokens(s string) ([]string, error) {
	var toks []string
	for s = strings.TrimLeft(s, " "); s != ""; s = strings.TrimLeft(s, " ") {
		i, inQuote := 0, false
		for ; i < len(s) && (inQuote || s[i] != ' '); i++ {
			switch c := s[i]; {
			case inQuote && c == '\\':
				i++
			case c == '"':
				inQuote = !inQuote
			}
		}
		if inQuote {
			return toks, fmt.Errorf("unterminated quoted string")
		}
		toks = append(toks, s[:i])
		s = s[i:]
	}
	return toks, nil
}

const asciiLetters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// isTag splits tok "X=..." with X a log field name (letters).
func isTag(tok string) (string, string, bool) {
	eq := strings.IndexByte(tok, '=')
	if eq <= 0 || eq > 12 || strings.Trim(tok[:eq], asciiLetters) != "" {
		return "", "", false
	}
	return tok[:eq], tok[eq+1:], true
}

func parseArrival(r *Record, rest string) error {
	toks, err := eximTokens(rest)
	if err != nil {
		return err
	}
	if len(toks) == 0 {
		return fmt.Errorf("<= without a sender")
	}
	r.Sender = strings.Trim(toks[0], "<>")
	smtp := false
	for i := 1; i < len(toks); i++ {
		tok := toks[i]
		if tok == "for" {
			for _, a := range toks[i+1:] {
				r.Recipients = append(r.Recipients, strings.Trim(a, "<>"))
			}
			break
		}
		name, v, ok := isTag(tok)
		if !ok {
			continue
		}
		switch name {
		case "H":
			// H=name (helo) [addr]:port, over several tokens.
			smtp = true
			for h := v; ; h = toks[i] {
				if strings.HasPrefix(h, "[") {
					if j := strings.IndexByte(h, ']'); j > 1 {
						r.ClientAddress = strings.TrimPrefix(h[1:j], "IPv6:")
					}
				} else if !strings.HasPrefix(h, "(") && r.ClientName == "" && !strings.HasSuffix(h, ")") {
					r.ClientName = h
				}
				if i+1 == len(toks) || toks[i+1] == "for" {
					break
				}
				if _, _, ok := isTag(toks[i+1]); ok {
					break
				}
				i++
			}
		case "A":
			r.SASLMethod, r.SASLUsername, _ = strings.Cut(v, ":")
		case "U":
			if r.SASLUsername == "" && !smtp {
				r.SASLUsername = v
			}
		case "S":
			if r.Size, err = strconv.ParseInt(v, 10, 64); err != nil || r.Size < 0 {
				return fmt.Errorf("bad S=%q", trunc(v, 20))
			}
		case "id":
			r.MessageID = v
		case "R":
			r.Bounce = true
		}
	}
	if smtp && r.SASLMethod == "" {
		// U= on an SMTP arrival is the ident (RFC 1413) answer, not a login.
		r.SASLUsername = ""
	}
	return nil
}

func parseEximRecipient(r *Record, rest string) error {
	toks, err := eximTokens(rest)
	if err != nil {
		return err
	}
	// "=> local-part <original@address>": the address the client gave.
	if len(toks) > 1 && strings.HasPrefix(toks[1], "<") && strings.HasSuffix(toks[1], ">") {
		r.Recipient = toks[1][1 : len(toks[1])-1]
	} else if len(toks) > 0 {
		r.Recipient = strings.Trim(toks[0], "<>")
	}
	if r.Recipient == "" {
		return fmt.Errorf("recipient line without an address")
	}
	return nil
}
