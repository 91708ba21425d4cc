package web

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/policy"
)

// TestKeyPageSaysWhichLimitAnswers: the key page names the limit that
// answers the key's next message and its ladder's next step.
func TestKeyPageSaysWhichLimitAnswers(t *testing.T) {
	f := newFixture(t, false)
	f.rates.rates = []policy.KeyRate{
		{Limit: "daily", Key: "alice", Rate: 400, Max: 1000, Period: 24 * time.Hour},
		{Limit: "hourly", Key: "alice", Rate: 201, Max: 200, Period: time.Hour, Over: true, Refusing: true, RetryAfter: time.Minute,
			Answers: true, Action: "defer", NextStep: "daily freezes above 1,000/24h"},
		{Limit: "hourly", Key: "bob", Rate: 20, Max: 200, Period: time.Hour},
	}
	c := f.client(t)
	f.login(t, c, "view", "secret-password")
	if _, page := get(t, c, f.ts.URL+"/keys/alice"); !strings.Contains(page, `<p id="answer">Next message: deferred by hourly; daily freezes above 1,000/24h</p>`) {
		t.Errorf("alice's key page does not say which limit answers:\n%s", page)
	}
	if _, page := get(t, c, f.ts.URL+"/keys/bob"); strings.Contains(page, `id="answer"`) {
		t.Errorf("bob's key page names an answering limit:\n%s", page)
	}
}
