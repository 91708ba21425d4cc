package plural

import "testing"

func TestN(t *testing.T) {
	for _, c := range []struct {
		n    int
		noun string
		want string
	}{
		{0, "message", "0 messages"}, {1, "message", "1 message"}, {2, "message", "2 messages"},
		{1, "entry", "1 entry"}, {3, "entry", "3 entries"}, {2, "key", "2 keys"},
		{1, "limit state", "1 limit state"}, {4, "limit state", "4 limit states"},
		{1, "quarantined message", "1 quarantined message"},
	} {
		if got := N(c.n, c.noun); got != c.want {
			t.Errorf("N(%d, %q) = %q, want %q", c.n, c.noun, got, c.want)
		}
	}
}
