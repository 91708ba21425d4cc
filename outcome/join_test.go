package outcome

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/statedb"
)

func openDB(t *testing.T, path string) *bolt.DB {
	t.Helper()
	db, err := statedb.Open(path, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestJoinSurvivesRestart: a submission and its claims are in the file
// after Close, so a reopened join still counts nothing twice, and a
// record past its lifetime is gone.
func TestJoinSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	db := openDB(t, path)
	j, err := Open(db, now, Options{})
	if err != nil {
		t.Fatal(err)
	}
	sub := Submission{Time: now, SASLUsername: "alice", Sender: "alice@example.org", ClientAddress: "192.0.2.1"}
	if !j.Record("4ABCDEF012", sub) || !j.Record("1wXyZ2-000Abc-Q1", Submission{Time: now.Add(-6 * 24 * time.Hour)}) {
		t.Fatal("Record refused valid queue IDs")
	}
	if _, ok := j.Claim("4ABCDEF012", "Bob@example.net", policy.OutcomeDeferral); !ok {
		t.Fatal("first claim refused")
	}
	j.SetCursor("maillog", []byte("pos"))
	if err := j.tick(now); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = openDB(t, path)
	defer db.Close()
	lost, _, err := statedb.Scan(db, Formats())
	if err != nil || len(lost) != 0 {
		t.Fatalf("Scan: %v, lost %v", err, lost)
	}
	j, err = Open(db, now.Add(time.Minute), Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := j.Lookup("4ABCDEF012")
	if !ok || got.SASLUsername != "alice" || got.ClientAddress != "192.0.2.1" || !got.Time.Equal(now) {
		t.Fatalf("after reopen: %+v, %v", got, ok)
	}
	if _, ok := j.Lookup("1wXyZ2-000Abc-Q1"); ok {
		t.Error("a submission past its lifetime was kept")
	}
	if _, ok := j.Claim("4ABCDEF012", "bob@EXAMPLE.net", policy.OutcomeDeferral); ok {
		t.Error("a deferral counted before the restart was claimed again")
	}
	if _, ok := j.Claim("4ABCDEF012", "bob@example.net", policy.OutcomeBounce); !ok {
		t.Error("the bounce after a deferral was refused")
	}
	if string(j.Cursor("maillog")) != "pos" {
		t.Errorf("cursor %q after reopen", j.Cursor("maillog"))
	}
}

// TestJoinIsBounded: a full join refuses new queue IDs until old ones
// expire, and refuses queue IDs that are not queue IDs.
func TestJoinIsBounded(t *testing.T) {
	now := time.Now()
	j := NewJoin(nil, Options{MaxMessages: 2, Lifetime: time.Hour})
	for _, id := range []string{"AAAAA1", "AAAAA2"} {
		if !j.Record(id, Submission{Time: now}) {
			t.Fatalf("Record(%s) refused", id)
		}
	}
	if j.Record("AAAAA3", Submission{Time: now}) || j.Dropped() != 1 {
		t.Errorf("a full join took a third queue ID (dropped %d)", j.Dropped())
	}
	if !j.Record("AAAAA3", Submission{Time: now.Add(2 * time.Hour)}) {
		t.Error("a full join of expired IDs refused a new one")
	}
	for _, bad := range []string{"", "abc", "../../etc/passwd", "A B C D E", "0123456789012345678901234567890123"} {
		if j.Record(bad, Submission{Time: now}) {
			t.Errorf("Record(%q) took an invalid queue ID", bad)
		}
	}
}

// TestFullSessionTableSweepsOnceAMinute: a full session table is swept
// for expired sessions at most once a minute (a sweep is O(n)), not on
// every request it refuses.
func TestFullSessionTableSweepsOnceAMinute(t *testing.T) {
	now := time.Now()
	j := NewJoin(nil, Options{})
	req := func(i int) *policy.Request {
		return &policy.Request{SASLUsername: "u", Sender: fmt.Sprintf("s%d@example.org", i), ClientAddress: "192.0.2.1"}
	}
	j.Saw(now.Add(30*time.Second-sessionWindow), req(0)) // expires in 30s
	for i := 1; i < maxSessions; i++ {
		j.Saw(now, req(i))
	}
	has := func(i int, at time.Time) bool { _, ok := j.Session("192.0.2.1", req(i).Sender, at); return ok }
	j.Saw(now, req(-1))
	j.Saw(now.Add(31*time.Second), req(-2))
	if has(-1, now) || has(-2, now.Add(31*time.Second)) {
		t.Fatal("a full table took a session within a minute of its last sweep")
	}
	j.Saw(now.Add(61*time.Second), req(-3))
	if !has(-3, now.Add(61*time.Second)) {
		t.Error("a minute later, the sweep made no room for a new session")
	}
}

// TestClaimIsOncePerRecipientAndKind, repeated concurrently: however many
// feeds report one recipient's deferral, it is claimed once.
func TestClaimIsOncePerRecipientAndKind(t *testing.T) {
	for range 20 {
		j := NewJoin(nil, Options{})
		j.Record("ABCDE1", Submission{Time: time.Now()})
		wins := make(chan bool, 8)
		for range 8 {
			go func() {
				_, ok := j.Claim("ABCDE1", "r@example.net", policy.OutcomeDeferral)
				wins <- ok
			}()
		}
		n := 0
		for range 8 {
			if <-wins {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("%d claims of one deferral won, want 1", n)
		}
	}
}

func TestDecodeRejectsDamage(t *testing.T) {
	e := &entry{sub: Submission{Time: time.Unix(1, 0), Sender: "s@example.org"}, claims: []claim{{1, policy.OutcomeBounce}}}
	v := encodeEntry([]byte("ABCDE1"), e)
	if _, err := decodeEntry([]byte("ABCDE1"), v); err != nil {
		t.Fatal(err)
	}
	v[3] ^= 1
	if _, err := decodeEntry([]byte("ABCDE1"), v); err == nil {
		t.Error("a damaged record decoded")
	}
}

// TestExcludedStaysExcluded: a message one front end held stays out of
// the join when the other front end admits it afterwards, across a
// restart.
func TestExcludedStaysExcluded(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	now := time.Now()
	db := openDB(t, path)
	j := NewJoin(db, Options{})
	j.Exclude("ABCDE1", now)
	if !j.Record("ABCDE1", Submission{Time: now, SASLUsername: "alice"}) {
		t.Fatal("Record refused")
	}
	if _, ok := j.Claim("ABCDE1", "r@example.net", policy.OutcomeBounce); ok {
		t.Error("an excluded message's bounce was claimed")
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = openDB(t, path)
	defer db.Close()
	j, err := Open(db, now, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := j.Lookup("ABCDE1"); ok {
		t.Error("an excluded message is joined after a restart")
	}
}

// The join keeps its submissions for days: their strings must not share
// memory with the request's, which a policy Decoder cuts from blocks of
// up to 16 KiB that each kept string would pin.
func TestSubmissionOfCopiesStrings(t *testing.T) {
	req := &policy.Request{SASLUsername: "alice", Sender: "alice@example.org", ClientAddress: "192.0.2.7",
		ClientName: "pc.example.org", HeloName: "pc"}
	sub := SubmissionOf(time.Now(), req)
	for _, p := range [][2]string{{sub.SASLUsername, req.SASLUsername}, {sub.Sender, req.Sender},
		{sub.ClientAddress, req.ClientAddress}, {sub.ClientName, req.ClientName}, {sub.HeloName, req.HeloName}} {
		if p[0] != p[1] || unsafe.StringData(p[0]) == unsafe.StringData(p[1]) {
			t.Errorf("kept %q shares the request's memory (or differs from %q)", p[0], p[1])
		}
	}
}
