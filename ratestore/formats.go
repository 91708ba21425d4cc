package ratestore

import (
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// Formats describes the records this package keeps in the state file,
// for statedb's Scan, Check, Salvage and SetAside: the snapshot
// (ratestate, a record per key), the journal (ratejournal, a record per
// flush of up to 1,000 keys), the limit parameters (ratemeta) and the
// recipient sets (rcptsets, a record per pair). In a file not yet
// converted (format 1 or 2), records without a checksum are taken as
// they are.
func Formats() []statedb.Format {
	return []statedb.Format{
		{Bucket: string(bucketName), Nested: true, Check: func(tx *bbolt.Tx) func([]string, []byte, []byte) (int, error) {
			sealed := rateSealed(tx)
			return func(_ []string, k, v []byte) (int, error) {
				_, err := openCell(k, v, sealed)
				return 1, err
			}
		}},
		{Bucket: string(journalName), Check: func(tx *bbolt.Tx) func([]string, []byte, []byte) (int, error) {
			sealed := rateSealed(tx)
			return func(_ []string, k, v []byte) (int, error) {
				body, err := recordBody(k, v, sealed)
				if err != nil {
					return recordKeys(v), err
				}
				n := 0
				err = decodeRecord(body, func([]byte, int, int, int, bool) error { n++; return nil })
				if err != nil {
					return recordKeys(v), err
				}
				return n, nil
			}
		}},
		{Bucket: string(metaName), Check: func(tx *bbolt.Tx) func([]string, []byte, []byte) (int, error) {
			sealed := rateSealed(tx)
			return func(_ []string, k, v []byte) (int, error) {
				if !sealed && len(v) == metaLen {
					return 1, nil
				}
				ver, _, err := statedb.Unseal(k, v)
				if err == nil && ver != metaVersion {
					err = fmt.Errorf("%w: parameters of version %d", statedb.ErrRecord, ver)
				}
				return 1, err
			}
		}},
		{Bucket: string(rcptBucket), Check: func(tx *bbolt.Tx) func([]string, []byte, []byte) (int, error) {
			sealed := rcptSealed(tx.Bucket(rcptBucket))
			return func(_ []string, k, v []byte) (int, error) {
				if isVersionKey(k) {
					return 0, nil
				}
				_, err := openRcpt(k, v, sealed)
				return 1, err
			}
		}},
	}
}

// rateSealed reports whether the rate state of the file is of the
// current format (every record sealed).
func rateSealed(tx *bbolt.Tx) bool {
	root := tx.Bucket(bucketName)
	return root != nil && string(root.Get(versionKey)) == formatVersion
}
