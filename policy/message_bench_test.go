package policy

import (
	"strconv"
	"testing"
)

// BenchmarkMessageTable is the per-message bookkeeping of one message as
// Postfix asks about it with policy delegation at RCPT and
// END-OF-MESSAGE: get and end for the RCPT (a new message), get and end
// for the END-OF-MESSAGE (which forgets it) 64 messages later, of
// users taken round robin from 100,000. One op is one message (two
// requests).
func BenchmarkMessageTable(b *testing.B) {
	const users, inFlight = 100_000, 64
	var t msgTable
	reqs := make([][2]Request, 4096)
	for i := range reqs {
		u := "user" + strconv.Itoa(i*(users/len(reqs)))
		for j, state := range []string{StateRcpt, StateEndOfMessage} {
			reqs[i][j] = Request{ProtocolState: state, ClientAddress: "192.0.2.1", SASLUsername: u,
				Sender: u + "@example.com", Instance: "1a2b." + strconv.Itoa(i), Stage: ViaPolicy}
		}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i >= inFlight {
			r := &reqs[(i-inFlight)%len(reqs)][1]
			m := t.get(r, false)
			m.shard.end(m, r, false, true)
		}
		r := &reqs[i%len(reqs)][0]
		m := t.get(r, false)
		m.shard.end(m, r, false, false)
	}
}
