package outcome

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/maillog"
	"github.com/ratelimitd/ratelimitd/policy"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// The join's buckets: queue ID -> entry (encodeEntry), feed name -> position.
var (
	bucketJoin   = []byte("outcome/join")
	bucketCursor = []byte("outcome/cursor")
	joinPath     = []string{"outcome/join"}
	cursorPath   = []string{"outcome/cursor"}
)

const recordVersion = 1

// Defaults of Options; maxClaims bounds the outcomes counted per message:
// smtpd_recipient_limit (1000) recipients, each deferred and bounced.
const (
	DefaultLifetime    = 5 * 24 * time.Hour // Postfix's maximal_queue_lifetime
	DefaultMaxMessages = 500_000
	maxClaims          = 2000
)

// ErrClosed is returned by Tick after Close.
var ErrClosed = errors.New("outcome: join closed")

// Submission is what the join keeps of the request that submitted a
// message: the attributes its rate keys are built from, and when.
type Submission struct {
	Time                      time.Time
	SASLUsername, Sender      string
	ClientAddress, ClientName string
	HeloName                  string
}

// SubmissionOf returns the part of req the join keeps, its strings copied
// so as not to pin a policy Decoder's blocks for days.
func SubmissionOf(now time.Time, req *policy.Request) Submission {
	return Submission{Time: now, SASLUsername: strings.Clone(req.SASLUsername), Sender: strings.Clone(req.Sender),
		ClientAddress: strings.Clone(req.ClientAddress), ClientName: strings.Clone(req.ClientName),
		HeloName: strings.Clone(req.HeloName)}
}

// Request returns the request s stands for, about recipient rcpt, for
// policy.Engine.RecordOutcome.
func (s Submission) Request(rcpt string) *policy.Request {
	return &policy.Request{ProtocolState: policy.StateEndOfMessage, SASLUsername: s.SASLUsername, Sender: s.Sender,
		ClientAddress: s.ClientAddress, ClientName: s.ClientName, HeloName: s.HeloName, Recipient: rcpt}
}

// Options configures a Join; the zero value is the defaults.
type Options struct {
	Lifetime    time.Duration // how long a queue ID is kept after its submission; 0: DefaultLifetime
	MaxMessages int           // the most queue IDs kept; 0: DefaultMaxMessages
}

// Join maps queue IDs to the submissions of their messages, with the
// outcomes counted per message so none counts twice, and the feeds'
// positions. It is written behind to the state file by Tick, claims and
// positions in one transaction. Safe for concurrent use.
type Join struct {
	db   *bolt.DB
	opts Options

	mu       sync.Mutex
	m        map[string]*entry
	cursors  map[string][]byte
	dirty    map[string]struct{} // queue IDs to write or delete
	cdirty   map[string]struct{} // cursors to write
	dropped  int                 // submissions not kept: the join was full
	closed   bool
	sessions map[sessionKey]Submission // Saw's, memory only
	// swept and sessionsSwept: the last sweep of a full m or sessions (sweepDue).
	swept, sessionsSwept time.Time
}

// sessionKey is a client address and a sender, lower case.
type sessionKey struct{ client, sender string }

// sessionWindow is how long after an authenticated request smtpd's
// NOQUEUE rejects of its client and sender are the login's; maxSessions
// bounds the sessions kept.
const (
	sessionWindow = time.Hour
	maxSessions   = 50_000
)

type entry struct {
	sub      Submission
	claims   []claim
	excluded bool // held, frozen or refused (Exclude)
}

// claim is one outcome counted: a recipient's hash and its kind.
type claim struct {
	rcpt uint64
	kind policy.OutcomeKind
}

// NewJoin returns an empty Join kept in memory only (db nil) or in db.
func NewJoin(db *bolt.DB, opts Options) *Join {
	if opts.Lifetime <= 0 {
		opts.Lifetime = DefaultLifetime
	}
	if opts.MaxMessages <= 0 {
		opts.MaxMessages = DefaultMaxMessages
	}
	return &Join{db: db, opts: opts, m: map[string]*entry{}, cursors: map[string][]byte{},
		dirty: map[string]struct{}{}, cdirty: map[string]struct{}{}, sessions: map[sessionKey]Submission{}}
}

// Open returns the Join kept in db, restored; records past their lifetime
// at now or unreadable (statedb.Scan reports those at start) are deleted
// at the first Tick.
func Open(db *bolt.DB, now time.Time, opts Options) (*Join, error) {
	j := NewJoin(db, opts)
	err := db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketJoin); b != nil {
			if err := b.ForEach(func(k, v []byte) error {
				e, err := decodeEntry(k, v)
				if err != nil || now.Sub(e.sub.Time) > j.opts.Lifetime || len(j.m) >= j.opts.MaxMessages {
					j.dirty[string(k)] = struct{}{}
					return nil
				}
				j.m[string(k)] = e
				return nil
			}); err != nil {
				return err
			}
		}
		if b := tx.Bucket(bucketCursor); b != nil {
			return b.ForEach(func(k, v []byte) error {
				if ver, p, err := statedb.Unseal(k, v); err == nil && ver == recordVersion {
					j.cursors[string(k)] = bytes.Clone(p)
				}
				return nil
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outcome: %w", err)
	}
	return j, nil
}

// Record joins queueID to sub, replacing a reused queue ID's, unless
// queueID is excluded. It reports false for an invalid queue ID and when
// the join is full (MaxMessages): that message's outcomes are not counted.
func (j *Join) Record(queueID string, sub Submission) bool {
	if !maillog.ValidQueueID(queueID) {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if e, ok := j.m[queueID]; ok && e.excluded {
		return true
	} else if !ok && len(j.m) >= j.opts.MaxMessages {
		if sweepDue(&j.swept, sub.Time) {
			j.sweep(sub.Time)
		}
		if len(j.m) >= j.opts.MaxMessages {
			j.dropped++
			return false
		}
	}
	j.m[queueID] = &entry{sub: sub}
	j.dirty[queueID] = struct{}{}
	return true
}

// SetSender sets the sender of queueID's submission if it has none (qmgr's
// line names it after smtpd's) and returns that submission.
func (j *Join) SetSender(queueID, sender string) (Submission, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if e, ok := j.m[queueID]; ok && !e.excluded && e.sub.Sender == "" && sender != "" {
		e.sub.Sender = sender
		j.dirty[queueID] = struct{}{}
		return e.sub, true
	}
	return Submission{}, false
}

// Lookup returns the submission joined to queueID.
func (j *Join) Lookup(queueID string) (Submission, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.m[queueID]
	if !ok || e.excluded {
		return Submission{}, false
	}
	return e.sub, true
}

// Exclude marks queueID's message (held, frozen or refused) as not the
// sender's to answer for: its outcomes are not counted, whatever joins it
// later.
func (j *Join) Exclude(queueID string, now time.Time) {
	if !maillog.ValidQueueID(queueID) {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.m[queueID]
	if !ok {
		if len(j.m) >= j.opts.MaxMessages {
			return
		}
		e = &entry{sub: Submission{Time: now}}
		j.m[queueID] = e
	}
	e.excluded = true
	j.dirty[queueID] = struct{}{}
}

// Claim claims an outcome of kind for rcpt (case-insensitive) and returns
// queueID's submission; false when the queue ID is not joined, the outcome
// was claimed before, or the message has maxClaims.
func (j *Join) Claim(queueID, rcpt string, kind policy.OutcomeKind) (Submission, bool) {
	h := fnv.New64a()
	h.Write([]byte(strings.ToLower(rcpt)))
	c := claim{rcpt: h.Sum64(), kind: kind}
	j.mu.Lock()
	defer j.mu.Unlock()
	e, ok := j.m[queueID]
	if !ok || e.excluded || len(e.claims) >= maxClaims || slices.Contains(e.claims, c) {
		return Submission{}, false
	}
	e.claims = append(e.claims, c)
	j.dirty[queueID] = struct{}{}
	return e.sub, true
}

// Forget drops queueID: the message has left the queue.
func (j *Join) Forget(queueID string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.m[queueID]; ok {
		delete(j.m, queueID)
		j.dirty[queueID] = struct{}{}
	}
}

// Saw notes req at now, if it has a SASL login and a client address, for
// Session. A full table (maxSessions) keeps what it has but for the
// expired sessions sweepDue lets it drop.
func (j *Join) Saw(now time.Time, req *policy.Request) {
	if req.SASLUsername == "" || req.ClientAddress == "" {
		return
	}
	sub := SubmissionOf(now, req)
	k := sessionKey{strings.ToLower(sub.ClientAddress), strings.ToLower(sub.Sender)}
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.sessions[k]; !ok && len(j.sessions) >= maxSessions {
		if sweepDue(&j.sessionsSwept, sub.Time) {
			maps.DeleteFunc(j.sessions, func(_ sessionKey, s Submission) bool { return sub.Time.Sub(s.Time) > sessionWindow })
		}
		if len(j.sessions) >= maxSessions {
			return
		}
	}
	j.sessions[k] = sub
}

// Session returns the latest request Saw from clientAddr with sender
// within sessionWindow before now: the login a NOQUEUE reject does not name.
func (j *Join) Session(clientAddr, sender string, now time.Time) (Submission, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s, ok := j.sessions[sessionKey{strings.ToLower(clientAddr), strings.ToLower(sender)}]
	return s, ok && now.Sub(s.Time) <= sessionWindow
}

// Cursor returns the position feed name saved with SetCursor, or nil.
func (j *Join) Cursor(name string) []byte {
	j.mu.Lock()
	defer j.mu.Unlock()
	return bytes.Clone(j.cursors[name])
}

// SetCursor saves feed name's position p, written with the claims before it.
func (j *Join) SetCursor(name string, p []byte) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.cursors[name] = bytes.Clone(p)
	j.cdirty[name] = struct{}{}
}

// Len returns the number of queue IDs joined.
func (j *Join) Len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.m)
}

// Dropped returns the number of submissions not kept because the join was full.
func (j *Join) Dropped() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.dropped
}

// sweepDue reports whether a full table last swept at *last is to be
// swept at now, and notes now if so: at most once a minute, as a sweep is
// O(n) and a full table is asked on every request.
func sweepDue(last *time.Time, now time.Time) bool {
	if d := now.Sub(*last); d < time.Minute && d > -time.Minute {
		return false
	}
	*last = now
	return true
}

// sweep drops queue IDs past their lifetime at now; j.mu held.
func (j *Join) sweep(now time.Time) {
	for id, e := range j.m {
		if now.Sub(e.sub.Time) > j.opts.Lifetime {
			delete(j.m, id)
			j.dirty[id] = struct{}{}
		}
	}
}

// Tick sweeps queue IDs past their lifetime and writes what changed in one
// transaction (statedb.Flusher); a failed write is retried at the next.
func (j *Join) Tick() error { return j.tick(time.Now()) }

func (j *Join) tick(now time.Time) error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	j.sweep(now)
	if j.db == nil || len(j.dirty) == 0 && len(j.cdirty) == 0 {
		j.mu.Unlock()
		return nil
	}
	puts := make(map[string][]byte, len(j.dirty))
	for id := range j.dirty {
		if e, ok := j.m[id]; ok {
			puts[id] = encodeEntry([]byte(id), e)
		} else {
			puts[id] = nil
		}
	}
	cursors := make(map[string][]byte, len(j.cdirty))
	for name := range j.cdirty {
		cursors[name] = statedb.Seal(nil, []byte(name), recordVersion, j.cursors[name])
	}
	dirty, cdirty := j.dirty, j.cdirty
	j.dirty, j.cdirty = map[string]struct{}{}, map[string]struct{}{}
	j.mu.Unlock()

	err := statedb.Update(j.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		jb, err := tx.CreateBucketIfNotExists(bucketJoin)
		if err != nil {
			return err
		}
		cb, err := tx.CreateBucketIfNotExists(bucketCursor)
		if err != nil {
			return err
		}
		t.Ensure(joinPath)
		t.Ensure(cursorPath)
		for id, v := range puts {
			if v == nil {
				err = t.Delete(jb, joinPath, []byte(id))
			} else {
				err = t.Put(jb, joinPath, []byte(id), v)
			}
			if err != nil {
				return err
			}
		}
		for name, v := range cursors {
			if err := t.Put(cb, cursorPath, []byte(name), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		j.mu.Lock()
		maps.Copy(j.dirty, dirty)
		maps.Copy(j.cdirty, cdirty)
		j.mu.Unlock()
		return fmt.Errorf("outcome: %w", err)
	}
	return nil
}

// Close writes a last time; later Ticks return ErrClosed.
func (j *Join) Close() error {
	err := j.tick(time.Now())
	j.mu.Lock()
	j.closed = true
	j.mu.Unlock()
	if err == ErrClosed {
		return nil
	}
	return err
}

// encodeEntry seals e under key: uvarint Unix nanoseconds, each string
// as uvarint length and bytes, uvarint claim count, each claim as 8 bytes
// of recipient hash and its kind, a flags byte (1: excluded).
func encodeEntry(key []byte, e *entry) []byte {
	p := binary.AppendUvarint(nil, uint64(e.sub.Time.UnixNano()))
	for _, s := range e.sub.strings() {
		p = binary.AppendUvarint(p, uint64(len(*s)))
		p = append(p, *s...)
	}
	p = binary.AppendUvarint(p, uint64(len(e.claims)))
	for _, c := range e.claims {
		p = binary.BigEndian.AppendUint64(p, c.rcpt)
		p = append(p, byte(c.kind))
	}
	var flags byte
	if e.excluded {
		flags = 1
	}
	p = append(p, flags)
	return statedb.Seal(nil, key, recordVersion, p)
}

// strings returns s's text attributes in record order.
func (s *Submission) strings() []*string {
	return []*string{&s.SASLUsername, &s.Sender, &s.ClientAddress, &s.ClientName, &s.HeloName}
}

var errRecord = errors.New("outcome: malformed join record")

// decodeEntry is encodeEntry's inverse; errors wrap statedb.ErrRecord or errRecord.
func decodeEntry(key, v []byte) (*entry, error) {
	ver, p, err := statedb.Unseal(key, v)
	if err != nil {
		return nil, err
	}
	if ver != recordVersion {
		return nil, fmt.Errorf("%w: version %d", errRecord, ver)
	}
	e := &entry{}
	ns, n := binary.Uvarint(p)
	if n <= 0 {
		return nil, errRecord
	}
	p = p[n:]
	e.sub.Time = time.Unix(0, int64(ns))
	for _, s := range e.sub.strings() {
		l, n := binary.Uvarint(p)
		if n <= 0 || l > uint64(len(p)-n) {
			return nil, errRecord
		}
		*s = string(p[n : n+int(l)])
		p = p[n+int(l):]
	}
	count, n := binary.Uvarint(p)
	if n <= 0 || count > maxClaims || uint64(len(p)-n) != count*9+1 || p[len(p)-1] > 1 {
		return nil, errRecord
	}
	p = p[n:]
	e.claims = make([]claim, count)
	for i := range e.claims {
		e.claims[i] = claim{rcpt: binary.BigEndian.Uint64(p), kind: policy.OutcomeKind(p[8])}
		p = p[9:]
	}
	e.excluded = p[0] == 1
	return e, nil
}

// Formats describes the join's records for statedb.
func Formats() []statedb.Format {
	return []statedb.Format{
		{Bucket: string(bucketJoin), Check: func(k, v []byte) (int, error) {
			_, err := decodeEntry(k, v)
			return 1, err
		}},
		{Bucket: string(bucketCursor)},
	}
}
