package ratestore

import (
	"encoding/binary"
	"fmt"
	"math"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/ratelimit"
	"github.com/ratelimitd/ratelimitd/statedb"
)

// The rate state's buckets in the BoltDB file. Every value is a statedb
// record (version byte, payload, CRC-32C over key and payload), and every
// bucket has a manifest entry (statedb.Tally) written with its records.
//
//	ratestate                 the snapshot
//	  "\x00version" -> "3"    the format; a file of another is refused (ErrVersion)
//	  <limit name>            a nested bucket per limit
//	    <key> -> record       version 1, payload: the state (appendState)
//	ratemeta                  each limit's parameters (meta.go)
//	ratejournal               the changes flushed since the last compaction
//	  <seq> -> record         seq a big-endian uint64; version 2, payload:
//	                          entry count (uint16) then groups, one per limit
//
//	group = uvarint(len(name)) name count(uint32) entry...
//	entry = uvarint(len(key)<<1 | deleted) key [state, unless deleted]
//
// The stored state is the snapshot with the journal applied in sequence
// order. Integers are big-endian.
var (
	bucketName  = []byte("ratestate")
	journalName = []byte("ratejournal")
	versionKey  = []byte("\x00version")
	// Manifest paths (statedb.Tally).
	rootPath    = []string{"ratestate"}
	journalPath = []string{"ratejournal"}
	metaPath    = []string{"ratemeta"}
)

const (
	formatVersion = "3"
	// Record versions: snapshot value, journal record, parameters.
	cellVersion   = 1
	recordVersion = 2
	metaVersion   = 1
	valueLen      = 16
	cellLen       = valueLen + statedb.RecordOverhead
)

// recordBody returns journal record v's checked body (statedb.ErrRecord).
func recordBody(seq, v []byte) ([]byte, error) {
	if _, _, err := statedb.Unseal(seq, v); err != nil {
		return nil, err
	}
	return v[:len(v)-4], nil
}

// decodeRecord calls fn for each entry of record body v: limit name,
// entry and key offsets, key length, deletion. Errors: fn's,
// errMalformedRecord, ErrVersion.
func decodeRecord(v []byte, fn func(name []byte, at, off, n int, del bool) error) error {
	if len(v) > 0 && v[0] != recordVersion {
		return fmt.Errorf("%w: journal record format %d (want %d)", ErrVersion, v[0], recordVersion)
	}
	if len(v) < 3 {
		return errMalformedRecord
	}
	i, total, seen := 3, int(binary.BigEndian.Uint16(v[1:])), 0
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
	if seen != total {
		return errMalformedRecord
	}
	return nil
}

// recordKeys returns the entry count record v claims, unchecked.
func recordKeys(v []byte) int {
	if len(v) >= 3 {
		return min(int(binary.BigEndian.Uint16(v[1:])), statedb.MaxRecordKeys)
	}
	return 1
}

// persistableName reports whether a limit name can be stored.
func persistableName(name string) bool {
	return name != "" && name[0] != 0 && len(name) <= bbolt.MaxKeySize
}

// appendState appends s as valueLen bytes: Time (Unix ns) then Rate's
// IEEE 754 bits, big-endian.
func appendState(dst []byte, s ratelimit.State) []byte {
	dst = binary.BigEndian.AppendUint64(dst, uint64(s.Time))
	return binary.BigEndian.AppendUint64(dst, math.Float64bits(s.Rate))
}

// decodeState is appendState's inverse; !ok for a bad length or a NaN or
// infinite rate.
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

// openCell returns snapshot value v's checked state (statedb.ErrRecord).
func openCell(key, v []byte) ([]byte, error) {
	ver, payload, err := statedb.Unseal(key, v)
	if err == nil && (ver != cellVersion || len(payload) != valueLen) {
		err = fmt.Errorf("%w: a value of version %d and %d bytes, not a rate state", statedb.ErrRecord, ver, len(payload))
	}
	return payload, err
}

// Formats describes the rate state's and recipient sets' records for
// statedb's Scan, Check, Salvage and SetAside.
func Formats() []statedb.Format {
	return []statedb.Format{
		{Bucket: string(bucketName), Nested: true, Check: oneKey(openCell)},
		{Bucket: string(journalName), Check: func(k, v []byte) (int, error) {
			body, err := recordBody(k, v)
			if err != nil {
				return recordKeys(v), err
			}
			n := 0
			if err := decodeRecord(body, func([]byte, int, int, int, bool) error { n++; return nil }); err != nil {
				return recordKeys(v), err
			}
			return n, nil
		}},
		{Bucket: string(metaName), Check: oneKey(openMeta)},
		{Bucket: string(rcptBucket), Check: oneKey(openRcpt)},
	}
}

// oneKey is the Format.Check of records of one key each, checked by open.
func oneKey(open func(k, v []byte) ([]byte, error)) func(k, v []byte) (int, error) {
	return func(k, v []byte) (int, error) {
		_, err := open(k, v)
		return 1, err
	}
}

// openMeta returns parameters v's checked payload (statedb.ErrRecord).
func openMeta(k, v []byte) ([]byte, error) {
	ver, payload, err := statedb.Unseal(k, v)
	if err == nil && ver != metaVersion {
		err = fmt.Errorf("%w: parameters of version %d", statedb.ErrRecord, ver)
	}
	return payload, err
}
