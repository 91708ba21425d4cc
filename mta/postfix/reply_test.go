package postfix

import (
	"bufio"
	"bytes"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ratelimitd/ratelimitd/mta"
	"github.com/ratelimitd/ratelimitd/policy"
)

func reply(d policy.Decision, state string) string {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	if err := WriteReply(w, d, state); err != nil {
		panic(err)
	}
	return b.String()
}

func TestWriteReply(t *testing.T) {
	const (
		rcpt = policy.StateRcpt
		eom  = policy.StateEndOfMessage
	)
	for _, tc := range []struct {
		name  string
		d     policy.Decision
		state string
		want  string
	}{
		{"pass", policy.Decision{}, rcpt, "action=DUNNO"},
		{"pass ignores text", policy.Decision{Text: "x", Header: "X-A: b"}, rcpt, "action=DUNNO"},
		{"unknown action fails open", policy.Decision{Action: 99, Text: "x"}, rcpt, "action=DUNNO"},

		{"defer defaults", policy.Decision{Action: policy.Defer}, rcpt,
			"action=450 4.7.1 " + mta.DeferText},
		{"defer text", policy.Decision{Action: policy.Defer, Text: "Too many messages from alice, slow down"}, eom,
			"action=450 4.7.1 Too many messages from alice, slow down"},
		{"defer code", policy.Decision{Action: policy.Defer, Code: 451, Enhanced: "4.7.28", Text: "t"}, rcpt,
			"action=451 4.7.28 t"},
		{"defer wrong class", policy.Decision{Action: policy.Defer, Code: 550, Enhanced: "5.7.1", Text: "t"}, rcpt,
			"action=450 4.7.1 t"},
		{"defer bad enhanced", policy.Decision{Action: policy.Defer, Enhanced: "4.7", Text: "t"}, rcpt,
			"action=450 4.7.1 t"},
		{"defer enhanced too long", policy.Decision{Action: policy.Defer, Enhanced: "4.7.1000", Text: "t"}, rcpt,
			"action=450 4.7.1 t"},
		{"defer text all control", policy.Decision{Action: policy.Defer, Text: "\r\n\x00"}, rcpt,
			"action=450 4.7.1 " + mta.DeferText},
		{"reject defaults", policy.Decision{Action: policy.Reject}, rcpt,
			"action=550 5.7.1 " + mta.RejectText},
		{"reject code", policy.Decision{Action: policy.Reject, Code: 554, Enhanced: "5.7.0", Text: "no"}, eom,
			"action=554 5.7.0 no"},
		{"reject wrong class", policy.Decision{Action: policy.Reject, Code: 450, Enhanced: "4.7.1", Text: "no"}, eom,
			"action=550 5.7.1 no"},

		{"hold", policy.Decision{Action: policy.Hold, Text: "held for review"}, eom, "action=HOLD held for review"},
		{"hold reason", policy.Decision{Action: policy.Hold, Reason: "user_hourly 250/200"}, rcpt,
			"action=HOLD user_hourly 250/200"},
		{"hold bare", policy.Decision{Action: policy.Hold}, rcpt, "action=HOLD"},
		{"hold at CONNECT warns", policy.Decision{Action: policy.Hold, Text: "t"}, policy.StateConnect, "action=WARN t"},
		{"hold at ETRN warns", policy.Decision{Action: policy.Hold, Text: "t"}, policy.StateEtrn, "action=WARN t"},
		{"hold unknown state", policy.Decision{Action: policy.Hold, Text: "t"}, "", "action=HOLD t"},
		{"freeze holds", policy.Decision{Action: policy.Freeze, Text: "frozen"}, eom, "action=HOLD frozen"},
		{"freeze at HELO warns", policy.Decision{Action: policy.Freeze}, policy.StateHELO, "action=WARN"},

		{"warn header", policy.Decision{Action: policy.Warn, Header: "X-Rate-Limit: user_hourly 210/200", Text: "t"}, rcpt,
			"action=PREPEND X-Rate-Limit: user_hourly 210/200"},
		{"warn header at DATA", policy.Decision{Action: policy.Warn, Header: "X-R: v"}, policy.StateData,
			"action=PREPEND X-R: v"},
		{"warn header no space", policy.Decision{Action: policy.Warn, Header: "X-R:v"}, rcpt, "action=PREPEND X-R: v"},
		{"warn header empty value", policy.Decision{Action: policy.Warn, Header: "X-R:"}, rcpt, "action=PREPEND X-R:"},
		{"warn header at EOM", policy.Decision{Action: policy.Warn, Header: "X-R: v", Text: "over"}, eom, "action=WARN over"},
		{"warn header at CONNECT", policy.Decision{Action: policy.Warn, Header: "X-R: v", Text: "over"}, policy.StateConnect,
			"action=WARN over"},
		{"warn bad header name", policy.Decision{Action: policy.Warn, Header: "X R: v", Text: "over"}, rcpt, "action=WARN over"},
		{"warn header no colon", policy.Decision{Action: policy.Warn, Header: "X-R v", Reason: "why"}, rcpt, "action=WARN why"},
		{"warn header empty name", policy.Decision{Action: policy.Warn, Header: ": v"}, rcpt, "action=WARN"},
		{"warn header CRLF injection", policy.Decision{Action: policy.Warn, Header: "X-R: a\r\nBcc: evil@example.com"}, rcpt,
			"action=PREPEND X-R: a Bcc: evil@example.com"},
		{"warn header filling the line", policy.Decision{Action: policy.Warn, Header: "X-" + strings.Repeat("a", 492) + ":"}, rcpt,
			"action=PREPEND X-" + strings.Repeat("a", 492) + ":"},
		{"warn text", policy.Decision{Action: policy.Warn, Text: "would defer"}, rcpt, "action=WARN would defer"},
		{"warn reason", policy.Decision{Action: policy.Warn, Reason: "dry run"}, rcpt, "action=WARN dry run"},

		{"text sanitised", policy.Decision{Action: policy.Reject, Text: " a\r\nb\x00c\td  e\x7f\xff\u0085f\u2028 "}, rcpt,
			"action=550 5.7.1 a b c d e \uFFFD f"},
		{"text keeps UTF-8", policy.Decision{Action: policy.Defer, Text: "Débit dépassé ✉"}, rcpt,
			"action=450 4.7.1 Débit dépassé ✉"},
		{"injection of a second reply", policy.Decision{Action: policy.Defer, Text: "x\n\naction=OK"}, rcpt,
			"action=450 4.7.1 x action=OK"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := reply(tc.d, tc.state)
			checkReply(t, got)
			if want := tc.want + "\n\n"; got != want {
				t.Fatalf("got  %q\nwant %q", got, want)
			}
		})
	}
}

// checkReply asserts the wire invariants of a reply: one "action=" line of
// at most MaxReplyLen bytes of valid UTF-8 without control characters,
// followed by the empty line.
func checkReply(t *testing.T, r string) {
	t.Helper()
	line, ok := strings.CutSuffix(r, "\n\n")
	if !ok {
		t.Fatalf("reply %q does not end in an empty line", r)
	}
	if !strings.HasPrefix(line, "action=") {
		t.Fatalf("reply %q does not start with action=", r)
	}
	if len(line) > MaxReplyLen {
		t.Fatalf("reply line is %d bytes, more than %d", len(line), MaxReplyLen)
	}
	if !utf8.ValidString(line) {
		t.Fatalf("reply %q is not valid UTF-8", line)
	}
	for _, r := range line {
		if r < ' ' || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == '\u2028' || r == '\u2029' {
			t.Fatalf("reply %q contains control character %U", line, r)
		}
	}
	if strings.HasSuffix(line, " ") {
		t.Fatalf("reply %q has trailing space", line)
	}
}

// TestWriteReplySanitises feeds hostile and oversized text through every
// action and state.
func TestWriteReplySanitises(t *testing.T) {
	long := strings.Repeat("é", 1000) // 2,000 bytes
	texts := []string{
		long,
		"a" + long,                // cut lands inside a rune either way
		strings.Repeat("x", 2000), //
		"line1\r\nline2\x00\xff\xfe" + long,
		strings.Repeat("\r\n", 1000),
		strings.Repeat("\xff", 2000),
		strings.Repeat("✉", 700),
		strings.Repeat("a\u0085", 700),
	}
	states := []string{"", policy.StateConnect, policy.StateRcpt, policy.StateData, policy.StateEndOfMessage, policy.StateEtrn}
	for _, text := range texts {
		for a := policy.Pass; a <= policy.Reject+1; a++ {
			for _, state := range states {
				d := policy.Decision{Action: a, Text: text, Reason: text, Header: "X-Rate-Limit: " + text}
				got := reply(d, state)
				checkReply(t, got)
				if a == policy.Defer || a == policy.Reject {
					if len(got) < MaxReplyLen-10 && strings.Contains(text, "x") {
						t.Errorf("text cut short: %d bytes", len(got))
					}
				}
			}
		}
	}
}

// TestWriteReplyRandom is a property test: any Decision yields a valid
// reply.
func TestWriteReplyRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	randString := func() string {
		b := make([]byte, rng.IntN(700))
		for i := range b {
			switch rng.IntN(4) {
			case 0:
				b[i] = byte(rng.IntN(256))
			case 1:
				b[i] = " \r\n\x00\t:"[rng.IntN(6)]
			default:
				b[i] = byte('a' + rng.IntN(26))
			}
		}
		return string(b)
	}
	states := []string{"", policy.StateConnect, policy.StateRcpt, policy.StateEndOfMessage, "junk"}
	for range 2000 {
		d := policy.Decision{
			Action:   policy.Action(rng.IntN(8)),
			Code:     rng.IntN(700),
			Enhanced: []string{"", "4.7.1", "5.7.1", "4.x.1", "5.1.10", "4.7.1 x"}[rng.IntN(6)],
			Text:     randString(),
			Reason:   randString(),
			Header:   []string{"", "X-A: ", "Subject: "}[rng.IntN(3)] + randString(),
		}
		checkReply(t, reply(d, states[rng.IntN(len(states))]))
	}
}

func TestWriteReplyAllocs(t *testing.T) {
	w := bufio.NewWriter(io.Discard)
	d := policy.Decision{Action: policy.Defer, Text: "Rate limit exceeded for alice (210/200 per hour)"}
	allocs := testing.AllocsPerRun(100, func() {
		if err := WriteReply(w, d, policy.StateRcpt); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("WriteReply: %v allocations, want 0", allocs)
	}
}
