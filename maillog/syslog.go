package maillog

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Stamp is a line's timestamp; an RFC 3164 one is YearLess, in placeholderYear.
type Stamp struct {
	Time     time.Time
	YearLess bool
}

// SyslogLine is one line of a syslog mail log (postlogd, rsyslog):
// "Nov 23 13:33:57[.123456] mx1 postfix/smtpd[1234]: Msg", or with an RFC
// 3339 stamp. Program is the tag without its [pid].
type SyslogLine struct {
	Stamp         Stamp
	Host, Program string
	Msg           string
}

// placeholderYear is a leap year, so 29 February parses.
const placeholderYear = 2000

// ParseSyslogLine parses one syslog line ("<PRI>" skipped), classic
// timestamps in loc. Stamp is set even with an error if it is valid.
func ParseSyslogLine(s string, loc *time.Location) (SyslogLine, error) {
	var l SyslogLine
	if strings.HasPrefix(s, "<") {
		if i := strings.IndexByte(s, '>'); i > 0 && i <= 4 {
			s = s[i+1:]
		}
	}
	st, rest, err := parseStamp(s, loc)
	if err != nil {
		return l, err
	}
	l.Stamp = st
	rest = strings.TrimLeft(rest, " ")
	sp := strings.IndexByte(rest, ' ')
	if sp <= 0 {
		return l, fmt.Errorf("no host name after the timestamp")
	}
	l.Host, rest = rest[:sp], rest[sp+1:]
	tag, msg, ok := strings.Cut(rest, ": ")
	if !ok {
		if tag, ok = strings.CutSuffix(rest, ":"); !ok {
			return l, fmt.Errorf("no \"program[pid]: \" tag")
		}
	}
	l.Msg = msg
	if i := strings.IndexByte(tag, '['); i >= 0 {
		if !strings.HasSuffix(tag, "]") {
			return l, fmt.Errorf("malformed tag %q", tag)
		}
		if _, err := strconv.Atoi(tag[i+1 : len(tag)-1]); err != nil {
			return l, fmt.Errorf("malformed pid in tag %q", tag)
		}
		tag = tag[:i]
	}
	if tag == "" || strings.ContainsAny(tag, " \t") {
		return l, fmt.Errorf("malformed tag %q", tag)
	}
	l.Program = tag
	return l, nil
}

// parseStamp parses a leading "Jan _2 15:04:05[.frac]" or RFC 3339 stamp.
func parseStamp(s string, loc *time.Location) (Stamp, string, error) {
	if len(s) >= 15 && s[3] == ' ' {
		n := stampLen(s, 15)
		t, err := parseClock("Jan _2 15:04:05", s[:n], loc)
		if err != nil {
			return Stamp{}, "", err
		}
		return Stamp{Time: withYear(t, placeholderYear), YearLess: true}, s[n:], nil
	}
	stamp, rest, ok := strings.Cut(s, " ")
	if !ok {
		return Stamp{}, "", fmt.Errorf("not a syslog line")
	}
	// RFC 3339, also with a "+hhmm" offset (journalctl -o short-iso).
	t, err := time.Parse(time.RFC3339Nano, stamp)
	if n := len(stamp); err != nil && n > 5 && (stamp[n-5] == '+' || stamp[n-5] == '-') {
		t, err = time.Parse(time.RFC3339Nano, stamp[:n-2]+":"+stamp[n-2:])
	}
	if err != nil {
		return Stamp{}, "", fmt.Errorf("bad timestamp %q (want \"Jan  2 15:04:05\" or RFC 3339)", trunc(stamp, 40))
	}
	if t.Year() < minLogYear {
		return Stamp{}, "", fmt.Errorf("timestamp %q before %d", trunc(stamp, 40), minLogYear)
	}
	return Stamp{Time: t}, rest, nil
}

// stampLen is n, the length of a stamp's layout, plus that of a
// fraction of a second after it.
func stampLen(s string, n int) int {
	if len(s) > n && s[n] == '.' {
		return len(s) - len(strings.TrimLeft(s[n+1:], "0123456789"))
	}
	return n
}

// parseClock parses text in layout (a fraction of a second may follow
// the seconds), a leap second as :59.
func parseClock(layout, text string, loc *time.Location) (time.Time, error) {
	if i := strings.Index(layout, "05"); text[i:i+2] == "60" {
		text = text[:i] + "59" + text[i+2:]
	}
	t, err := time.ParseInLocation(layout, text, loc)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad timestamp %q", trunc(text, 40))
	}
	return t, nil
}

const minLogYear = 1970

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
