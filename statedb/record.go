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
// the checksum (Castagnoli) over the BoltDB key, version and payload.
const (
	// MaxRecordBytes is the size past which a store starts a new record.
	MaxRecordBytes = 64 << 10
	// MaxRecordKeys is the most keys one record holds.
	MaxRecordKeys = 1000
	// RecordOverhead is the bytes a record adds to its payload.
	RecordOverhead = 5
)

// ErrRecord is wrapped by Unseal's error for a short or mismatched record.
var ErrRecord = errors.New("record fails its checksum")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Sum returns the checksum of record body (version, payload) under key.
func Sum(key, body []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, key), castagnoli, body)
}

// Seal appends to dst the record of payload and version under key.
func Seal(dst, key []byte, version byte, payload []byte) []byte {
	start := len(dst)
	dst = append(dst, version)
	dst = append(dst, payload...)
	return binary.BigEndian.AppendUint32(dst, Sum(key, dst[start:]))
}

// Unseal checks record v under key and returns its version and payload
// (a slice of v); the error wraps ErrRecord.
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
