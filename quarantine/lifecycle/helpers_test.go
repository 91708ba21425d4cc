package lifecycle

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/internal/mtatest"
	"github.com/ratelimitd/ratelimitd/mailout"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/quarantine"
)

// syncBuffer is a log sink safe for concurrent writes (mtatest.SyncBuffer).
type syncBuffer = mtatest.SyncBuffer

// recorder is an Events that keeps every event.
type recorder struct {
	mu  sync.Mutex
	evs []Event
}

func (r *recorder) QuarantineEvent(_ context.Context, ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

func (r *recorder) kinds() map[Kind]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[Kind]int{}
	for _, e := range r.evs {
		m[e.Kind]++
	}
	return m
}

type env struct {
	svc  *Service
	q    *quarantine.Store
	ev   *recorder
	logs *syncBuffer
}

// newEnv returns a Service on a fresh BoltDB file, checked with bbolt's
// consistency check when the test ends.
func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ratelimitd.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				return err
			}
			return nil
		}); err != nil {
			t.Errorf("bbolt check: %v", err)
		}
		db.Close()
	})
	q, err := quarantine.New(db, quarantine.Options{Now: opts.Now})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{q: q, ev: &recorder{}, logs: &syncBuffer{}}
	opts.Events = e.ev
	opts.Logger = slog.New(slog.NewTextHandler(e.logs, nil))
	if e.svc, err = New(q, opts); err != nil {
		t.Fatal(err)
	}
	return e
}

// freeze stores n frozen messages from sender and returns their IDs.
func (e *env) freeze(t *testing.T, sender string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		msg := mtatest.BuildMessage(sender, "rcpt@example.net", fmt.Sprintf("message %02d", i), "hello\n")
		id, err := e.svc.Record(context.Background(), Message{Request: &policy.Request{Sender: sender, SASLUsername: "alice"}, Recipients: []string{"rcpt@example.net"}, Body: bytes.NewReader(msg)},
			&policy.Decision{Action: policy.Freeze, Limit: "tenfreeze", Key: "alice", Rate: 11, Max: 10})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func reinjector(addr string) *mailout.Reinjector {
	return &mailout.Reinjector{Addr: addr, Helo: "lifecycle.test", Timeout: 10 * time.Second}
}

// listCommand is a Queue.ListCommand printing msgs as postqueue -j does
// (one JSON object a line): each held message from alice@example.org to
// rcpt@example.net, arrived at its time.
func listCommand(msgs map[string]time.Time) []string {
	cmd := []string{"printf", "%s\\n"}
	for qid, arrived := range msgs {
		cmd = append(cmd, fmt.Sprintf(`{"queue_name":"hold","queue_id":%q,"arrival_time":%d,"sender":"alice@example.org",`+
			`"recipients":[{"address":"rcpt@example.net"}]}`, qid, arrived.Unix()))
	}
	return cmd
}

// expireCounts is what one Expire run did: messages bounced, deleted
// (null sender), kept past max_age.
type expireCounts struct{ Bounced, NullSender, Kept int }

// expire runs Expire and reads its counters' growth and Health's kept.
func (e *env) expire(now time.Time) expireCounts {
	count := func(o string) int { return int(testutil.ToFloat64(e.svc.m.expired.WithLabelValues(o))) }
	b, n := count("bounced"), count("deleted_null_sender")
	e.svc.Expire(context.Background(), now)
	return expireCounts{count("bounced") - b, count("deleted_null_sender") - n, e.svc.Health().KeptPastMaxAge}
}
