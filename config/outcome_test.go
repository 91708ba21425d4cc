package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/config"
	"github.com/ratelimitd/ratelimitd/configs"
)

const outcomeLimit = `
[[limit]]
name = "unknown"
key = "sender"
per = "bounce"
limit = 25
period = "1d"
`

func TestOutcomeLimitWithoutAFeedIsWarned(t *testing.T) {
	f, err := config.Parse([]byte(outcomeLimit), "t")
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(f.Warnings(), "\n"); !strings.Contains(w, "limit unknown counts nothing") {
		t.Errorf("warnings %q lack the missing outcome feed", w)
	}
	f, err = config.Parse([]byte("[outcome]\nmaillog = \"/var/log/mail.log\"\n"+outcomeLimit), "t")
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(f.Warnings(), "\n"); strings.Contains(w, "counts nothing") {
		t.Errorf("warning %q with a feed", w)
	}
	if time.Duration(f.Outcome.Lifetime) != 5*24*time.Hour || f.Outcome.MaxMessages != 500_000 {
		t.Errorf("defaults not filled: %+v", f.Outcome)
	}
}

func TestOutcomeTableIsValidated(t *testing.T) {
	for text, want := range map[string]string{
		`maillog = "mail.log"`:               "outcome.maillog",
		`notices_listen = "0.0.0.0:10027"`:   "outcome.notices_listen",
		`exim_listen = "192.0.2.1:10033"`:    "outcome.exim_listen",
		`lifetime = "5m"`:                    "outcome.lifetime",
		`poll = "2m"`:                        "outcome.poll",
		`max_messages = -1`:                  "outcome.max_messages",
		`notices_listen = "127.0.0.1:10027"`: "",
	} {
		_, err := config.Parse([]byte("[outcome]\n"+text+"\n"+outcomeLimit), "t")
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", text, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want one naming %s", text, err, want)
		}
	}
}

// TestShippedOutcomeExampleValidates: the suggested default outcome limit,
// commented in configs/ratelimitd.toml, is a valid ratio form.
func TestShippedOutcomeExampleValidates(t *testing.T) {
	text := string(configs.Default)
	start, end := strings.Index(text, "# [outcome]\n"), strings.Index(text, "# Several MTAs")
	if start < 0 || end < start {
		t.Fatal("configs/ratelimitd.toml lacks the commented [outcome] example")
	}
	block := strings.ReplaceAll(strings.ReplaceAll(text[start:end], "# ", ""), "#\n", "\n")
	f, err := config.Parse([]byte(block), "example")
	if err != nil {
		t.Fatalf("the outcome example does not validate: %v\n%s", err, block)
	}
	if l := f.Limits[0]; l.Ratio != 0.10 || l.MinCount != 50 || l.Per != "bounce" || f.Outcome.Maillog == "" {
		t.Errorf("example read as %+v, outcome %+v", l, f.Outcome)
	}
}
