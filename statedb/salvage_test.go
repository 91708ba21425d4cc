package statedb

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// A top-level bucket that cannot be read whole is salvaged by its nested
// buckets: the readable ones are copied, the damaged one skipped.
func TestSalvageNestedParts(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src.db"), filepath.Join(dir, "dst.db")
	db, err := bolt.Open(src, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	var badRoot uint64
	err = db.Update(func(tx *bolt.Tx) error {
		top, err := tx.CreateBucket([]byte("limits"))
		if err != nil {
			return err
		}
		for _, name := range []string{"bad", "good"} {
			b, err := top.CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			for i := range 200 { // pages of its own, not inline
				k := fmt.Appendf(nil, "key%04d", i)
				if err := b.Put(k, Seal(nil, k, 1, bytes.Repeat([]byte{'v'}, 100))); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil {
		err = db.View(func(tx *bolt.Tx) error {
			badRoot = uint64(tx.Bucket([]byte("limits")).Bucket([]byte("bad")).RootPage())
			return nil
		})
	}
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	image, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	clear(image[int(badRoot)*ps : int(badRoot+1)*ps])
	if err := os.WriteFile(src, image, 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := Salvage(&out, src, dst, testFormats); err != nil {
		t.Fatalf("Salvage: %v\n%s", err, out.String())
	}
	for _, want := range []string{"bucket limits cannot be read whole", "salvaged limits/good: 200 keys", "skipped limits/bad: "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
	if lost, err := scanFile(t, dst); err != nil {
		t.Errorf("the salvaged file: lost %v, %v", lost, err)
	}
}
