package events

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// MaxField is the most bytes of one string field stored; a longer one is
// cut at a character boundary.
const MaxField = 1024

// formatVersion is the record version of an event and the log's format
// (events/meta "format"); a log of another format is refused.
const formatVersion = 2

// keyLen is the length of a record's key: time and sequence.
const keyLen = 16

// ErrCorrupt is wrapped by Query's and Summary's error when a stored record
// cannot be decoded.
var ErrCorrupt = errors.New("events: corrupt record")

// recordKey returns the key of an event at t with sequence seq. Times
// before 1970 are stored as 1970.
func recordKey(t time.Time, seq uint64) []byte {
	k := make([]byte, keyLen)
	binary.BigEndian.PutUint64(k, uint64(max(t.UnixNano(), 0)))
	binary.BigEndian.PutUint64(k[8:], seq)
	return k
}

// keyTime returns the time a record key holds.
func keyTime(k []byte) time.Time {
	return time.Unix(0, int64(binary.BigEndian.Uint64(k)))
}

// timeKey is the smallest key of an event at t or later.
func timeKey(t time.Time) []byte { return recordKey(t, 0) }

// parseID returns the record key an Event.ID names.
func parseID(id string) ([]byte, error) {
	k, err := hex.DecodeString(id)
	if err != nil || len(k) != keyLen {
		return nil, fmt.Errorf("events: invalid event ID %q", id)
	}
	return k, nil
}

// clip cuts s to at most MaxField bytes at a character boundary.
func clip(s string) string {
	if len(s) <= MaxField {
		return s
	}
	i := MaxField
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// encode appends e's record (without its time, which is in the key) to b,
// with room for its checksum, which seal writes once its key is known.
func encode(b []byte, e *Event) []byte {
	b = append(b, formatVersion)
	for _, s := range [...]string{e.Key, e.Limit, e.Action, e.Sender, e.Client, e.QueueID, e.By, e.Detail} {
		s = clip(s)
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(e.Rate))
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(e.Max))
	return append(b, 0, 0, 0, 0)
}

// seal writes the checksum of the record rec (encode's) stored under key.
func seal(key, rec []byte) {
	binary.BigEndian.PutUint32(rec[len(rec)-4:], statedb.Sum(key, rec[:len(rec)-4]))
}

// recordBody returns the record v stored under k without its checksum,
// checked. The error wraps ErrCorrupt.
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

// match passes over a string field, reporting whether it equals want
// (always true when want is "").
func (d *decoder) match(want string) bool {
	s := d.field()
	return d.err == nil && (want == "" || string(s) == want)
}

func (d *decoder) float() float64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.err = ErrCorrupt
		return 0
	}
	f := math.Float64frombits(binary.BigEndian.Uint64(d.b))
	d.b = d.b[8:]
	return f
}

// newDecoder reads the record body v (recordBody's).
func newDecoder(v []byte) *decoder {
	if len(v) == 0 || v[0] != formatVersion {
		return &decoder{err: ErrCorrupt}
	}
	return &decoder{b: v[1:]}
}

// decode returns the event of record (k, v), v its body (recordBody's);
// the strings are copies.
func decode(k, v []byte) (Event, error) {
	if len(k) != keyLen {
		return Event{}, fmt.Errorf("%w: key of %d bytes", ErrCorrupt, len(k))
	}
	d := newDecoder(v)
	e := Event{ID: hex.EncodeToString(k), Time: keyTime(k)}
	e.Key, e.Limit, e.Action = d.str(), d.str(), d.str()
	e.Sender, e.Client, e.QueueID, e.By, e.Detail = d.str(), d.str(), d.str(), d.str(), d.str()
	e.Rate, e.Max = d.float(), d.float()
	if d.err != nil {
		return Event{}, fmt.Errorf("%w: event %x", d.err, k)
	}
	return e, nil
}

// matches reports whether record v passes q's key, limit and action
// filters, reading only those fields.
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
