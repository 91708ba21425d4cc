package ratestore

import (
	"encoding/binary"
	"fmt"
	"math"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/ratelimit"
)

// Bucket layout. Rate state lives in two top-level buckets of the daemon's
// BoltDB file (which the quarantine package shares with its own
// "quarantine/..." buckets): a snapshot, and a journal of the changes
// flushed since the snapshot was last compacted.
//
//	ratestate                 top-level bucket: the snapshot
//	  "\x00version" -> "2"    format version (limit names never start with NUL)
//	  <limit name>            one nested bucket per limit, named as in [[limit]]
//	    <key> -> 16 bytes     Time (Unix ns, int64) then Rate (IEEE 754
//	                          float64 bits), both big-endian
//	ratemeta                  top-level bucket: each limit's parameters
//	                          (see meta.go)
//	ratejournal               top-level bucket: the journal
//	  <seq> -> record         seq a big-endian uint64 (NextSequence); each
//	                          flush appends one record, or several of about
//	                          journalValueMax bytes
//
// A record is a format byte (1) then groups of entries, one group per limit
// (a limit may have several groups in a flush split into several records):
//
//	group = uvarint(len(name)) name count(uint32, big-endian) entry...
//	entry = uvarint(len(key)<<1 | deleted) key [16-byte state, unless deleted]
//
// The stored state is the snapshot with the journal's records applied in
// sequence order: an entry replaces the key's state, a deleted entry removes
// it. NewPersistent restores exactly that, reading both in one read-only
// transaction: it merges each limit's snapshot bucket (in key order) with
// the last journal entry of each key (sorted by key), and writes nothing
// proportional to the store. A compaction (see Persistent.compact) applies
// the journal to the snapshot piece by piece, then deletes the records it
// applied, so `bbolt keys DB ratestate hourly` lists an operator's senders
// as of the last compaction. Format 1, written before the journal, is a
// snapshot without journal: NewPersistent reads it and marks the file 2,
// which an older ratelimitd refuses (ErrVersion) rather than ignore the
// journal.
//
// Keys are the rate keys verbatim. Snapshot buckets keep BoltDB's default
// FillPercent: new keys arrive in random order, and a higher one splits
// full pages into a full and a nearly empty one, which makes the file
// larger (docs/performance.md).
var (
	bucketName  = []byte("ratestate")
	journalName = []byte("ratejournal")
	versionKey  = []byte("\x00version")
)

const (
	formatVersion = "2"
	formatV1      = "1" // snapshot only: read, and marked formatVersion
	recordFormat  = 1   // first byte of a journal record
	valueLen      = 16
	// journalValueMax is the size past which a flush starts a new journal
	// record: records are BoltDB overflow pages, which need a run of free
	// pages as long as the record.
	journalValueMax = 1 << 20
)

// decodeRecord calls fn for every entry of the journal record v, in order,
// with the limit name, where the entry (its header) and its key start in
// v, the key's length, and whether the entry is a deletion (if not, the
// state is the valueLen bytes after the key). It returns fn's error,
// errMalformedRecord, or an error wrapping ErrVersion for a record of an
// unknown format, possibly after calling fn for some of the entries.
func decodeRecord(v []byte, fn func(name []byte, at, off, n int, del bool) error) error {
	if len(v) == 0 {
		return errMalformedRecord
	}
	if v[0] != recordFormat {
		return fmt.Errorf("%w: journal record format %d (want %d)", ErrVersion, v[0], recordFormat)
	}
	for i := 1; i < len(v); {
		l, w := binary.Uvarint(v[i:])
		if w <= 0 || l == 0 || l > bbolt.MaxKeySize || uint64(len(v)-i-w) < l+4 {
			return errMalformedRecord
		}
		i += w
		name := v[i : i+int(l) : i+int(l)]
		i += int(l)
		count := binary.BigEndian.Uint32(v[i:])
		i += 4
		for range count {
			at := i
			h, w := binary.Uvarint(v[i:])
			if w <= 0 {
				return errMalformedRecord
			}
			i += w
			n, del := h>>1, h&1 == 1
			need := n
			if !del {
				need += valueLen
			}
			if n == 0 || n > bbolt.MaxKeySize || uint64(len(v)-i) < need {
				return errMalformedRecord
			}
			if err := fn(name, at, i, int(n), del); err != nil {
				return err
			}
			i += int(need)
		}
	}
	return nil
}

// persistableName reports whether states under the limit name can be
// stored in the layout above, and persistableKey whether key can.
func persistableName(name string) bool {
	return name != "" && name[0] != 0 && len(name) <= bbolt.MaxKeySize
}

func persistableKey(key []byte) bool {
	return len(key) > 0 && len(key) <= bbolt.MaxKeySize
}

// encodeState writes s into v (valueLen bytes).
func encodeState(v []byte, s ratelimit.State) {
	binary.BigEndian.PutUint64(v[0:8], uint64(s.Time))
	binary.BigEndian.PutUint64(v[8:16], math.Float64bits(s.Rate))
}

// decodeState reads a stored value; ok is false for a malformed one: not
// 16 bytes, or a NaN or infinite rate (which no algorithm writes: rates
// saturate at math.MaxFloat64).
func decodeState(v []byte) (ratelimit.State, bool) {
	if len(v) != valueLen {
		return ratelimit.State{}, false
	}
	s := ratelimit.State{
		Time: int64(binary.BigEndian.Uint64(v[0:8])),
		Rate: math.Float64frombits(binary.BigEndian.Uint64(v[8:16])),
	}
	return s, !math.IsNaN(s.Rate) && !math.IsInf(s.Rate, 0)
}
