package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// TestStatusNeverFlushedYet: a rate state that was never flushed reads
// "never flushed yet" (before: "last flush never ago"); a flushed one
// reads "last flush 3s ago".
func TestStatusNeverFlushedYet(t *testing.T) {
	var b strings.Builder
	(&StateStatus{LastFlushAge: "never"}).Print(&b)
	if got := b.String(); !strings.Contains(got, "rate state: never flushed yet,") || strings.Contains(got, "never ago") {
		t.Errorf("never flushed: %q", got)
	}
	b.Reset()
	(&StateStatus{LastFlush: time.Now(), LastFlushAge: "3s"}).Print(&b)
	if got := b.String(); !strings.Contains(got, "rate state: last flush 3s ago,") {
		t.Errorf("flushed: %q", got)
	}
}

// TestInFlightOnlyWhereEndOfMessageComes: with Postfix asking only at RCPT
// no message ever ends, so status does not count them as in flight
// (before: "messages in flight: 206" long after the mail had gone); with
// END-OF-MESSAGE requests it counts.
func TestInFlightOnlyWhereEndOfMessageComes(t *testing.T) {
	var b strings.Builder
	st := &Status{MessagesInFlight: 206, Stages: []policy.StageCount{{Via: policy.ViaPolicy, State: policy.StateRcpt, Requests: 412}}}
	printInFlight(&b, st)
	if got := b.String(); strings.Contains(got, "206") || !strings.Contains(got, "not counted") {
		t.Errorf("RCPT only: %q", got)
	}
	b.Reset()
	st.Stages = append(st.Stages, policy.StageCount{Via: policy.ViaPolicy, State: policy.StateEndOfMessage, Requests: 206})
	printInFlight(&b, st)
	if got := b.String(); got != "messages in flight: 206\n" {
		t.Errorf("with END-OF-MESSAGE: %q", got)
	}
}
