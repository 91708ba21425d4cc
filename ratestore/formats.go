package ratestore

import (
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// Formats describes the records of the rate state and the recipient sets
// for statedb's Scan, Check, Salvage and SetAside: a snapshot record holds
// one key, a journal record up to statedb.MaxRecordKeys.
func Formats() []statedb.Format {
	return []statedb.Format{
		{Bucket: string(bucketName), Nested: true, Check: checkWith(func(k, v []byte) (int, error) {
			_, err := openCell(k, v)
			return 1, err
		})},
		{Bucket: string(journalName), Check: checkWith(func(k, v []byte) (int, error) {
			body, err := recordBody(k, v)
			if err != nil {
				return recordKeys(v), err
			}
			n := 0
			if err := decodeRecord(body, func([]byte, int, int, int, bool) error { n++; return nil }); err != nil {
				return recordKeys(v), err
			}
			return n, nil
		})},
		{Bucket: string(metaName), Check: checkWith(func(k, v []byte) (int, error) {
			_, err := openMeta(k, v)
			return 1, err
		})},
		{Bucket: string(rcptBucket), Check: checkWith(func(k, v []byte) (int, error) {
			_, err := openRcpt(k, v)
			return 1, err
		})},
	}
}

// checkWith adapts a record check to statedb.Format.Check.
func checkWith(check func(k, v []byte) (int, error)) func(*bbolt.Tx) func([]string, []byte, []byte) (int, error) {
	return func(*bbolt.Tx) func([]string, []byte, []byte) (int, error) {
		return func(_ []string, k, v []byte) (int, error) { return check(k, v) }
	}
}

// openMeta returns the payload of the stored parameters v of limit k,
// checked. The error wraps statedb.ErrRecord.
func openMeta(k, v []byte) ([]byte, error) {
	ver, payload, err := statedb.Unseal(k, v)
	if err == nil && ver != metaVersion {
		err = fmt.Errorf("%w: parameters of version %d", statedb.ErrRecord, ver)
	}
	return payload, err
}
