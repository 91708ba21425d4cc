package statedb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Records. Every value the stores keep is
//
//	version (1 byte)  payload  CRC-32C (4 bytes, big-endian)
//
// the checksum (Castagnoli) over the BoltDB key, then version and payload,
// so a damaged key is caught too. A record holds at most about
// MaxRecordBytes or MaxRecordKeys keys, so one damaged record loses
// little.
const (
	// MaxRecordBytes is the size past which a store starts a new record
	// (a record may pass it by its last key).
	MaxRecordBytes = 64 << 10
	// MaxRecordKeys is the most keys one record holds.
	MaxRecordKeys = 1000
	// RecordOverhead is the bytes a record adds to its payload.
	RecordOverhead = 5
)

// ErrRecord is wrapped by Unseal's error for a value that is not a sound
// record: too short, or its checksum does not match.
var ErrRecord = errors.New("record fails its checksum")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sum returns the checksum of a record stored under key whose version and
// payload are body (everything but the checksum).
func Sum(key, body []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, key), castagnoli, body)
}

// Seal appends to dst the record of payload, of format version, to be
// stored under key.
func Seal(dst, key []byte, version byte, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, version)
	dst = append(dst, payload...)
	return binary.BigEndian.AppendUint32(dst, Sum(key, dst[start:]))
}

// Unseal checks the record v stored under key and returns its version and
// payload (a slice of v). The error wraps ErrRecord.
func Unseal(key, v []byte) (version byte, payload []byte, err error) {
	if len(v) < RecordOverhead {
		return 0, nil, fmt.Errorf("%w: %d bytes, shorter than a record", ErrRecord, len(v))
	}
	body := v[: len(v)-4 : len(v)-4]
	if Sum(key, body) != binary.BigEndian.Uint32(v[len(v)-4:]) {
		return 0, nil, fmt.Errorf("%w: checksum mismatch (%d bytes)", ErrRecord, len(v))
	}
	return body[0], body[1:], nil
}
