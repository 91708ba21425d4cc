package ratestore

import (
	"fmt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

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
