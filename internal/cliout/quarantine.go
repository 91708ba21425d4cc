package cliout

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/admin"
	"github.com/ratelimitd/ratelimitd/internal/plural"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/quarantine"
	"github.com/ratelimitd/ratelimitd/quarantine/lifecycle"
)

// Entries prints one table row per quarantined message (subjects cut to
// 60 characters) and the count.
func Entries(w io.Writer, es []quarantine.Entry) {
	t := termsafe.NewTable(w, "ID", "STATE", "QUEUE_ID", "AGE", "SENDER", "RCPTS", "SIZE", "LIMIT", "SUBJECT", "LAST_THAW")
	now := time.Now()
	for _, e := range es {
		sender := termsafe.Line(e.Sender)
		if sender == "" {
			sender = "<>"
		}
		state := e.State.String()
		if e.Unverified != "" {
			state += ":unverified" // the MTA's queue does not confirm its queue ID
		}
		t.Row(e.ID, state, orDash(termsafe.Line(e.QueueID)), human.Duration(now.Sub(e.Created).Round(time.Second)),
			sender, strconv.Itoa(len(e.Recipients)), strconv.FormatInt(e.Size, 10), e.Limit, cut(termsafe.Line(e.Subject), 60), lastThaw(e))
	}
	t.Flush()
	fmt.Fprintln(w, plural.N(len(es), "message"))
}

// Show prints `quarantine show`: with raw the bytes as they are, else the
// entry, the cleaned preview and why the content is unavailable.
func Show(w io.Writer, res admin.ShowResult, raw bool) {
	if raw {
		// Data for a file (> msg.eml), not text for the terminal.
		io.WriteString(termsafe.Unwrap(w), res.Body)
		return
	}
	res.Entry.WriteTo(w)
	fmt.Fprintln(w)
	// postcat's output for held mail is message content: cleaned too.
	io.WriteString(w, termsafe.Text(res.Body))
	if res.Error != "" {
		fmt.Fprintf(w, "\n(content unavailable: %s)\n", termsafe.Line(res.Error))
	}
}

// Outcomes prints a line per message of a "thaw" or "delete", a count and
// the keys reset; the error says how many failed, or that none matched.
func Outcomes(w io.Writer, op string, sel lifecycle.Selection, out []lifecycle.Outcome) error {
	if len(out) == 0 {
		return NoMatch(sel)
	}
	done := strings.TrimSuffix(op, "e") + "ed" // thawed, deleted
	failed := 0
	var reset []string
	for _, o := range out {
		if o.RateReset && !slices.Contains(reset, o.Key) {
			reset = append(reset, o.Key)
		}
		id, sender := termsafe.Line(o.ID), termsafe.Line(o.Sender)
		if o.OK {
			note := ""
			if o.Note != "" {
				note = " (" + termsafe.Line(o.Note) + ")"
			}
			fmt.Fprintf(w, "%s %s: %s%s\n", id, sender, done, note)
		} else {
			failed++
			fmt.Fprintf(w, "%s %s: FAILED: %s\n", id, sender, termsafe.Line(o.Error))
		}
	}
	fmt.Fprintf(w, "%d %s, %d failed\n", len(out)-failed, done, failed)
	for _, k := range reset {
		fmt.Fprintf(w, "%s: rate reset\n", termsafe.Line(k))
	}
	if failed > 0 {
		return fmt.Errorf("%d of %s could not be %s", failed, plural.N(len(out), "message"), done)
	}
	return nil
}

// NoMatch is the error of a thaw or delete that matched nothing.
func NoMatch(sel lifecycle.Selection) error {
	var what []string
	for _, f := range []struct{ flag, v string }{{"--sender", sel.Sender}, {"--key", sel.Key}} {
		if f.v != "" {
			what = append(what, f.flag+" "+termsafe.Line(f.v))
		}
	}
	if sel.OlderThan > 0 {
		what = append(what, "--older-than "+human.Duration(sel.OlderThan))
	}
	if len(what) == 0 {
		what = append(what, "the IDs given")
	}
	return fmt.Errorf("no message matches %s (held or frozen; see ratelimitd quarantine list)", strings.Join(what, " "))
}

// Suspended prints the result of `quarantine suspend` or `resume`.
func Suspended(w io.Writer, res admin.SuspendResult, resume bool) {
	key := termsafe.Line(res.Key)
	switch {
	case !resume:
		fmt.Fprintf(w, "%s: automatic release suspended\n", key)
	case res.Was:
		fmt.Fprintf(w, "%s: automatic release resumed\n", key)
	default:
		fmt.Fprintf(w, "%s: was not suspended\n", key)
	}
}

// lastThaw says where the last thaw of e went, or why it failed, in at
// most 80 characters; "-" if none.
func lastThaw(e quarantine.Entry) string {
	s := ""
	switch {
	case e.Error != "" && e.State != quarantine.Deleted:
		s = "failed: " + e.Error
	case e.State == quarantine.Thawed && e.ThawedAs != "":
		s = "queued as " + e.ThawedAs + " at " + e.ThawedTo
	}
	return orDash(cut(termsafe.Line(s), 80))
}

// cut shortens s to n runes, the last three "...".
func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-3]) + "..."
	}
	return s
}
