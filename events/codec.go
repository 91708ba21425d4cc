package events

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// MaxField is the most bytes of a stored string field; a longer one is
// cut at a character boundary and ends in a marker (Clip).
const MaxField = 256

// MaxRecord bounds the bytes of one stored event, key and BoltDB's
// element header included, whatever its fields hold.
const MaxRecord = keyLen + 16 + 1 + 8*(2+MaxField) + 28 + 4

// formatVersion is the event record version and log format (events/meta).
const formatVersion = 3

// keyLen is the length of a record's key: class, time and sequence.
const keyLen = 17

// IDLen is the length of an Event.ID: the record's key in hex.
const IDLen = 2 * keyLen

// ErrCorrupt is wrapped by Query's and Summary's error for a bad record.
var ErrCorrupt = errors.New("events: corrupt record")

// recordKey returns the key of an event of class c at t (before 1970:
// 1970), seq.
func recordKey(c class, t time.Time, seq uint64) []byte {
	k := make([]byte, keyLen)
	k[0] = byte(c)
	binary.BigEndian.PutUint64(k[1:], uint64(max(t.UnixNano(), 0)))
	binary.BigEndian.PutUint64(k[9:], seq)
	return k
}

// keyTime returns the time a record key holds.
func keyTime(k []byte) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64(k[1:])))
}

// timeKey is the smallest key of an event of class c at t or later.
func timeKey(c class, t time.Time) []byte { return recordKey(c, t, 0) }

// parseID returns the record key an Event.ID names.
func parseID(id string) ([]byte, error) {
	k, err := hex.DecodeString(id)
	if err != nil || len(k) != keyLen || k[0] >= numClasses {
		return nil, fmt.Errorf("events: invalid event ID %q", id)
	}
	return k, nil
}

// clipMarker ends a clipped field; the bytes cut follow it in decimal.
const clipMarker = "…[+"

// Clip returns s if it has at most MaxField bytes, else its longest
// prefix (cut at a character boundary) followed by "…[+N]", N the bytes
// cut, within MaxField bytes in all. Every string field of an Event is
// stored through Clip.
func Clip(s string) string {
	if len(s) <= MaxField {
		return s
	}
	// The marker's length depends on N; N <= len(s) bounds it.
	i := MaxField - len(clipMarker) - len(strconv.Itoa(len(s))) - 1
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + clipMarker + strconv.Itoa(len(s)-i) + "]"
}

// Offsets, from a record's end, of the fixed-size fields before the
// checksum: count (uint32), last (Unix ns), rate and max (IEEE 754 bits),
// all big-endian.
const (
	offCount = 4 + 8 + 8 + 8 + 4
	offLast  = offCount - 4
	offRate  = offLast - 8
)

// maxCount is where a coalesced record's count saturates.
const maxCount = math.MaxUint32

// encode appends e's record (class and time in the key) to b, room left
// for seal; Count 0 is stored as 1, Last zero as Time.
func encode(b []byte, e *Event) []byte {
	b = append(b, formatVersion)
	for _, s := range [...]string{e.Key, e.Limit, e.Action, e.Sender, e.Client, e.QueueID, e.By, e.Detail} {
		s = Clip(s)
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(min(max(e.Count, 1), maxCount)))
	last := e.Last
	if last.Before(e.Time) {
		last = e.Time
	}
	b = binary.BigEndian.AppendUint64(b, uint64(max(last.UnixNano(), 0)))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(e.Rate))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(e.Max))
	return append(b, 0, 0, 0, 0)
}

// patch overwrites record rec's count, last and rate (a coalesced
// refusal's totals); seal it again after.
func patch(rec []byte, count uint32, last int64, rate float64) {
	n := len(rec)
	binary.BigEndian.PutUint32(rec[n-offCount:], count)
	binary.BigEndian.PutUint64(rec[n-offLast:], uint64(last))
	binary.BigEndian.PutUint64(rec[n-offRate:], math.Float64bits(rate))
}

// seal writes the checksum of the record rec (encode's) stored under key.
func seal(key, rec []byte) {
	binary.BigEndian.PutUint32(rec[len(rec)-4:], statedb.Sum(key, rec[:len(rec)-4]))
}

// recordBody returns record v's checked body; the error wraps ErrCorrupt.
func recordBody(k, v []byte) ([]byte, error) {
	if _, _, err := statedb.Unseal(k, v); err != nil {
		return nil, fmt.Errorf("%w: event %x: %w", ErrCorrupt, k, err)
	}
	return v[:len(v)-4], nil
}

// decoder reads a record's fields in order.
type decoder struct {
	b   []byte
	err error
}

// field returns the next string field's bytes (a slice of the record).
func (d *decoder) field() []byte {
	if d.err != nil {
		return nil
	}
	n, w := binary.Uvarint(d.b)
	if w <= 0 || n > uint64(len(d.b)-w) {
		d.err = ErrCorrupt
		return nil
	}
	s := d.b[w : w+int(n)]
	d.b = d.b[w+int(n):]
	return s
}

func (d *decoder) str() string { return string(d.field()) }

// match skips a string field, reporting whether it equals want ("": true).
func (d *decoder) match(want string) bool {
	s := d.field()
	return d.err == nil && (want == "" || string(s) == want)
}

// fixed returns the next n bytes (nil: too short).
func (d *decoder) fixed(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.err = ErrCorrupt
		return nil
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b
}

func (d *decoder) float() float64 {
	if b := d.fixed(8); b != nil {
		return math.Float64frombits(binary.BigEndian.Uint64(b))
	}
	return 0
}

func (d *decoder) count() int {
	if b := d.fixed(4); b != nil {
		return int(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (d *decoder) time() time.Time {
	if b := d.fixed(8); b != nil {
		return time.Unix(0, int64(binary.BigEndian.Uint64(b)))
	}
	return time.Time{}
}

// newDecoder reads the record body v (recordBody's).
func newDecoder(v []byte) *decoder {
	if len(v) == 0 || v[0] != formatVersion {
		return &decoder{err: ErrCorrupt}
	}
	return &decoder{b: v[1:]}
}

// decode returns the event of key k and body v (strings copied).
func decode(k, v []byte) (Event, error) {
	if len(k) != keyLen {
		return Event{}, fmt.Errorf("%w: key of %d bytes", ErrCorrupt, len(k))
	}
	d := newDecoder(v)
	e := Event{ID: hex.EncodeToString(k), Time: keyTime(k)}
	e.Key, e.Limit, e.Action = d.str(), d.str(), d.str()
	e.Sender, e.Client, e.QueueID, e.By, e.Detail = d.str(), d.str(), d.str(), d.str(), d.str()
	e.Count, e.Last = d.count(), d.time()
	e.Rate, e.Max = d.float(), d.float()
	if d.err == nil && len(d.b) != 0 {
		d.err = ErrCorrupt
	}
	if d.err != nil {
		return Event{}, fmt.Errorf("%w: event %x", d.err, k)
	}
	return e, nil
}

// matches reports whether record v passes q's key, limit and action filters.
func matches(v []byte, q *Query) (bool, error) {
	if q.Key == "" && q.Limit == "" && len(q.Actions) == 0 {
		return true, nil
	}
	d := newDecoder(v)
	ok := d.match(q.Key) && d.match(q.Limit)
	var action string
	if ok {
		action = d.str()
	}
	if d.err != nil {
		return false, d.err
	}
	if !ok {
		return false, nil
	}
	if len(q.Actions) == 0 {
		return true, nil
	}
	for _, a := range q.Actions {
		if a == action {
			return true, nil
		}
	}
	return false, nil
}
