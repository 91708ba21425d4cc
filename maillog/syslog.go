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

var months = map[string]time.Month{
	"Jan": time.January, "Feb": time.February, "Mar": time.March, "Apr": time.April,
	"May": time.May, "Jun": time.June, "Jul": time.July, "Aug": time.August,
	"Sep": time.September, "Oct": time.October, "Nov": time.November, "Dec": time.December,
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
	colon := strings.Index(rest, ": ")
	tag := rest
	if colon >= 0 {
		tag, l.Msg = rest[:colon], rest[colon+2:]
	} else if strings.HasSuffix(rest, ":") {
		tag = rest[:len(rest)-1]
	} else {
		return l, fmt.Errorf("no \"program[pid]: \" tag")
	}
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
		mon, ok := months[s[:3]]
		if !ok {
			return Stamp{}, "", fmt.Errorf("unknown month %q", s[:3])
		}
		dayText := strings.TrimLeft(s[4:6], " ")
		day, err := strconv.Atoi(dayText)
		if err != nil || day < 1 || day > 31 {
			return Stamp{}, "", fmt.Errorf("bad day %q", s[4:6])
		}
		if s[6] != ' ' {
			return Stamp{}, "", fmt.Errorf("bad timestamp %q", s[:15])
		}
		hh, mm, ss, ns, n, err := parseClock(s[7:])
		if err != nil {
			return Stamp{}, "", err
		}
		t := time.Date(placeholderYear, mon, day, hh, mm, ss, ns, loc)
		if t.Day() != day {
			return Stamp{}, "", fmt.Errorf("no day %d in %s", day, mon)
		}
		return Stamp{Time: t, YearLess: true}, s[7+n:], nil
	}
	sp := strings.IndexByte(s, ' ')
	if sp < 0 {
		return Stamp{}, "", fmt.Errorf("not a syslog line")
	}
	t, err := parseRFC3339(s[:sp])
	if err != nil {
		return Stamp{}, "", err
	}
	return Stamp{Time: t}, s[sp:], nil
}

// parseClock parses "15:04:05[.frac]" and returns the length consumed.
func parseClock(s string) (hh, mm, ss, ns, n int, err error) {
	if len(s) < 8 || s[2] != ':' || s[5] != ':' {
		return 0, 0, 0, 0, 0, fmt.Errorf("bad clock time")
	}
	d := func(a string) int {
		if a[0] < '0' || a[0] > '9' || a[1] < '0' || a[1] > '9' {
			return -1
		}
		return int(a[0]-'0')*10 + int(a[1]-'0')
	}
	hh, mm, ss = d(s[0:2]), d(s[3:5]), d(s[6:8])
	if hh < 0 || hh > 23 || mm < 0 || mm > 59 || ss < 0 || ss > 60 {
		return 0, 0, 0, 0, 0, fmt.Errorf("bad clock time %q", s[:8])
	}
	if ss == 60 {
		ss = 59 // a leap second
	}
	n = 8
	if len(s) > 8 && s[8] == '.' {
		j := 9
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		frac := s[9:j]
		if frac == "" || len(frac) > 9 {
			return 0, 0, 0, 0, 0, fmt.Errorf("bad fraction of a second")
		}
		v, _ := strconv.Atoi(frac)
		for k := len(frac); k < 9; k++ {
			v *= 10
		}
		ns, n = v, j
	}
	return hh, mm, ss, ns, n, nil
}

const minLogYear = 1970

// parseRFC3339 parses RFC 3339, also with a "+hhmm" offset (journalctl -o
// short-iso).
func parseRFC3339(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		if n := len(s); n > 5 && (s[n-5] == '+' || s[n-5] == '-') {
			t, err = time.Parse(time.RFC3339Nano, s[:n-2]+":"+s[n-2:])
		}
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("bad timestamp %q (want \"Jan  2 15:04:05\" or RFC 3339)", trunc(s, 40))
	}
	if t.Year() < minLogYear {
		return time.Time{}, fmt.Errorf("timestamp %q before %d", trunc(s, 40), minLogYear)
	}
	return t, nil
}

func trunc(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
