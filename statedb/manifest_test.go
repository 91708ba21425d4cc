package statedb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

// The damage no record's checksum finds: records hidden by a page's
// element count, a bucket whose name or sequence changed, a meta page that
// makes BoltDB read the transaction before the last.

var testFormats = []Format{
	{Bucket: "recs", Check: func(k, v []byte) (int, error) {
		_, _, err := Unseal(k, v)
		return 1, err
	}},
	{Bucket: "limits", Nested: true, Check: func(k, v []byte) (int, error) {
		_, _, err := Unseal(k, v)
		return 1, err
	}},
}

// writeTestFile writes n sealed records to bucket recs (sequence keys) and
// to limits/hourly, through a Tally, in two transactions, then compacts
// the file (so that the damage lands in its live pages, not freed ones).
func writeTestFile(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	written := writeTestTx(t, path+".tmp", n)
	src, err := bolt.Open(written, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := bolt.Compact(dst, src, 0); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeTestTx(t *testing.T, path string, n int) string {
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for range 2 {
		err := Update(db, func(tx *bolt.Tx, tl *Tally) error {
			b, err := tx.CreateBucketIfNotExists([]byte("recs"))
			if err != nil {
				return err
			}
			root, err := tx.CreateBucketIfNotExists([]byte("limits"))
			if err != nil {
				return err
			}
			h, err := root.CreateBucketIfNotExists([]byte("hourly"))
			if err != nil {
				return err
			}
			for i := range n / 2 {
				seq, _ := b.NextSequence()
				k := binary.BigEndian.AppendUint64(nil, seq)
				if err := tl.Append(b, []string{"recs"}, k, Seal(nil, k, 1, []byte("payload"))); err != nil {
					return err
				}
				k = fmt.Appendf(nil, "user%04d@example.org", i+int(seq))
				if err := tl.Put(h, []string{"limits", "hourly"}, k, Seal(nil, k, 1, []byte("state"))); err != nil {
					return err
				}
			}
			tl.Touch([]string{"limits"})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// scanFile opens path as the daemon does and scans it; the error is the
// refusal (Open's, or RecordsLost's).
func scanFile(t *testing.T, path string) ([]Lost, error) {
	t.Helper()
	db, err := Open(path, false, 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	lost, _, err := Scan(db, testFormats)
	if err != nil {
		return nil, Damaged(path, err)
	}
	if len(lost) > 0 {
		return lost, RecordsLost(path, lost)
	}
	return nil, nil
}

func damageFile(t *testing.T, path string, fn func(b []byte)) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fn(b)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// bucketKey returns the offset in the file b of the name of the bucket
// name in its parent's leaf page (a leaf element with the bucket flag).
func bucketKey(t *testing.T, b []byte, name string) int {
	t.Helper()
	ps := os.Getpagesize()
	for pg := 2 * ps; pg+ps <= len(b); pg += ps {
		p := b[pg : pg+ps]
		if binary.LittleEndian.Uint16(p[8:]) != leafPageFlag {
			continue
		}
		for i := range int(binary.LittleEndian.Uint16(p[10:])) {
			at := pageHeaderSize + i*leafElemSize
			e := p[at:]
			pos, ksize := int(binary.LittleEndian.Uint32(e[4:])), int(binary.LittleEndian.Uint32(e[8:]))
			if binary.LittleEndian.Uint32(e)&bucketLeafFlag != 0 && at+pos+ksize <= ps &&
				string(p[at+pos:at+pos+ksize]) == name {
				return pg + at + pos
			}
		}
	}
	t.Fatalf("bucket %s not found", name)
	return 0
}

// leafWith returns the offset of the page header of the leaf page holding
// key (its first occurrence).
func leafWith(t *testing.T, b, key []byte) int {
	t.Helper()
	i := bytes.Index(b, key)
	if i < 0 {
		t.Fatalf("%q not in the file", key)
	}
	return i - i%os.Getpagesize()
}

func TestUndamagedFileScansClean(t *testing.T) {
	path := writeTestFile(t, 200)
	if lost, err := scanFile(t, path); err != nil {
		t.Fatalf("%v %v", lost, err)
	}
	var out strings.Builder
	if err := Check(&out, path, testFormats, nil); err != nil {
		t.Fatalf("state check: %v\n%s", err, out.String())
	}
}

// TestHiddenElementsRefused: one bit less in a leaf page's element count
// hides its last elements, and every one left still reads.
func TestHiddenElementsRefused(t *testing.T) {
	path := writeTestFile(t, 200)
	damageFile(t, path, func(b []byte) {
		pg := leafWith(t, b, []byte("user0151@example.org"))
		count := binary.LittleEndian.Uint16(b[pg+10:])
		binary.LittleEndian.PutUint16(b[pg+10:], count&(count-1)) // its lowest bit set cleared

	})
	_, err := scanFile(t, path)
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("a page hiding elements opened: %v", err)
	}
	if !strings.Contains(err.Error(), "hides") || !strings.Contains(err.Error(), "--salvage NEW.db") {
		t.Errorf("the refusal does not say so: %v", err)
	}
	if err := Check(io.Discard, path, testFormats, nil); !errors.Is(err, ErrDamaged) {
		t.Errorf("state check: %v", err)
	}
}

// TestRenamedBucketRefused: one bit of a bucket's name hides the bucket
// whole, yet every page is reachable and every record reads.
func TestRenamedBucketRefused(t *testing.T) {
	for name, keys := range map[string]int{"recs": 200, "hourly": 150} {
		t.Run(name, func(t *testing.T) {
			path := writeTestFile(t, 200)
			damageFile(t, path, func(b []byte) { b[bucketKey(t, b, name)+1] ^= 1 })
			lost, err := scanFile(t, path)
			if !errors.Is(err, ErrRecordsLost) {
				t.Fatalf("a renamed bucket opened: %v", err)
			}
			if !strings.Contains(err.Error(), "bucket is missing") || !strings.Contains(err.Error(), "--accept-state-loss") {
				t.Errorf("the refusal does not say so: %v", err)
			}
			if LostKeys(lost) != keys {
				t.Errorf("%d keys lost reported, want %d", LostKeys(lost), keys)
			}
		})
	}
}

// TestBucketSequenceRefused: a bucket's sequence, behind its keys, would
// make NextSequence reuse a key and overwrite a record.
func TestBucketSequenceRefused(t *testing.T) {
	path := writeTestFile(t, 200)
	damageFile(t, path, func(b []byte) {
		i := bucketKey(t, b, "recs") + len("recs") + 8 // root pgid, then sequence
		if got := binary.LittleEndian.Uint64(b[i:]); got != 200 {
			t.Fatalf("sequence %d at the bucket's header, want 200", got)
		}
		b[i+6] ^= 0x40
	})
	_, err := scanFile(t, path)
	if !errors.Is(err, ErrRecordsLost) || !strings.Contains(err.Error(), "sequence") {
		t.Fatalf("a damaged sequence: %v", err)
	}
}

// TestAcceptRecountsManifest: once set aside, the file scans clean, and
// the manifest counts what is left.
func TestAcceptRecountsManifest(t *testing.T) {
	path := writeTestFile(t, 200)
	damageFile(t, path, func(b []byte) {
		b[bucketKey(t, b, "hourly")+1] ^= 1
	})
	db, err := Open(path, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lost, _, err := Scan(db, testFormats)
	if err != nil || len(lost) == 0 {
		t.Fatalf("scan: %v %v", lost, err)
	}
	if err := SetAside(db, testFormats, lost); err != nil {
		t.Fatal(err)
	}
	if lost, _, err := Scan(db, testFormats); err != nil || len(lost) > 0 {
		t.Fatalf("after SetAside: %v %v", lost, err)
	}
}

// TestMetaFallbackReported: the latest meta page damaged makes BoltDB read
// the transaction before; state check says so.
func TestMetaFallbackReported(t *testing.T) {
	path := writeTestFile(t, 20)
	damageFile(t, path, func(b []byte) {
		ps := os.Getpagesize()
		t0, t1 := binary.LittleEndian.Uint64(b[16+48:]), binary.LittleEndian.Uint64(b[ps+16+48:])
		at := 0
		if t1 > t0 {
			at = ps
		}
		b[at+16+20] ^= 1 // the root bucket's page id: the checksum fails
	})
	warn, err := MetaFallback(path)
	if err != nil || !strings.Contains(warn, "without the changes of the last") {
		t.Fatalf("MetaFallback: %q %v", warn, err)
	}
	var out strings.Builder
	Check(&out, path, testFormats, nil)
	if !strings.Contains(out.String(), "WARNING: meta page") {
		t.Errorf("state check does not report the meta page:\n%s", out.String())
	}
}

// TestSalvageWritesManifest: a salvaged file has a manifest of its own,
// for what was copied, and scans clean.
func TestSalvageWritesManifest(t *testing.T) {
	path := writeTestFile(t, 200)
	damageFile(t, path, func(b []byte) { b[bucketKey(t, b, "recs")+1] ^= 1 })
	dst := filepath.Join(t.TempDir(), "new.db")
	if err := Salvage(io.Discard, path, dst, testFormats); err != nil {
		t.Fatal(err)
	}
	if lost, err := scanFile(t, dst); err != nil {
		t.Fatalf("the salvaged file: %v %v", lost, err)
	}
}
