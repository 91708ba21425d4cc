package simulate_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/simulate"
)

var t0 = time.Date(2026, 11, 20, 18, 0, 0, 0, time.UTC)

func read(t *testing.T, format, s string) *simulate.Trace {
	t.Helper()
	tr, err := simulate.Read(strings.NewReader(s), format)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func events(tr *simulate.Trace) []simulate.Event { return slices.Collect(tr.Events()) }

// A compact stream: count and every, or until.
func ExampleTrace_Events() {
	tr, err := simulate.Read(strings.NewReader(`
# 150 an hour, from Friday 18:00 for 60 hours
{"time":"2026-11-20T18:00:00Z","sasl_username":"mallory","count":9000,"every":"24s"}
{"time":"2026-11-20T18:00:30Z","sasl_username":"alice","every":"10m","until":"2026-11-20T18:30:00Z"}
`), simulate.FormatJSONL)
	if err != nil {
		fmt.Println(err)
		return
	}
	start, end := tr.Span()
	fmt.Println(tr.Len(), "requests from", start.Format(time.Kitchen), "to", end.Format("Mon 15:04"))
	for e := range tr.Events() {
		if e.Seq > 5 {
			break
		}
		fmt.Println(e.Seq, e.Time.Format("15:04:05"), e.Request.SASLUsername, "line", e.Line)
	}
	// Output:
	// 9003 requests from 6:00PM to Mon 05:59
	// 1 18:00:00 mallory line 3
	// 2 18:00:24 mallory line 3
	// 3 18:00:30 alice line 4
	// 4 18:00:48 mallory line 3
	// 5 18:01:12 mallory line 3
}

func TestTimesAndFields(t *testing.T) {
	tr := read(t, simulate.FormatJSONL, `{"time":"2026-11-20T18:00:00Z","sasl_username":"a"}
{"time":1795197600.5,"sender":"b@example.org","protocol_state":"rcpt","recipient":"x@example.net"}
{"time":"1795197601","client_address":"192.0.2.1","size":"10K","recipient_count":3,"client_port":"4711","queue_id":null}
  {"time":"2026-11-20 19:00:00+01:00","helo_name":"h","instance":"i1","sasl_method":"PLAIN","sasl_sender":"s","client_name":"c","reverse_client_name":"r","protocol_name":"ESMTP","queue_id":"Q1"}
`)
	ev := events(tr)
	if len(ev) != 4 {
		t.Fatalf("%d events", len(ev))
	}
	want := []time.Time{t0, t0, t0.Add(500 * time.Millisecond), t0.Add(time.Second)}
	for i, e := range ev {
		if !e.Time.Equal(want[i]) || e.Time.Location() != time.UTC {
			t.Errorf("event %d at %v, want %v", i, e.Time, want[i])
		}
	}
	// Line 4 (19:00+01:00 = 18:00Z) sorts with line 1, after it.
	if ev[0].Line != 1 || ev[1].Line != 4 || ev[2].Line != 2 {
		t.Errorf("order %d %d %d", ev[0].Line, ev[1].Line, ev[2].Line)
	}
	r := ev[2].Request
	if r.ProtocolState != policy.StateRcpt || r.RecipientCount != 0 || r.Sender != "b@example.org" {
		t.Errorf("RCPT request %+v", r)
	}
	r = ev[3].Request
	if r.ProtocolState != policy.StateEndOfMessage || r.Size != 10<<10 || r.RecipientCount != 3 || r.QueueID != "" {
		t.Errorf("EOM request %+v", r)
	}
	r = ev[1].Request
	if r.HeloName != "h" || r.Instance != "i1" || r.SASLMethod != "PLAIN" || r.SASLSender != "s" ||
		r.ClientName != "c" || r.ReverseClientName != "r" || r.ProtocolName != "ESMTP" || r.QueueID != "Q1" ||
		r.RecipientCount != 1 {
		t.Errorf("request %+v", r)
	}
}

// Overlapping streams are merged in time order; equal times keep file order,
// all repeats of a line before the next line.
func TestMergeOrder(t *testing.T) {
	tr := read(t, simulate.FormatCSV, `time,sasl_username,count,every
2026-11-20T18:00:10Z,late,1,
2026-11-20T18:00:00Z,a,3,10s
2026-11-20T18:00:00Z,b,2,
2026-11-20T18:00:05Z,c,2,10s
`)
	var got []string
	for e := range tr.Events() {
		got = append(got, fmt.Sprintf("%d:%s", int(e.Time.Sub(t0).Seconds()), e.Request.SASLUsername))
	}
	want := []string{"0:a", "0:b", "0:b", "5:c", "10:late", "10:a", "15:c", "20:a"}
	if !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
	if tr.Len() != 8 {
		t.Errorf("Len %d", tr.Len())
	}
	if s, e := tr.Span(); !s.Equal(t0) || !e.Equal(t0.Add(20*time.Second)) {
		t.Errorf("span %v %v", s, e)
	}
}

func TestUntil(t *testing.T) {
	tr := read(t, simulate.FormatJSONL, `{"time":"2026-11-20T18:00:00Z","sasl_username":"m","every":"24s","until":"2026-11-23T06:00:00Z"}
{"time":"2026-11-20T18:00:00Z","sasl_username":"n","every":7,"until":"2026-11-20T18:00:15Z"}`)
	if n := tr.Entries[0].Count; n != 9000 {
		t.Errorf("until: %d requests, want 9000", n)
	}
	if n := tr.Entries[1].Count; n != 3 { // 0, 7, 14
		t.Errorf("until: %d requests, want 3", n)
	}
}

func TestBOMAndComments(t *testing.T) {
	tr := read(t, simulate.FormatCSV, "\ufeff# a comment\nTime, SASL_Username\n\n# another\n1795197600, a\n")
	if tr.Len() != 1 || tr.Entries[0].Request.SASLUsername != "a" || tr.Entries[0].Line != 5 {
		t.Fatalf("%+v", tr.Entries)
	}
	tr = read(t, simulate.FormatJSONL, "\ufeff{\"time\":1795197600}\n   # indented comment\n\n")
	if tr.Len() != 1 {
		t.Fatal(tr.Len())
	}
	if tr := read(t, simulate.FormatCSV, ""); tr.Len() != 0 {
		t.Fatal("empty CSV")
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct{ format, in, want string }{
		{"jsonl", `{"time":1}` + "\n[1,2]", "line 2: not a JSON object"},
		{"jsonl", `null`, "line 1: not a JSON object: null"},
		{"jsonl", `{"time":1} {"time":2}`, "line 1: more than one JSON value"},
		{"jsonl", `{"sasl_username":"a"}`, `line 1: missing "time"`},
		{"jsonl", `{"time":1,"sasl_username":true}`, `line 1: field "sasl_username": want a string or a number, got a boolean`},
		{"jsonl", `{"time":1,"count":0}`, `line 1: field "count": must be 1 to`},
		{"jsonl", `{"time":1,"count":"many"}`, `line 1: field "count"`},
		{"jsonl", `{"time":1,"every":"soon","count":2}`, `line 1: field "every": "soon" is not a duration`},
		{"jsonl", `{"time":1,"every":"-1s","count":2}`, `line 1: field "every": "-1s" must be positive`},
		{"jsonl", `{"time":1,"every":"1s","count":2,"until":5}`, `give "count" or "until", not both`},
		{"jsonl", `{"time":1,"until":5}`, `"until" needs "every"`},
		{"jsonl", `{"time":1,"count":100,"every":"10000d"}`, `"count" times "every" is too long`},
		{"jsonl", `{"time":10,"until":5,"every":1}`, `"until" is not after "time"`},
		{"jsonl", `{"time":1,"protocol_state":"SLEEP"}`, `unknown protocol state "SLEEP"`},
		{"jsonl", `{"time":1,"recipient_count":-1}`, `field "recipient_count": must not be negative`},
		{"jsonl", `{"time":1,"size":"big"}`, `field "size"`},
		{"jsonl", `{"time":-5}`, `not a plausible Unix time`},
		{"jsonl", `{"time":1,"count":20000000,"every":"1s"}` + "\n" + `{"time":1}`, "line 2: simulate: trace too large"},
		{"jsonl", `{"time":1,"every":"1ms","until":"2026-11-20T18:00:00Z"}`, "line 1: simulate: trace too large"},
		{"csv", "time,user\n1,a\n", `line 1: unknown field "user" in the header`},
		{"csv", "time,time\n1,2\n", `line 1: field "time" appears twice`},
		{"csv", "sasl_username\na\n", `line 1: the header has no "time" column`},
		{"csv", "time,sender\n1,\"unterminated\n", "line 2"},
		{"csv", "time,sender\n1,a,b\n2,c\n", "line 2: 3 fields, but the header has 2"},
	} {
		_, err := simulate.Read(strings.NewReader(tc.in), tc.format)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: error %v, want %q", tc.format, tc.in, err, tc.want)
			continue
		}
		if !errors.Is(err, simulate.ErrTrace) {
			t.Errorf("%q: %v does not wrap ErrTrace", tc.in, err)
		}
		var le *simulate.LineError
		if !errors.As(err, &le) || le.Line < 1 {
			t.Errorf("%q: %v is not a LineError", tc.in, err)
		}
	}
}

// Every bad line is reported, up to a bound.
func TestManyErrors(t *testing.T) {
	_, err := simulate.Read(strings.NewReader(strings.Repeat("{\"tim\":1}\n", 50)), simulate.FormatJSONL)
	msg := err.Error()
	if !strings.Contains(msg, "line 1:") || !strings.Contains(msg, "line 20:") || strings.Contains(msg, "line 21:") ||
		!strings.Contains(msg, "too many errors") {
		t.Fatal(msg)
	}
}

func TestUnknownFormat(t *testing.T) {
	if _, err := simulate.Read(strings.NewReader(""), "xml"); !errors.Is(err, simulate.ErrFormat) {
		t.Errorf("xml: %v", err)
	}
	if _, err := simulate.ReadFile("no/such/trace.jsonl", ""); err == nil {
		t.Error("missing file")
	}
}

func TestFormatElapsed(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0:00:00",
		7*time.Hour + 48*time.Minute + 24*time.Second: "7:48:24",
		55*time.Hour + 12*time.Minute:                 "55:12:00",
		1500 * time.Millisecond:                       "0:00:01.5",
		-90 * time.Second:                             "-0:01:30",
	} {
		if got := simulate.FormatElapsed(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}

func TestLongLine(t *testing.T) {
	in := "{\"time\":1}\n{\"time\":1,\"sender\":\"" + strings.Repeat("x", 5<<20) + "\"}\n"
	_, err := simulate.Read(strings.NewReader(in), simulate.FormatJSONL)
	if err == nil || !strings.Contains(err.Error(), "line 2: bufio.Scanner: token too long") {
		t.Fatal(err)
	}
}

// Trace requests are asked as through policy delegation unless "via" says
// milter, so limits bound to a front end measure them (they measured
// nothing when every request carried the front end "simulate").
func TestViaField(t *testing.T) {
	tr := read(t, simulate.FormatJSONL, `{"time":"2026-11-20T18:00:00Z","sasl_username":"a"}
{"time":"2026-11-20T18:00:01Z","sasl_username":"a","via":"milter"}
`)
	ev := events(tr)
	if len(ev) != 2 || ev[0].Request.Stage != policy.ViaPolicy || ev[1].Request.Stage != policy.ViaMilter {
		t.Fatalf("stages %q %q, want policy and milter", ev[0].Request.Stage, ev[1].Request.Stage)
	}
	if _, err := simulate.Read(strings.NewReader(`{"time":"2026-11-20T18:00:00Z","via":"smtp"}`+"\n"), simulate.FormatJSONL); err == nil {
		t.Fatal(`via "smtp" accepted`)
	}
}

// TestTextFieldsSetTheirAttributes: each text field of a trace line sets
// the request attribute of its name.
func TestTextFieldsSetTheirAttributes(t *testing.T) {
	tr, err := simulate.Read(strings.NewReader(`{"time":1,"protocol_name":"p","helo_name":"h","queue_id":"q","sender":"s",`+
		`"recipient":"r","client_address":"ca","client_name":"cn","reverse_client_name":"rn","instance":"i",`+
		`"sasl_method":"sm","sasl_username":"su","sasl_sender":"ss"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	r := tr.Entries[0].Request
	got := []string{r.ProtocolName, r.HeloName, r.QueueID, r.Sender, r.Recipient, r.ClientAddress, r.ClientName,
		r.ReverseClientName, r.Instance, r.SASLMethod, r.SASLUsername, r.SASLSender}
	if want := []string{"p", "h", "q", "s", "r", "ca", "cn", "rn", "i", "sm", "su", "ss"}; !slices.Equal(got, want) {
		t.Fatalf("attributes %q, want %q", got, want)
	}
}
