package quarantine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// Records. In format 2 an entry (quarantine/meta) and a suspension
// (quarantine/suspended) are statedb records (statedb.Seal, version
// recordVersion, CRC-32C over the ID or key and the record) whose payload
// is the JSON of the Entry or Suspension; format 1 stored the bare JSON,
// and New seals such a file's records when it opens it for writing. Every
// bucket has its manifest entry (statedb.Tally), written in the same
// transaction as its records.
//
// An entry that cannot be read (its checksum fails, or its JSON) is never
// dropped, nor its message: Get and the state changes return ErrCorrupt,
// List, Stats and Expire skip it (Stats counts it in Damaged), and Purge
// refuses it. Only the operator's decision moves it, byte for byte, into
// quarantine/damaged: `ratelimitd state check --salvage` or `serve
// --accept-state-loss` (statedb.SetAside); its message stays in
// quarantine/body.
const recordVersion = 1

// bucketDamaged holds the entries and suspensions set aside unreadable,
// byte for byte under their keys.
var bucketDamaged = []byte("quarantine/damaged")

// Formats describes the records the quarantine keeps in the state file,
// for statedb's Scan, Check, Salvage and SetAside: entries and
// suspensions are checked (and set aside into quarantine/damaged), the
// other buckets only counted against the manifest.
func Formats() []statedb.Format {
	check := func(what string) func(tx *bolt.Tx) func([]string, []byte, []byte) (int, error) {
		return func(tx *bolt.Tx) func([]string, []byte, []byte) (int, error) {
			sealed := sealedTx(tx)
			return func(_ []string, k, v []byte) (int, error) {
				_, err := openRecord(k, v, sealed)
				if err != nil {
					err = fmt.Errorf("%s: %w", what, err)
				}
				return 1, err
			}
		}
	}
	return []statedb.Format{
		{Bucket: string(bucketMeta), Check: check("quarantine entry"), SetAside: string(bucketDamaged)},
		{Bucket: string(bucketSuspended), Check: check("suspension"), SetAside: string(bucketDamaged)},
		{Bucket: string(bucketBody)},
		{Bucket: string(bucketChunks)},
		{Bucket: string(bucketChunked)},
		{Bucket: string(bucketInstance)},
		{Bucket: string(bucketInfo)},
		{Bucket: string(bucketDamaged)},
	}
}

// sealedTx reports whether the quarantine's records in tx are of format
// 2 (sealed).
func sealedTx(tx *bolt.Tx) bool {
	info := tx.Bucket(bucketInfo)
	return info != nil && string(info.Get(keyVersion)) == formatVersionText
}

// sealRecord returns the record of the JSON js stored under key.
func sealRecord(key, js []byte) []byte {
	return statedb.Seal(make([]byte, 0, len(js)+statedb.RecordOverhead), key, recordVersion, js)
}

// openRecord returns the JSON of the record v stored under key: checked
// for a sealed one, as it is in a file of format 1 (sealed false). It
// also checks that the JSON is well formed. The error wraps ErrCorrupt
// (and statedb.ErrRecord for a failed checksum).
func openRecord(key, v []byte, sealed bool) ([]byte, error) {
	js := v
	if sealed {
		ver, payload, err := statedb.Unseal(key, v)
		if err == nil && ver != recordVersion {
			err = fmt.Errorf("%w: a record of version %d", statedb.ErrRecord, ver)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %w", ErrCorrupt, key, err)
		}
		js = payload
	}
	if !json.Valid(js) {
		return nil, fmt.Errorf("%w: %q: not JSON", ErrCorrupt, key)
	}
	return js, nil
}

// decodeRecord decodes the record v under key into x (an Entry, a
// Suspension or a part of one).
func decodeRecord(key, v []byte, sealed bool, x any) error {
	js, err := openRecord(key, v, sealed)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(js, x); err != nil {
		return fmt.Errorf("%w: %q: %v", ErrCorrupt, key, err)
	}
	return nil
}

// CheckMessages is the quarantine's part of `ratelimitd state check`
// (a statedb.Inspect): it reads every frozen message and compares its
// SHA-256 and size with its entry's, as a thaw does, and writes what it
// found to w. A message that does not match is a problem (the state check
// fails); one whose entry cannot be read is left to the scan of the
// records, and one whose entry was set aside is counted. It never writes.
func CheckMessages(w io.Writer, db *bolt.DB) (bad []string, err error) {
	checked, aside := 0, 0
	err = db.View(func(tx *bolt.Tx) error {
		b := bucketsOf(tx)
		if b.body == nil || b.meta == nil {
			return nil
		}
		return b.body.ForEach(func(k, v []byte) error {
			e, err := b.get(string(k))
			switch {
			case errors.Is(err, ErrNotFound):
				aside++
				return nil
			case err != nil:
				return nil // reported by the scan of the records
			}
			checked++
			sum := sha256.Sum256(v)
			if hex.EncodeToString(sum[:]) != e.Hash || int64(len(v)) != e.Size {
				p := fmt.Sprintf("frozen message %s (%d bytes) does not match its entry's SHA-256 and size (%d bytes): it is damaged, and a thaw refuses it",
					k, len(v), e.Size)
				fmt.Fprintf(w, "DAMAGED: %s\n", p)
				bad = append(bad, p)
			}
			return nil
		})
	})
	fmt.Fprintf(w, "quarantine: %d frozen messages checked against their SHA-256, %d damaged", checked, len(bad))
	if aside > 0 {
		fmt.Fprintf(w, ", %d kept without a readable entry (set aside in %s)", aside, bucketDamaged)
	}
	fmt.Fprintln(w)
	return bad, err
}
