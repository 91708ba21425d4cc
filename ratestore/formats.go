package ratestore

import (
	"fmt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// Formats describes the rate state's and recipient sets' records for
// statedb's Scan, Check, Salvage and SetAside.
func Formats() []statedb.Format {
	return []statedb.Format{
		{Bucket: string(bucketName), Nested: true, Check: func(k, v []byte) (int, error) {
			_, err := openCell(k, v)
			return 1, err
		}},
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
		{Bucket: string(metaName), Check: func(k, v []byte) (int, error) {
			_, err := openMeta(k, v)
			return 1, err
		}},
		{Bucket: string(rcptBucket), Check: func(k, v []byte) (int, error) {
			_, err := openRcpt(k, v)
			return 1, err
		}},
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
