package quarantine

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

func TestFreezeRoundTrip(t *testing.T) {
	clk := &testClock{t: epoch}
	s, _, _ := newStore(t, Options{Now: clk.Now})
	msg := testMessage("hello", "body text\r\nwith\x00binary\xff bytes")
	e := &Entry{
		Limit: "user-hour", Key: "alice", Rate: 250.5, Max: 200,
		Sender: "alice@example.com", Recipients: []string{"bob@example.org", "carol@example.net"},
		ClientAddress: "192.0.2.7", ClientName: "mua.example.com", SASLUsername: "alice",
		Instance: "1a2b.3c4d.1",
	}
	id, err := freeze(s, e, msg)
	if err != nil {
		t.Fatal(err)
	}
	if len(id) != 16 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Errorf("ID %q: want 16 lower-case hex digits", id)
	}
	if e.ID != id || e.State != Frozen || e.Action != "freeze" || e.Size != int64(len(msg)) {
		t.Errorf("entry not completed: %+v", e)
	}
	sum := sha256.Sum256(msg)
	if e.Hash != hex.EncodeToString(sum[:]) {
		t.Errorf("Hash %s", e.Hash)
	}
	if e.Subject != "hello" || e.MessageID != "hello@example.com" {
		t.Errorf("Subject %q MessageID %q", e.Subject, e.MessageID)
	}
	if !e.Created.Equal(epoch) || !e.Updated.Equal(epoch) {
		t.Errorf("times %v %v", e.Created, e.Updated)
	}

	got, err := s.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Created.Equal(e.Created) || !got.Updated.Equal(e.Updated) {
		t.Errorf("times changed: %v %v", got.Created, got.Updated)
	}
	got.Created, got.Updated = e.Created, e.Updated
	if !equalEntry(got, *e) {
		t.Errorf("Get:\n got %+v\nwant %+v", got, *e)
	}
	m, err := s.Message(id)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m, msg) {
		t.Error("message not byte-identical")
	}
	m[0] = 'X' // a copy: must not change what is stored
	if again, _ := s.Message(id); !bytes.Equal(again, msg) {
		t.Error("the stored message changed with the copy")
	}

	if _, err := s.Get("0000000000000000"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get missing: %v", err)
	}
	if _, err := s.Message("nonsense"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Message missing: %v", err)
	}
	if _, err := freeze(s, nil, msg); !errors.Is(err, ErrInvalid) {
		t.Errorf("Freeze(nil): %v", err)
	}
}

func equalEntry(a, b Entry) bool {
	a.Created, a.Updated, b.Created, b.Updated = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

func TestFreezeEmptyAndNonFinite(t *testing.T) {
	s, _, _ := newStore(t, Options{})
	id, err := freeze(s, &Entry{Rate: math.Inf(1), Max: math.NaN()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.Message(id)
	if err != nil || len(m) != 0 {
		t.Fatalf("empty message: %q %v", m, err)
	}
	e, _ := s.Get(id)
	if e.Rate != math.MaxFloat64 || e.Max != 0 {
		t.Errorf("Rate %v Max %v", e.Rate, e.Max)
	}
}

func TestFreezeLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("50 MB")
	}
	s, db, path := newStore(t, Options{MaxSize: 60 << 20})
	msg := make([]byte, 50<<20)
	rand.NewChaCha8([32]byte{1}).Read(msg)
	copy(msg, "Subject: big\r\n\r\n")
	id, err := freeze(s, &Entry{Sender: "big@example.com"}, msg)
	if err != nil {
		t.Fatal(err)
	}
	// The limit counts it: another 20 MB does not fit.
	if _, err := freeze(s, &Entry{}, msg[:20<<20]); !errors.Is(err, ErrFull) {
		t.Fatalf("second freeze: %v", err)
	}
	db.Close()

	s, err = New(openDB(t, path), Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.Message(id)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatal("50 MB message changed")
	}
	e, _ := s.Get(id)
	if e.Subject != "big" || e.Size != 50<<20 {
		t.Errorf("entry %+v", e)
	}
	if err := s.MarkThawed(id, "", ""); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(); st.Bytes != 50<<20 {
		t.Errorf("bytes after thaw: %d, want the message kept", st.Bytes)
	}
	if n, err := s.SweepThawed(time.Now()); n != 1 || err != nil {
		t.Fatalf("SweepThawed: %d %v", n, err)
	}
	if st, _ := s.Stats(); st.Bytes != 0 {
		t.Errorf("bytes after the sweep: %d", st.Bytes)
	}
}

func TestFull(t *testing.T) {
	s, _, _ := newStore(t, Options{MaxSize: 1000})
	a, err := freeze(s, &Entry{Key: "a"}, bytes.Repeat([]byte("a"), 600))
	if err != nil {
		t.Fatal(err)
	}
	e := &Entry{Key: "b"}
	_, err = freeze(s, e, bytes.Repeat([]byte("b"), 500))
	if !errors.Is(err, ErrFull) {
		t.Fatalf("want ErrFull, got %v", err)
	}
	if e.ID != "" || e.State != 0 {
		t.Errorf("caller's entry changed on failure: %+v", e)
	}
	all, _ := s.List(Filter{States: []State{Held, Frozen, Thawed, Deleted}})
	st, _ := s.Stats()
	if len(all) != 1 || st.Bytes != 600 || st.Frozen != 1 {
		t.Fatalf("half-stored: %d entries, %+v", len(all), st)
	}
	// A message larger than the whole limit never fits.
	if _, err := freeze(s, &Entry{}, make([]byte, 1001)); !errors.Is(err, ErrFull) {
		t.Errorf("oversize: %v", err)
	}
	// Held entries take no room.
	if _, err := hold(s, &Entry{Key: "h"}); err != nil {
		t.Errorf("Hold when full: %v", err)
	}
	// Thawing, once the kept message is swept, frees the room.
	if err := s.MarkThawed(a, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := freeze(s, &Entry{Key: "b"}, bytes.Repeat([]byte("b"), 500)); !errors.Is(err, ErrFull) {
		t.Errorf("Freeze while a thawed message is kept: %v", err)
	}
	if _, err := s.SweepThawed(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := freeze(s, &Entry{Key: "b"}, bytes.Repeat([]byte("b"), 500)); err != nil {
		t.Fatalf("after thaw: %v", err)
	}
	if st, _ := s.Stats(); st.Bytes != 500 {
		t.Errorf("bytes %d", st.Bytes)
	}
}

func TestList(t *testing.T) {
	clk := &testClock{t: epoch}
	s, _, _ := newStore(t, Options{Now: clk.Now})
	type rec struct {
		sender, key, limit string
		hold               bool
	}
	recs := []rec{
		{"alice@example.com", "alice", "hour", false},
		{"bob@example.com", "bob", "hour", true},
		{"Alice@Example.com", "alice", "day", false},
		{"carol@example.com", "carol", "day", false},
		{"alice@example.com", "alice", "hour", true},
	}
	var ids []string
	for _, r := range recs {
		e := &Entry{Sender: r.sender, Key: r.key, Limit: r.limit}
		var id string
		var err error
		if r.hold {
			id, err = hold(s, e)
		} else {
			id, err = freeze(s, e, testMessage("m", "x"))
		}
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		clk.Advance(time.Minute)
	}
	if !slices.IsSorted(ids) {
		t.Errorf("IDs not in creation order: %v", ids)
	}
	// ids[3] thawed, ids[1] deleted: no longer pending.
	if err := s.MarkThawed(ids[3], "", ""); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ids[1]); err != nil {
		t.Fatal(err)
	}

	list := func(f Filter) []string {
		t.Helper()
		es, err := s.List(f)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    Filter
		want []string
	}{
		{"default pending newest first", Filter{}, []string{ids[4], ids[2], ids[0]}},
		{"oldest first", Filter{OldestFirst: true}, []string{ids[0], ids[2], ids[4]}},
		{"sender case-insensitive", Filter{Sender: "ALICE@example.com"}, []string{ids[4], ids[2], ids[0]}},
		{"key", Filter{Key: "alice", States: []State{Frozen}}, []string{ids[2], ids[0]}},
		{"limit", Filter{Limit: "hour"}, []string{ids[4], ids[0]}},
		{"state thawed", Filter{States: []State{Thawed}}, []string{ids[3]}},
		{"state deleted+held", Filter{States: []State{Deleted, Held}}, []string{ids[4], ids[1]}},
		{"all states", Filter{States: []State{Held, Frozen, Thawed, Deleted}}, []string{ids[4], ids[3], ids[2], ids[1], ids[0]}},
		{"since", Filter{Since: epoch.Add(2 * time.Minute)}, []string{ids[4], ids[2]}},
		{"since mid-minute", Filter{Since: epoch.Add(90 * time.Second), OldestFirst: true}, []string{ids[2], ids[4]}},
		{"before", Filter{Before: epoch.Add(2 * time.Minute)}, []string{ids[0]}},
		{"before is exclusive", Filter{Before: epoch.Add(2*time.Minute + time.Nanosecond), OldestFirst: true}, []string{ids[0], ids[2]}},
		{"since+before", Filter{Since: epoch.Add(time.Minute), Before: epoch.Add(5 * time.Minute), States: []State{Held, Frozen, Thawed, Deleted}}, []string{ids[4], ids[3], ids[2], ids[1]}},
		{"max", Filter{Max: 2}, []string{ids[4], ids[2]}},
		{"max oldest", Filter{Max: 1, OldestFirst: true}, []string{ids[0]}},
		{"no match", Filter{Key: "nobody"}, nil},
		{"far future since", Filter{Since: epoch.Add(time.Hour)}, nil},
		{"far past before", Filter{Before: epoch.Add(-time.Hour)}, nil},
	} {
		if got := list(tc.f); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestStateTransitions(t *testing.T) {
	clk := &testClock{t: epoch}
	s, _, _ := newStore(t, Options{Now: clk.Now})
	msg := testMessage("t", "body")
	f1, _ := freeze(s, &Entry{Key: "k"}, msg)
	f2, _ := freeze(s, &Entry{Key: "k"}, msg)
	h1, _ := hold(s, &Entry{Key: "k", QueueID: "4ABC123"})

	clk.Advance(time.Minute)
	if err := s.RecordThawError(f1, "451 4.3.0 try later"); err != nil {
		t.Fatal(err)
	}
	e, _ := s.Get(f1)
	if e.State != Frozen || e.Attempts != 1 || e.Error != "451 4.3.0 try later" || !e.Updated.Equal(epoch.Add(time.Minute)) {
		t.Errorf("after thaw error: %+v", e)
	}
	if _, err := s.Message(f1); err != nil {
		t.Errorf("content gone after a thaw error: %v", err)
	}
	if err := s.MarkThawed(f1, "", ""); err != nil {
		t.Fatal(err)
	}
	e, _ = s.Get(f1)
	if e.State != Thawed || e.Attempts != 2 || e.Hash == "" {
		t.Errorf("after thaw: %+v", e)
	}
	if got, err := s.Message(f1); err != nil || !bytes.Equal(got, msg) {
		t.Errorf("kept thawed content: %v", err)
	}
	if n, err := s.SweepThawed(clk.Now().Add(-time.Second)); n != 0 || err != nil {
		t.Errorf("SweepThawed before the thaw: %d %v", n, err)
	}
	if n, err := s.SweepThawed(clk.Now()); n != 1 || err != nil {
		t.Errorf("SweepThawed: %d %v", n, err)
	}
	if _, err := s.Message(f1); !errors.Is(err, ErrNoContent) {
		t.Errorf("swept thawed content: %v", err)
	}
	if err := s.Delete(f2); err != nil {
		t.Fatal(err)
	}
	if e, _ = s.Get(f2); e.State != Deleted {
		t.Errorf("after delete: %v", e.State)
	}
	if _, err := s.Message(f2); !errors.Is(err, ErrNoContent) {
		t.Errorf("deleted content: %v", err)
	}
	if _, err := s.Message(h1); !errors.Is(err, ErrNoContent) {
		t.Errorf("held content: %v", err)
	}
	if err := s.MarkThawed(h1, "", ""); err != nil {
		t.Errorf("thaw held: %v", err)
	}

	// No transitions out of thawed or deleted.
	for _, id := range []string{f1, f2, h1} {
		if err := s.MarkThawed(id, "", ""); !errors.Is(err, ErrState) {
			t.Errorf("MarkThawed(%s): %v", id, err)
		}
		if err := s.Delete(id); !errors.Is(err, ErrState) {
			t.Errorf("Delete(%s): %v", id, err)
		}
		if err := s.RecordThawError(id, "x"); !errors.Is(err, ErrState) {
			t.Errorf("RecordThawError(%s): %v", id, err)
		}
	}
	for _, err := range []error{s.MarkThawed("ffffffffffffffff", "", ""), s.Delete("x"), s.RecordThawError("x", "")} {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("missing entry: %v", err)
		}
	}

	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Frozen != 0 || st.Thawed != 2 || st.Deleted != 1 || st.Held != 0 || st.Bytes != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestHoldAndQueueID(t *testing.T) {
	s, _, _ := newStore(t, Options{})
	// RCPT stage: two recipients of one message over the limit.
	a, _ := hold(s, &Entry{Key: "alice", Instance: "8f1.6a3c2b.1", Recipients: []string{"x@example.org"}})
	b, _ := hold(s, &Entry{Key: "alice", Instance: "8f1.6a3c2b.1", Recipients: []string{"y@example.org"}})
	other, _ := hold(s, &Entry{Key: "bob", Instance: "8f1.6a3c2b.2"})
	// END-OF-MESSAGE: the queue ID is known.
	// One queue ID is never two entries: the oldest gets it.
	r, err := s.RecordHold(&Entry{Instance: "8f1.6a3c2b.1", QueueID: "4F2A12345", Size: 900, Recipients: []string{"z@example.org"}}, true)
	if err != nil || r.ID != a || !r.Added {
		t.Fatalf("RecordHold(addOnly): %+v %v", r, err)
	}
	if e, _ := s.Get(a); e.QueueID != "4F2A12345" || e.Size != 900 || !slices.Equal(e.Recipients, []string{"x@example.org", "z@example.org"}) {
		t.Errorf("%s: %+v", a, e)
	}
	if e, _ := s.Get(b); e.QueueID != "" {
		t.Errorf("%s: queue ID %q, the other entry of the instance has it", b, e.QueueID)
	}
	if e, _ := s.Get(other); e.QueueID != "" {
		t.Errorf("other instance got queue ID %q", e.QueueID)
	}
	// A later request of the message adds its recipient to the entry
	// of the queue ID; none of an unknown instance makes an entry.
	if r, err := s.RecordHold(&Entry{Instance: "8f1.6a3c2b.1", QueueID: "4F2A12345", Recipients: []string{"X@example.org", "w@example.org"}}, false); err != nil || r.ID != a {
		t.Errorf("RecordHold of the same message: %+v %v", r, err)
	}
	if e, _ := s.Get(a); len(e.Recipients) != 3 {
		t.Errorf("recipients %v", e.Recipients)
	}
	if r, _ := s.RecordHold(&Entry{Instance: "unknown", QueueID: "5F2A12345"}, true); r.ID != "" {
		t.Errorf("unknown instance: %+v", r)
	}
	// Without a queue ID a hold is never joined to another (a forged
	// queue ID was dropped: each HOLD has its entry).
	if r, _ := s.RecordHold(&Entry{Key: "alice", Instance: "8f1.6a3c2b.1"}, false); r.Added {
		t.Errorf("joined without a queue ID: %+v", r)
	}
	if r, err := s.RecordHold(&Entry{Key: "carol", Instance: "unknown", QueueID: "5F2A12345"}, false); err != nil || r.Added || r.ID == "" {
		t.Errorf("RecordHold of a new message: %+v %v", r, err)
	}
	// Expiry removes the index entry.
	if err := s.Delete(a); err != nil {
		t.Fatal(err)
	}
	if n, _, err := s.Expire(time.Now().Add(48*time.Hour), time.Hour); err != nil || n != 1 {
		t.Fatalf("Expire: %d, %v", n, err)
	}
	if r, _ := s.RecordHold(&Entry{Instance: "8f1.6a3c2b.1", QueueID: "6F2A12345"}, true); r.ID != b {
		t.Errorf("after expiry: %+v", r)
	}
}

func TestExpire(t *testing.T) {
	clk := &testClock{t: epoch}
	s, _, _ := newStore(t, Options{Now: clk.Now})
	var ids []string
	var sizes []int64
	for i := range 6 {
		msg := bytes.Repeat([]byte{'x'}, 100*(i+1))
		id, err := freeze(s, &Entry{}, msg)
		if err != nil {
			t.Fatal(err)
		}
		ids, sizes = append(ids, id), append(sizes, int64(len(msg)))
		clk.Advance(time.Hour)
	}
	h, _ := hold(s, &Entry{Instance: "i1"}) // created at epoch+6h
	s.MarkThawed(ids[1], "", "")
	s.SweepThawed(epoch.Add(6 * time.Hour)) // its bytes are gone
	s.Delete(ids[2])

	// Entries created at epoch, +1h, +2h, +3h are at least 3h old at +6h,
	// but only audit records go (thawed ids[1], deleted ids[2]: pending
	// mail is never forgotten by Expire), and only 3h after their thaw or
	// delete (at +6h).
	if n, _, _ := s.Expire(epoch.Add(6*time.Hour), 3*time.Hour); n != 0 {
		t.Errorf("Expire removed %d audit records changed just now", n)
	}
	n, freed, err := s.Expire(epoch.Add(9*time.Hour), 3*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || freed != 0 {
		t.Errorf("Expire: n=%d freed=%d, want 2 and 0", n, freed)
	}
	all, _ := s.List(Filter{States: []State{Held, Frozen, Thawed, Deleted}, OldestFirst: true})
	var left []string
	for _, e := range all {
		left = append(left, e.ID)
	}
	if want := []string{ids[0], ids[3], ids[4], ids[5], h}; !slices.Equal(left, want) {
		t.Errorf("left %v, want %v", left, want)
	}
	st, _ := s.Stats()
	if st.Bytes != sizes[0]+sizes[3]+sizes[4]+sizes[5] {
		t.Errorf("bytes %d", st.Bytes)
	}
	if n, _, _ := s.Expire(epoch.Add(9*time.Hour), 3*time.Hour); n != 0 {
		t.Errorf("second Expire removed %d", n)
	}
	if _, _, err := s.Expire(epoch, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("zero age: %v", err)
	}
	if n, _, _ = s.Expire(epoch.Add(100*time.Hour), time.Hour); n != 0 {
		t.Errorf("expire removed %d pending entries", n)
	}
}

// TestClaim: one claim per entry and process; a claim left by a stopped
// process is taken over for held mail and refused for frozen mail unless
// forced; the state transitions drop the claim.
func TestClaim(t *testing.T) {
	s, _, _ := newStore(t, Options{})
	f, _ := freeze(s, &Entry{Key: "k"}, []byte("x"))
	h, _ := hold(s, &Entry{Key: "k", QueueID: "4F2A12345"})
	if e, err := s.Claim(f, "p1", false, false); err != nil || e.Claim != "p1" {
		t.Fatalf("first claim: %+v %v", e, err)
	}
	if _, err := s.Claim(f, "p1", false, false); !errors.Is(err, ErrBusy) {
		t.Fatalf("second claim by the same process: %v, want ErrBusy", err)
	}
	if _, err := s.Claim(f, "p2", false, false); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("claim of an interrupted frozen entry: %v, want ErrInterrupted", err)
	}
	if e, err := s.Claim(f, "p2", true, false); err != nil || e.Claim != "p2" {
		t.Fatalf("forced claim: %+v %v", e, err)
	}
	if err := s.RecordThawError(f, "451 later"); err != nil {
		t.Fatal(err)
	}
	if e, _ := s.Get(f); e.Claim != "" || e.Error != "451 later" {
		t.Fatalf("after RecordThawError: %+v", e)
	}
	if _, err := s.Claim(h, "p1", false, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(h, "p2", false, false); err != nil {
		t.Fatalf("held entry claimed by a stopped process: %v, want taken over", err)
	}
	if err := s.Unclaim(h, "p2", "postsuper failed"); err != nil {
		t.Fatal(err)
	}
	if e, _ := s.Get(h); e.Claim != "" || e.Error != "postsuper failed" {
		t.Fatalf("after Unclaim: %+v", e)
	}
	s.Claim(h, "p1", false, false)
	if err := s.MarkThawed(h, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(h, "p1", false, false); !errors.Is(err, ErrState) {
		t.Fatalf("claim of a thawed entry: %v", err)
	}
}

func TestSuspend(t *testing.T) {
	s, _, path := newStore(t, Options{})
	if _, err := s.Suspend("alice", "root", false); err != nil {
		t.Fatal(err)
	}
	s.Suspend("bob", "root", false)
	if ok, err := s.Suspend("bob", "", true); !ok || err != nil {
		t.Fatalf("resume bob: %v %v", ok, err)
	}
	if ok, _ := s.Suspend("carol", "", true); ok {
		t.Fatal("resumed a key never suspended")
	}
	s.db.Close()
	s2, db2 := openFile(t, path, true)
	defer db2.Close()
	sp, err := s2.Suspended()
	if err != nil || len(sp) != 1 || sp["alice"].By != "root" {
		t.Fatalf("suspended after reopen: %v %v", sp, err)
	}
}

func TestStats(t *testing.T) {
	clk := &testClock{t: epoch}
	s, _, _ := newStore(t, Options{Now: clk.Now})
	for range 3 {
		freeze(s, &Entry{Key: "alice"}, []byte("12345"))
		clk.Advance(time.Second)
	}
	hold(s, &Entry{Key: "alice"})
	hold(s, &Entry{Key: "bob"})
	id, _ := freeze(s, &Entry{Key: "carol"}, []byte("1"))
	s.Delete(id)
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Frozen != 3 || st.Held != 2 || st.Deleted != 1 || st.Thawed != 0 || st.Bytes != 15 {
		t.Errorf("stats %+v", st)
	}
	if st.ByKey["alice"] != 4 || st.ByKey["bob"] != 1 || len(st.ByKey) != 2 {
		t.Errorf("ByKey %v", st.ByKey)
	}
	if !st.Oldest.Equal(epoch) {
		t.Errorf("Oldest %v", st.Oldest)
	}
}

func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	s, db := openFile(t, path, false)
	msgs := map[string][]byte{}
	for i := range 5 {
		msg := testMessage("m"+strings.Repeat("x", i), strings.Repeat("line\r\n", 100*i))
		id, err := freeze(s, &Entry{Key: "k", Instance: "inst"}, msg)
		if err != nil {
			t.Fatal(err)
		}
		msgs[id] = msg
	}
	held, _ := hold(s, &Entry{Key: "h"})

	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	for _, ro := range []bool{false, true} {
		s, db = openFile(t, path, ro)
		for id, msg := range msgs {
			got, err := s.Message(id)
			if err != nil || !bytes.Equal(got, msg) {
				t.Errorf("ro=%v %s: %v", ro, id, err)
			}
		}
		if e, err := s.Get(held); err != nil || e.State != Held {
			t.Errorf("ro=%v held: %+v %v", ro, e, err)
		}
		if es, _ := s.List(Filter{}); len(es) != 6 {
			t.Errorf("ro=%v list: %d", ro, len(es))
		}
		if ro {
			if err := s.Delete(held); err == nil {
				t.Error("Delete on a read-only store succeeded")
			}
		}
		db.Close()
	}
	checkFile(t, path)
}

func TestReadOnlyEmpty(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.db")
	db := openDB(t, path) // a daemon file that never had a quarantine
	db.Close()
	s, ro := openFile(t, path, true)
	defer ro.Close()
	if es, err := s.List(Filter{}); err != nil || len(es) != 0 {
		t.Errorf("List: %v %v", es, err)
	}
	if _, err := s.Get("0123456789abcdef"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get: %v", err)
	}
	if st, err := s.Stats(); err != nil || st.Frozen != 0 {
		t.Errorf("Stats: %+v %v", st, err)
	}
}

func TestNoSyncRefused(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "q.db"))
	db.NoSync = true
	if _, err := New(db, Options{}); !errors.Is(err, ErrNoSync) {
		t.Errorf("New with NoSync: %v", err)
	}
	db.NoSync = false
}

func TestRepairByteCounter(t *testing.T) {
	s, db, _ := newStore(t, Options{})
	freeze(s, &Entry{}, []byte("0123456789"))
	statedb.Update(db, func(tx *bolt.Tx, m *statedb.Tally) error { return putBytes(m, tx.Bucket(bucketInfo), 12345) })
	s, err := New(db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(); st.Bytes != 10 {
		t.Errorf("counter not repaired: %d", st.Bytes)
	}
}

func TestCorruptMessage(t *testing.T) {
	s, db, _ := newStore(t, Options{})
	id, _ := freeze(s, &Entry{}, []byte("original"))
	flipMessageByte(t, db, id, 0)
	if _, err := s.Message(id); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Message of a tampered body: %v", err)
	}
	// Restore for the cleanup check.
	flipMessageByte(t, db, id, 0)
}

func TestConcurrentFreeze(t *testing.T) {
	s, _, _ := newStore(t, Options{})
	const workers, each = 8, 15
	var mu sync.Mutex
	ids := map[string][]byte{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				msg := testMessage("w", strings.Repeat(string(rune('a'+w)), 100+i))
				id, err := freeze(s, &Entry{Key: string(rune('a' + w))}, msg)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if _, dup := ids[id]; dup {
					t.Errorf("duplicate ID %s", id)
				}
				ids[id] = msg
				mu.Unlock()
				if i%5 == 0 {
					if _, err := s.List(Filter{Max: 3}); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(ids) != workers*each {
		t.Fatalf("%d IDs", len(ids))
	}
	for id, msg := range ids {
		got, err := s.Message(id)
		if err != nil || !bytes.Equal(got, msg) {
			t.Errorf("%s: %v", id, err)
		}
	}
	st, _ := s.Stats()
	if st.Frozen != workers*each || len(st.ByKey) != workers {
		t.Errorf("stats %+v", st)
	}
}

func TestSubjectDecoding(t *testing.T) {
	for _, tc := range []struct {
		name, header, subject string
	}{
		{"plain", "Subject: Hello world\r\n", "Hello world"},
		{"utf-8 Q", "Subject: =?UTF-8?Q?Gr=C3=BC=C3=9Fe_aus_K=C3=B6ln?=\r\n", "Grüße aus Köln"},
		{"utf-8 B", "Subject: =?utf-8?B?0J/RgNC40LLQtdGC?=\r\n", "Привет"},
		{"iso-8859-1 folded", "Subject: =?ISO-8859-1?Q?Caf=E9?=\r\n =?ISO-8859-1?Q?_cr=E8me?=\r\n", "Café crème"},
		{"koi8-r via go-message/charset", "Subject: =?koi8-r?B?8NLJ18XU?=\r\n", "Привет"},
		{"mixed", "Subject: Re: =?utf-8?q?=E2=82=AC?= 100\r\n", "Re: € 100"},
		{"unknown charset kept raw", "Subject: =?x-unknown?Q?abc?=\r\n", "=?x-unknown?Q?abc?="},
		{"escape sequences removed", "Subject: \x1b[31mred\x1b[0m\r\n", "\uFFFD[31mred\uFFFD[0m"},
		{"LF only", "Subject: lf\n", "lf"},
		{"garbage before", "From alice@example.com Sun Mar  1 12:00:00 2026\r\nnot a header\r\n bogus continuation\r\nSubject: still found\r\n", "still found"},
		{"no subject", "From: a@example.com\r\n", ""},
	} {
		msg := []byte(tc.header + "X-Other: y\r\n\r\nSubject: not this, it is the body\r\n")
		subject, _ := HeaderInfo(msg)
		if subject != tc.subject {
			t.Errorf("%s: subject %q, want %q", tc.name, subject, tc.subject)
		}
	}

	// Broken and binary input still freezes.
	s, _, _ := newStore(t, Options{})
	for _, msg := range [][]byte{
		[]byte("\x00\x01\x02 garbage without header"),
		[]byte(":\r\n: :\r\n\r\n"),
		[]byte("Subject: " + strings.Repeat("long ", 2000) + "\r\n\r\n"),
		bytes.Repeat([]byte("X-Long: a\r\n"), 200000), // header > 1 MB, no body
	} {
		e := &Entry{}
		if _, err := freeze(s, e, msg); err != nil {
			t.Errorf("Freeze garbage: %v", err)
		}
		if len(e.Subject) > maxSubjectBytes {
			t.Errorf("subject of %d bytes", len(e.Subject))
		}
	}
}

func TestParseState(t *testing.T) {
	for s := Held; s <= Deleted; s++ {
		got, err := ParseState(strings.ToUpper(s.String()))
		if err != nil || got != s {
			t.Errorf("ParseState(%s): %v %v", s, got, err)
		}
	}
	if _, err := ParseState("thawing"); !errors.Is(err, ErrInvalid) {
		t.Errorf("unknown state: %v", err)
	}
	if State(9).String() != "state(9)" {
		t.Error(State(9).String())
	}
}

func TestEntryWriteTo(t *testing.T) {
	e := Entry{
		ID: "0123456789abcdef", State: Frozen, Created: epoch, Key: "alice", Rate: 250, Max: 200,
		Sender: "alice@example.com", Recipients: []string{"b@example.org"}, ClientAddress: "192.0.2.1",
		ClientName: "mua", Subject: "hi\x1b[2J", Attempts: 1, Error: "451 busy",
	}
	var b strings.Builder
	e.WriteTo(&b)
	out := b.String()
	for _, want := range []string{"ID:             0123456789abcdef\n", "State:          frozen\n", "Rate:           250 / 200\n",
		"Client:         mua[192.0.2.1]\n", "Subject:        hi\uFFFD[2J\n", "Last error:     451 busy\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") {
		t.Error("escape character written")
	}
}

// LinkQueueID gives a held entry without a queue ID the one found in the
// MTA's queue, once, and never a queue ID another pending entry names.
func TestLinkQueueID(t *testing.T) {
	s, _, _ := newStore(t, Options{})
	a, _ := hold(s, &Entry{Key: "k", Sender: "a@example.org"})
	b, _ := hold(s, &Entry{Key: "k", Sender: "a@example.org"})
	if err := s.LinkQueueID(a, "ALL"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid queue ID: %v", err)
	}
	if err := s.LinkQueueID(a, "4ABC123DEF"); err != nil {
		t.Fatal(err)
	}
	if e, _ := s.Get(a); e.QueueID != "4ABC123DEF" {
		t.Fatalf("queue ID %q", e.QueueID)
	}
	if err := s.LinkQueueID(b, "4ABC123DEF"); !errors.Is(err, ErrState) {
		t.Fatalf("a queue ID taken by another entry: %v", err)
	}
	if err := s.LinkQueueID(a, "5ABC123DEF"); !errors.Is(err, ErrState) {
		t.Fatalf("relinking an entry: %v", err)
	}
}
