package statedb

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// Inspect reports part of an open state file to w for Check, returning
// its problems (short phrases) and an error when it could not read.
type Inspect func(w io.Writer, db *bolt.DB) (problems []string, err error)

// Check writes to w what is readable in the state file at path (pages,
// Tx.Check, bucket counts, records, inspect). Errors: Damaged's, a locked
// file's, the os error. It never writes.
func Check(w io.Writer, path string, formats []Format, inspect Inspect) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "state file: %s (%d bytes)\n", path, fi.Size())
	if fi.Size() == 0 {
		fmt.Fprintln(w, "DAMAGED: the file is empty (0 bytes)")
		return Damaged(path, "the file is empty (0 bytes)")
	}
	var bad []string
	switch err := CheckPages(path); {
	case errors.Is(err, ErrUnreadable):
		fmt.Fprintf(w, "DAMAGED: page structure: %v\nnothing can be read safely\n", err)
		return Damaged(path, err)
	case err != nil:
		fmt.Fprintf(w, "page structure: %v\n", err)
		bad = append(bad, "damaged pages")
	default:
		fmt.Fprintln(w, "page structure: ok")
	}
	if warn, _ := MetaFallback(path); warn != "" {
		fmt.Fprintf(w, "WARNING: %s\n", warn)
	}
	db, err := openBolt(path, true, time.Second)
	if errors.Is(err, berrors.ErrTimeout) {
		return fmt.Errorf("%s is locked by another process (is ratelimitd running? stop it first)", path)
	}
	if err != nil {
		fmt.Fprintf(w, "DAMAGED: BoltDB cannot open it: %v\n", err)
		return Damaged(path, err)
	}
	defer db.Close()
	problems := checkDB(db, 20)
	if len(problems) == 0 {
		fmt.Fprintln(w, "consistency check: ok")
	} else {
		fmt.Fprintf(w, "consistency check: %d problem(s) shown:\n", len(problems))
		for _, p := range problems {
			fmt.Fprintf(w, "  %s\n", p)
		}
		bad = append(bad, "consistency check failed")
	}
	checkBuckets(w, db, &bad)
	guard(&bad, "records", func() error {
		lost, usage, err := Scan(db, formats)
		for _, u := range usage {
			fmt.Fprintf(w, "records %s: %d records, %d bytes, %d keys", u.Bucket, u.Records, u.Bytes, u.Keys)
			if u.Lost > 0 {
				fmt.Fprintf(w, ", %d UNREADABLE", u.Lost)
			}
			fmt.Fprintln(w)
		}
		for _, l := range lost {
			fmt.Fprintf(w, "UNREADABLE record %s\n", l)
		}
		if len(lost) > 0 {
			bad = append(bad, fmt.Sprintf("%d unreadable records (up to %d keys)", len(lost), LostKeys(lost)))
		}
		return err
	})
	if inspect != nil {
		guard(&bad, "rate state", func() error {
			p, err := inspect(w, db)
			bad = append(bad, p...)
			return err
		})
	}
	if len(bad) > 0 {
		fmt.Fprintf(w, "DAMAGED: %s\n", strings.Join(bad, "; "))
		return Damaged(path, strings.Join(bad, "; "))
	}
	fmt.Fprintln(w, "OK")
	return nil
}

// checkBuckets writes each top-level bucket's counts to w; failures to bad.
func checkBuckets(w io.Writer, db *bolt.DB, bad *[]string) {
	guard(bad, "listing buckets", func() error {
		return db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				guard(bad, "bucket "+string(name), func() error {
					keys, buckets := 0, 0
					err := b.ForEach(func(k, v []byte) error {
						if v == nil {
							buckets++
						} else {
							keys++
						}
						return nil
					})
					fmt.Fprintf(w, "bucket %s: %d keys, %d nested buckets\n", name, keys, buckets)
					return err
				})
				return nil
			})
		})
	})
}
