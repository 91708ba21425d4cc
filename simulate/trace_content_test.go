package simulate_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ratelimitd/ratelimitd/simulate"
)

// TestTraceReadByContent: one trace written as JSON Lines (with the
// comment line trace from-maillog puts first), as a JSON array and as CSV
// reads to the same requests whatever the file is called: month.trace,
// policy.log, a .json file holding JSON Lines, a .csv holding a JSON array.
// Before, every name without .jsonl, .json or .csv was refused.
func TestTraceReadByContent(t *testing.T) {
	jsonl := `# ratelimitd trace from-maillog /var/log/mail.log
{"time":"2026-11-20T18:00:00Z","protocol_state":"RCPT","sasl_username":"alice","sender":"alice@example.org","recipient":"bob@example.net"}
{"time":"2026-11-20T18:00:01Z","protocol_state":"END-OF-MESSAGE","sasl_username":"alice","sender":"alice@example.org","recipient_count":"1","size":"2048","count":3,"every":"1m"}
`
	array := `[
  {"time":"2026-11-20T18:00:00Z","protocol_state":"RCPT","sasl_username":"alice","sender":"alice@example.org","recipient":"bob@example.net"},
  {"time":"2026-11-20T18:00:01Z","protocol_state":"END-OF-MESSAGE","sasl_username":"alice","sender":"alice@example.org","recipient_count":1,"size":2048,"count":3,"every":"1m"}
]
`
	csv := "\ufefftime,protocol_state,sasl_username,sender,recipient,recipient_count,size,count,every\n" +
		"2026-11-20T18:00:00Z,RCPT,alice,alice@example.org,bob@example.net,,,,\n" +
		"2026-11-20T18:00:01Z,END-OF-MESSAGE,alice,alice@example.org,,1,2048,3,1m\n"
	dir := t.TempDir()
	var want []simulate.Event
	for _, c := range []struct{ name, text string }{
		{"month.trace", jsonl}, {"policy.log", array}, {"export", csv},
		{"lines.json", jsonl}, {"array.csv", array}, {"table.jsonl", csv},
	} {
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, []byte(c.text), 0o644); err != nil {
			t.Fatal(err)
		}
		tr, err := simulate.ReadFile(p, "")
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		got := events(tr)
		for i := range got {
			got[i].Line = 0
		}
		if len(got) != 4 {
			t.Fatalf("%s: %d requests, want 4", c.name, len(got))
		}
		if want == nil {
			want = got
		} else if !reflect.DeepEqual(got, want) {
			t.Errorf("%s reads\n%+v\nwant\n%+v", c.name, got, want)
		}
	}
}

// TestJSONArrayTraceErrorsNameLines: an error in a JSON array trace names
// the line its object starts on; a JSON document that is not an array is
// refused.
func TestJSONArrayTraceErrorsNameLines(t *testing.T) {
	_, err := simulate.Read(strings.NewReader("[\n{\"time\":\"2026-11-20T18:00:00Z\"},\n\n  {\"tim\":1}\n]"), "")
	if err == nil || !strings.Contains(err.Error(), "line 4:") {
		t.Errorf("error %v, want one naming line 4", err)
	}
	if _, err := simulate.Read(strings.NewReader("[1,"), simulate.FormatJSON); err == nil {
		t.Error("a broken array was read")
	}
	if tr, err := simulate.Read(strings.NewReader("# nothing yet\n"), ""); err != nil || tr.Len() != 0 {
		t.Errorf("empty trace: %v %v", tr, err)
	}
}
