package mailout

import "testing"

// TestQueuedAs: the queue ID of Postfix's and Exim's 250 replies to the
// data, and none from a reply naming none.
func TestQueuedAs(t *testing.T) {
	for _, c := range []struct{ reply, want string }{
		{"2.0.0 Ok: queued as 4XbY1z3kQ9z9", "4XbY1z3kQ9z9"},
		{"2.0.0 Ok: queued as 3F2A81C0D4", "3F2A81C0D4"},
		{"OK id=1tGxyZ-000abc-Qr", "1tGxyZ-000abc-Qr"},
		{"2.0.0 OK: queued", ""},
		{"OK", ""},
		{"queued as ", ""},
		{"queued as " + string(make([]byte, 40)), ""},
		{"queued as ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", ""},
	} {
		if got := QueuedAs(c.reply); got != c.want {
			t.Errorf("QueuedAs(%q) = %q, want %q", c.reply, got, c.want)
		}
	}
}
