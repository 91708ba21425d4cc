package cliout

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/human"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
)

// Events prints one line per event, every field through termsafe.
func Events(w io.Writer, es []events.Event) {
	if len(es) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tACTION\tKEY\tLIMIT\tRATE/MAX\tDETAILS")
	for _, e := range es {
		rate := ""
		if e.Max != 0 {
			rate = human.Number(e.Rate) + "/" + human.Number(e.Max)
		}
		var details []string
		for _, f := range [][2]string{{"sender", e.Sender}, {"client", e.Client}, {"queue_id", e.QueueID}, {"by", e.By}, {"detail", e.Detail}} {
			if f[1] != "" {
				details = append(details, f[0]+"="+termsafe.Line(f[1]))
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format(time.DateTime), termsafe.Line(e.Action),
			orDash(termsafe.Line(e.Key)), orDash(termsafe.Line(e.Limit)), orDash(rate), strings.Join(details, " "))
	}
	tw.Flush()
}

// EventSummary prints one line per key.
func EventSummary(w io.Writer, ks []events.KeySummary) {
	if len(ks) == 0 {
		fmt.Fprintln(w, "no events")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tREFUSALS\tFIRST\tLAST\tLIMITS")
	for _, k := range ks {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", orDash(termsafe.Line(k.Key)), k.Refusals, k.First.Local().Format(time.DateTime),
			k.Last.Local().Format(time.DateTime), orDash(termsafe.Line(strings.Join(k.Limits, ","))))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
