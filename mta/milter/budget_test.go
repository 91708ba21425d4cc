package milter

import (
	"testing"
	"time"

	"github.com/ratelimitd/ratelimitd/internal/srvconn"
)

// A connection that sends no packet within FirstRequestTimeout is closed
// and counted; a session that negotiated at once may then wait between
// messages as long as ReadTimeout.
func TestFirstRequestTimeout(t *testing.T) {
	env := start(t, "tcp", &Server{FirstRequestTimeout: 200 * time.Millisecond, ReadTimeout: time.Minute})
	for round := range 3 {
		silent := env.rawConn(t)
		half := env.rawConn(t)
		half.Write([]byte{0, 0, 0, 13, 'O'}) // a packet begun, never ended
		s := env.session(t)
		readsEOF(t, silent)
		readsEOF(t, half)
		time.Sleep(300 * time.Millisecond)
		connect(t, s)
		s.Close()
		if got := env.srv.ConnStats().Closed[srvconn.ReasonFirstRequest]; got != int64(2*(round+1)) {
			t.Fatalf("round %d: %d closed by the first-request timeout, want %d", round, got, 2*(round+1))
		}
	}
}

// Idle milter connections at the cap give way to a new session: the
// oldest idle first.
func TestBudgetClosesIdleForNewSession(t *testing.T) {
	env := start(t, "tcp", &Server{Budget: srvconn.Budget{Max: 4}})
	for range 3 {
		for range 4 {
			env.rawConn(t)
		}
		s := env.session(t)
		connect(t, s)
		s.Close()
	}
	if st := env.srv.ConnStats(); st.Closed[srvconn.ReasonEvicted] < 9 || st.Max != 4 {
		t.Fatalf("stats %+v; want at least 9 evicted under a cap of 4", st)
	}
}
