package web

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/events"
	"github.com/ratelimitd/ratelimitd/internal/termsafe"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// TestPagesCleanEveryField: recipients on /quarantine and the thaw page,
// the message's header values, and the client and queue-ID columns of
// /events reached the page as sent, U+202E reversing the text around
// them; every field now goes through the one cleaner.
func TestPagesCleanEveryField(t *testing.T) {
	const evil = "\u202eexe.fdp\u200b\u200c\u200d\u2060\ufeff\U000E0041\U000E007F\u2066"
	f := newFixture(t, false)
	id := "0000000000000003"
	f.q.entries[id] = quarantine.Entry{ID: id, State: quarantine.Frozen, Key: "alice", Sender: "a@example.org", Subject: "hi",
		Recipients: []string{"bob" + evil + "@example.net", "carol@example.net"}, ClientAddress: "192.0.2.1" + evil, QueueID: "4QID" + evil}
	f.q.msgs[id] = []byte("From: x@example.org\r\nSubject: hi " + evil + "\r\nX-Note: " + evil + "\r\n\r\nbody " + evil + "\r\n")
	for i := range 3 {
		f.events.Record(events.Event{Time: f.now.Add(-time.Duration(i+1) * time.Minute), Key: "alice", Action: "defer",
			Sender: "a@example.org", Client: "192.0.2.7" + evil, QueueID: "4AB" + evil})
	}
	c := f.client(t)
	f.login(t, c, "op", "secret-password")
	for p, want := range map[string]string{
		"/quarantine":                            "bob\uFFFDexe.fdp",
		"/quarantine/" + id + "/confirm?op=thaw": "bob\uFFFDexe.fdp",
		"/quarantine/" + id:                      "4QID\uFFFDexe.fdp",
		"/events":                                "4AB\uFFFDexe.fdp",
		"/keys/alice":                            "192.0.2.7\uFFFDexe.fdp",
	} {
		resp, page := get(t, c, f.ts.URL+p)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", p, resp.Status)
		}
		for _, r := range page {
			if termsafe.Unsafe(r) && r != '\n' && r != '\t' {
				t.Errorf("%s shows %U", p, r)
				break
			}
		}
		if strings.ContainsAny(page, "\u202e\u200b\u200c\u200d\u2060\ufeff\U000E0041\U000E007F\u2066") {
			t.Errorf("%s shows a bidirectional, zero-width or tag character", p)
		}
		if !strings.Contains(page, want) {
			t.Errorf("%s: no %q", p, want)
		}
	}
}
