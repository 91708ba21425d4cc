package ratestore

import (
	"encoding/binary"
	"fmt"
	"math"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// Bucket layout. Rate state lives in two top-level buckets of the daemon's
// BoltDB file (which the quarantine package shares with its own
// "quarantine/..." buckets): a snapshot, and a journal of the changes
// flushed since the snapshot was last compacted.
//
//	ratestate                 top-level bucket: the snapshot
//	  "\x00version" -> "3"    format version (limit names never start with NUL)
//	  <limit name>            one nested bucket per limit, named as in [[limit]]
//	    <key> -> 21 bytes     a record (statedb.Seal: version 1, CRC-32C
//	                          over key and value) of the state: Time (Unix
//	                          ns, int64) then Rate (IEEE 754 float64
//	                          bits), both big-endian
//	ratemeta                  top-level bucket: each limit's parameters
//	                          (see meta.go), each a record (version 1)
//	ratejournal               top-level bucket: the journal
//	  <seq> -> record         seq a big-endian uint64 (NextSequence); each
//	                          flush appends one record, or several of at
//	                          most about statedb.MaxRecordBytes (64 KiB)
//	                          or statedb.MaxRecordKeys (1,000) entries
//
// A journal record is a statedb record of version 2 whose payload is the
// number of its entries (uint16, big-endian) then groups of entries, one
// group per limit (a limit may have several groups in a flush split into
// several records):
//
//	group = uvarint(len(name)) name count(uint32, big-endian) entry...
//	entry = uvarint(len(key)<<1 | deleted) key [16-byte state, unless deleted]
//
// Every record carries a CRC-32C over its key and bytes, so a damaged
// byte anywhere in a state, a key, a count or a length is found, and
// loses at most the keys of its record (see statedb: the daemon refuses
// to start on an unreadable record until the operator salvages the file
// or accepts the loss).
//
// Each of these buckets (and each limit's snapshot bucket) has a manifest
// entry (statedb.Tally: its count of values and its sequence) written in
// the same transaction as its records, so that a record missing, a
// bucket whose name or sequence a bit flip changed, is found like an
// unreadable record.
//
// The stored state is the snapshot with the journal's records applied in
// sequence order: an entry replaces the key's state, a deleted entry removes
// it. NewPersistent restores exactly that, reading both in one read-only
// transaction: it merges each limit's snapshot bucket (in key order) with
// the last journal entry of each key (sorted by key), and writes nothing
// proportional to the store. A compaction (see Persistent.compact) applies
// the journal to the snapshot piece by piece, then deletes the records it
// applied, so `bbolt keys DB ratestate hourly` lists an operator's senders
// as of the last compaction.
//
// Earlier formats: format 1, written before the journal, is a snapshot
// without journal; format 2 is this layout without checksums (16-byte
// snapshot values, journal records of format byte 1 without the entry
// count and checksum, 50-byte parameters). NewPersistent reads both, a
// record of either format in a file of format 1 or 2, and converts the
// file when it can write: it compacts the journal (every record it
// writes is sealed), seals the snapshot's remaining values and the
// parameters, and marks the file 3, which an older ratelimitd refuses
// (ErrVersion) rather than misread.
//
// Keys are the rate keys verbatim. Snapshot buckets keep BoltDB's default
// FillPercent: new keys arrive in random order, and a higher one splits
// full pages into a full and a nearly empty one, which makes the file
// larger (docs/performance.md).
var (
	bucketName  = []byte("ratestate")
	journalName = []byte("ratejournal")
	versionKey  = []byte("\x00version")
	// The buckets' paths in the manifest (statedb.Tally): a limit's
	// snapshot bucket is ratestate, then its name.
	rootPath    = []string{"ratestate"}
	journalPath = []string{"ratejournal"}
	metaPath    = []string{"ratemeta"}
)

const (
	formatVersion = "3"
	formatV2      = "2" // without checksums: read, and converted
	formatV1      = "1" // snapshot only: read, and converted
	// recordV1 is the first byte of a journal record of format 2,
	// recordV2 the version of a sealed one.
	recordV1 = 1
	recordV2 = 2
	// cellVersion is the version of a sealed snapshot value, and
	// metaVersion of sealed parameters.
	cellVersion = 1
	metaVersion = 1
	valueLen    = 16
	cellLen     = valueLen + statedb.RecordOverhead
	// journalValueMax is the size past which a flush starts a new journal
	// record, and journalKeysMax the entries one record holds at most.
	journalValueMax = statedb.MaxRecordBytes
	journalKeysMax  = statedb.MaxRecordKeys
)

// recordBody returns the part of the journal record v stored under seq
// that decodeRecord reads: the record without its checksum, checked, for a
// sealed one; the whole record for one of format 2 (recordV1), which is
// accepted only when the file is not of format 3 (sealed false).
func recordBody(seq, v []byte, sealed bool) ([]byte, error) {
	if !sealed && len(v) > 0 && v[0] == recordV1 {
		return v, nil
	}
	if _, _, err := statedb.Unseal(seq, v); err != nil {
		return nil, err
	}
	return v[:len(v)-4], nil
}

// decodeRecord calls fn for every entry of the journal record body v
// (recordBody), in order, with the limit name, where the entry (its
// header) and its key start in v, the key's length, and whether the entry
// is a deletion (if not, the state is the valueLen bytes after the key).
// It returns fn's error, errMalformedRecord, or an error wrapping
// ErrVersion for a record of an unknown format, possibly after calling fn
// for some of the entries.
func decodeRecord(v []byte, fn func(name []byte, at, off, n int, del bool) error) error {
	if len(v) == 0 {
		return errMalformedRecord
	}
	i, total := 1, -1
	switch v[0] {
	case recordV1:
	case recordV2:
		if len(v) < 3 {
			return errMalformedRecord
		}
		i, total = 3, int(binary.BigEndian.Uint16(v[1:]))
	default:
		return fmt.Errorf("%w: journal record format %d (want %d or %d)", ErrVersion, v[0], recordV1, recordV2)
	}
	seen := 0
	for i < len(v) {
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
			seen++
		}
	}
	if total >= 0 && seen != total {
		return errMalformedRecord
	}
	return nil
}

// recordKeys returns the number of entries the journal record v says it
// holds (unchecked: for reporting a damaged one).
func recordKeys(v []byte) int {
	if len(v) >= 3 && v[0] == recordV2 {
		return min(int(binary.BigEndian.Uint16(v[1:])), journalKeysMax)
	}
	return min(len(v)/20+1, journalKeysMax)
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

// stateOf returns the state a 16-byte value holds, whatever its rate.
func stateOf(v []byte) ratelimit.State {
	return ratelimit.State{
		Time: int64(binary.BigEndian.Uint64(v[0:8])),
		Rate: math.Float64frombits(binary.BigEndian.Uint64(v[8:16])),
	}
}

// sealState appends to dst the snapshot value of s under key: a record
// of cellVersion.
func sealState(dst, key []byte, s ratelimit.State) []byte {
	var v [valueLen]byte
	encodeState(v[:], s)
	return statedb.Seal(dst, key, cellVersion, v[:])
}

// openCell returns the state bytes of the snapshot value v of key: a
// sealed value, checked, or in a file not of format 3 (sealed false) a
// bare 16-byte one. The error wraps statedb.ErrRecord.
func openCell(key, v []byte, sealed bool) ([]byte, error) {
	if !sealed && len(v) == valueLen {
		return v, nil
	}
	ver, payload, err := statedb.Unseal(key, v)
	if err == nil && (ver != cellVersion || len(payload) != valueLen) {
		err = fmt.Errorf("%w: a value of version %d and %d bytes, not a rate state", statedb.ErrRecord, ver, len(payload))
	}
	return payload, err
}

// decodeState reads a stored state (16 bytes); ok is false for a malformed
// one: not 16 bytes, or a NaN or infinite rate (which no algorithm writes:
// rates saturate at math.MaxFloat64).
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
