package cliout

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// Events prints one line per event, every field through termsafe; a
// coalesced event shows its count and last time.
func Events(w io.Writer, es []events.Event) {
	if len(es) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	t := termsafe.NewTable(w, "TIME", "ACTION", "KEY", "LIMIT", "RATE/MAX", "DETAILS")
	for _, e := range es {
		rate := ""
		if e.Max != 0 {
			rate = human.Number(e.Rate) + "/" + human.Number(e.Max)
		}
		var details []string
		if e.Count > 1 {
			details = append(details, fmt.Sprintf("count=%d last=%s", e.Count, e.Last.Local().Format(time.DateTime)))
		}
		for _, f := range [][2]string{{"sender", e.Sender}, {"client", e.Client}, {"queue_id", e.QueueID}, {"by", e.By}, {"detail", e.Detail}} {
			if f[1] != "" {
				details = append(details, f[0]+"="+termsafe.Line(f[1]))
			}
		}
		t.Row(e.Time.Local().Format(time.DateTime), e.Action, orDash(e.Key), orDash(e.Limit), orDash(rate), strings.Join(details, " "))
	}
	t.Flush()
}

// EventSummary prints one line per key.
func EventSummary(w io.Writer, ks []events.KeySummary) {
	if len(ks) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	t := termsafe.NewTable(w, "KEY", "REFUSALS", "FIRST", "LAST", "LIMITS")
	for _, k := range ks {
		t.Row(orDash(k.Key), strconv.Itoa(k.Refusals), k.First.Local().Format(time.DateTime),
			k.Last.Local().Format(time.DateTime), orDash(strings.Join(k.Limits, ",")))
	}
	t.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
