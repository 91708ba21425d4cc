package postfix

import (
	"testing"
	"time"
)

// TestParseEximQueue reads exim -bp output (the Exim specification's
// example layout): frozen messages are on hold, delivered recipients are
// left out, and the arrival time comes from the message ID.
func TestParseEximQueue(t *testing.T) {
	out := []byte(`25m  2.9K 1qX5Yz-000123-AB <alice@example.org> *** frozen ***
          bob@example.net
        D carol@example.net

 4h   12K 1qX5Z0-0001Ab-Cd <>
          dave@example.org

garbage line
`)
	msgs := ParseEximQueue(out)
	if len(msgs) != 2 {
		t.Fatalf("%d messages: %+v", len(msgs), msgs)
	}
	m := msgs[0]
	if m.QueueID != "1qX5Yz-000123-AB" || m.Queue != "hold" || m.Sender != "alice@example.org" ||
		len(m.Recipients) != 1 || m.Recipients[0] != "bob@example.net" {
		t.Errorf("first message %+v", m)
	}
	if m.Arrival.Before(time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)) || m.Arrival.After(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("arrival %v decoded from 1qX5Yz", m.Arrival)
	}
	if m := msgs[1]; m.Queue != "queued" || m.Sender != "" || m.Arrival.Sub(msgs[0].Arrival) != time.Second {
		t.Errorf("second message %+v", m)
	}
}
