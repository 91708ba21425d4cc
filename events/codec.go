package events

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// A record's key: class (1 byte), Unix ns and sequence (8 bytes each).
// Its value: version, key, limit, action, sender, client, queue ID, by,
// detail (uvarint length, bytes), count (4 bytes), last (Unix ns), rate,
// max (IEEE 754), checksum (statedb.Sum); integers big-endian.
const (
	// MaxField is the most bytes of a stored string field (clip).
	MaxField = 256
	// IDLen is the length of an Event.ID: the record's key in hex.
	IDLen         = 2 * keyLen
	keyLen        = 17
	formatVersion = 3 // record version and log format
)

// ErrCorrupt is wrapped by Query's and Summary's error for a bad record.
var ErrCorrupt = errors.New("events: corrupt record")

// recordKey returns the key of an event of class c at t, seq.
func recordKey(c class, t time.Time, seq uint64) []byte {
	k := make([]byte, keyLen)
	k[0] = byte(c)
	binary.BigEndian.PutUint64(k[1:], uint64(max(t.UnixNano(), 0)))
	binary.BigEndian.PutUint64(k[9:], seq)
	return k
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

// clip cuts s beyond MaxField bytes to MaxField, ending in
// "…[+N]" (N the bytes cut), at a character boundary.
func clip(s string) string {
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

// Offsets from a record's end of count, last and rate.
const (
	offCount = 4 + 8 + 8 + 8 + 4
	offLast  = offCount - 4
	offRate  = offLast - 8
)

// maxCount is where a coalesced record's count saturates.
const maxCount = math.MaxUint32

// encode appends e's record to b, room left for seal; Count 0 is stored
// as 1, Last before Time as Time.
func encode(b []byte, e *Event) []byte {
	b = append(b, formatVersion)
	for _, s := range [...]string{e.Key, e.Limit, e.Action, e.Sender, e.Client, e.QueueID, e.By, e.Detail} {
		s = clip(s)
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

// patch overwrites record rec's count, last and rate; seal it again after.
func patch(rec []byte, count uint32, last int64, rate float64) {
	n := len(rec)
	binary.BigEndian.PutUint32(rec[n-offCount:], count)
	binary.BigEndian.PutUint64(rec[n-offLast:], uint64(last))
	binary.BigEndian.PutUint64(rec[n-offRate:], math.Float64bits(rate))
}

// seal writes the checksum of record rec stored under key.
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

// decode returns the event of key k and body v (strings copied).
func decode(k, v []byte) (Event, error) {
	bad := func() (Event, error) { return Event{}, fmt.Errorf("%w: event %x", ErrCorrupt, k) }
	if len(k) != keyLen || len(v) == 0 || v[0] != formatVersion {
		return bad()
	}
	e := Event{ID: hex.EncodeToString(k), Time: time.Unix(0, int64(binary.BigEndian.Uint64(k[1:])))}
	v = v[1:]
	for _, f := range [...]*string{&e.Key, &e.Limit, &e.Action, &e.Sender, &e.Client, &e.QueueID, &e.By, &e.Detail} {
		n, w := binary.Uvarint(v)
		if w <= 0 || n > uint64(len(v)-w) {
			return bad()
		}
		*f, v = string(v[w:w+int(n)]), v[w+int(n):]
	}
	if len(v) != 28 {
		return bad()
	}
	e.Count = int(binary.BigEndian.Uint32(v))
	e.Last = time.Unix(0, int64(binary.BigEndian.Uint64(v[4:])))
	e.Rate = math.Float64frombits(binary.BigEndian.Uint64(v[12:]))
	e.Max = math.Float64frombits(binary.BigEndian.Uint64(v[20:]))
	return e, nil
}

// selects reports whether e passes q's key, limit and action filters.
func (q *Query) selects(e *Event) bool {
	return (q.Key == "" || q.Key == e.Key) && (q.Limit == "" || q.Limit == e.Limit) &&
		(len(q.Actions) == 0 || slices.Contains(q.Actions, e.Action))
}
