package statedb

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// node is a bucket read into memory for Salvage.
type node struct {
	seq     uint64 // the bucket's sequence (the journal's record keys)
	kvs     [][2][]byte
	buckets map[string]*node
}

// readNode copies bucket b (and its nested buckets) out of BoltDB's mapping.
func readNode(b *bolt.Bucket) (*node, error) {
	n := &node{seq: b.Sequence(), buckets: map[string]*node{}}
	err := b.ForEach(func(k, v []byte) error {
		if v != nil {
			n.kvs = append(n.kvs, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
			return nil
		}
		child, err := readNode(b.Bucket(k))
		n.buckets[string(k)] = child
		return err
	})
	return n, err
}

// write puts n into b.
func (n *node) write(b *bolt.Bucket) (keys int, err error) {
	if err := b.SetSequence(n.seq); err != nil {
		return 0, err
	}
	for _, kv := range n.kvs {
		if err := b.Put(kv[0], kv[1]); err != nil {
			return keys, err
		}
		keys++
	}
	for name, child := range n.buckets {
		cb, err := b.CreateBucketIfNotExists([]byte(name))
		if err != nil {
			return keys, err
		}
		k, err := child.write(cb)
		if keys += k; err != nil {
			return keys, err
		}
	}
	return keys, nil
}

// salvager copies the readable buckets of one damaged file into a new one.
type salvager struct {
	w       io.Writer
	formats map[string]Format
	aside   map[string][][2][]byte // unreadable records kept, by SetAside bucket
	in, out *bolt.DB
	dst     string
	copied  int // keys copied
	skipped int // buckets skipped
}

// Salvage copies every readable bucket and record of src into the new
// file dst, reporting to w. It refuses an unreadable src (CheckPages) and
// an existing dst.
func Salvage(w io.Writer, src, dst string, formats []Format) error {
	if err := CheckPages(src); errors.Is(err, ErrUnreadable) {
		return fmt.Errorf("salvage: %w (nothing copied)", err)
	}
	if _, err := os.Stat(dst); err == nil {
		return fmt.Errorf("salvage: %s exists; give a new file", dst)
	}
	in, err := openBolt(src, true, time.Second)
	if err != nil {
		return fmt.Errorf("salvage: %s: %w", src, err)
	}
	defer in.Close()
	out, err := bolt.Open(dst, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		return fmt.Errorf("salvage: %w", err)
	}
	defer out.Close()
	s := &salvager{w: w, in: in, out: out, dst: dst, formats: map[string]Format{}, aside: map[string][][2][]byte{}}
	for _, f := range formats {
		s.formats[f.Bucket] = f
	}
	var tops []string
	if err := s.read(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			tops = append(tops, string(name))
			return nil
		})
	}); err != nil {
		return fmt.Errorf("salvage: the list of buckets cannot be read: %w", err)
	}
	for _, top := range tops {
		if top == ManifestBucket {
			continue // written afresh for what was copied
		}
		if err := s.copy([]string{top}); err != nil {
			return err
		}
	}
	for name, kvs := range s.aside {
		fmt.Fprintf(w, "unreadable records kept aside in %s: %d\n", name, len(kvs))
		if err := s.save([]string{name}, &node{kvs: kvs}); err != nil {
			return fmt.Errorf("salvage: write %s: %w", s.dst, err)
		}
	}
	// A fresh manifest: every bucket of formats counted.
	if err := Update(out, func(tx *bolt.Tx, t *Tally) error {
		for _, f := range formats {
			b := tx.Bucket([]byte(f.Bucket))
			if b == nil {
				continue
			}
			t.Recount([]string{f.Bucket})
			if f.Nested {
				b.ForEachBucket(func(name []byte) error {
					t.Recount([]string{f.Bucket, string(name)})
					return nil
				})
			}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("salvage: write %s: %w", s.dst, err)
	}
	fmt.Fprintf(w, "salvage: %d keys copied to %s, %d buckets skipped\n", s.copied, dst, s.skipped)
	return nil
}

// read runs fn on the source in a read-only transaction, recovering.
func (s *salvager) read(fn func(*bolt.Tx) error) error {
	return recovered(func() error { return s.in.View(fn) })
}

// save writes n as the bucket at path in the new file.
func (s *salvager) save(path []string, n *node) error {
	return s.out.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(path[0]))
		for _, p := range path[1:] {
			if err == nil {
				b, err = b.CreateBucketIfNotExists([]byte(p))
			}
		}
		if err != nil {
			return err
		}
		k, err := n.write(b)
		fmt.Fprintf(s.w, "salvaged %s: %d keys\n", strings.Join(path, "/"), k)
		s.copied += k
		return err
	})
}

// copy copies the bucket at path whole or, a top-level one, its readable
// nested buckets; write errors only.
func (s *salvager) copy(path []string) error {
	var n *node
	err := s.read(func(tx *bolt.Tx) error {
		var err error
		if n, err = readNode(bucketAt(tx, path)); err == nil {
			s.filter(path, n)
		}
		return err
	})
	if err == nil {
		if err := s.save(path, n); err != nil {
			return fmt.Errorf("salvage: write %s: %w", s.dst, err)
		}
		return nil
	}
	var children []string
	if len(path) == 1 {
		fmt.Fprintf(s.w, "bucket %s cannot be read whole (%v); trying its parts\n", path[0], err)
		err = s.read(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(path[0])).ForEachBucket(func(k []byte) error {
				children = append(children, string(k))
				return nil
			})
		})
	}
	if err != nil {
		fmt.Fprintf(s.w, "skipped %s: %v\n", strings.Join(path, "/"), err)
		s.skipped++
		return nil
	}
	for _, child := range children {
		if err := s.copy([]string{path[0], child}); err != nil {
			return err
		}
	}
	return nil
}

// filter drops the records of n failing their check, reporting each.
func (s *salvager) filter(path []string, n *node) {
	f, ok := s.formats[path[0]]
	if !ok || f.Check == nil {
		return
	}
	if f.Nested && len(path) == 1 {
		for name, child := range n.buckets {
			s.filter([]string{path[0], name}, child)
		}
		return
	}
	kept := n.kvs[:0]
	for _, kv := range n.kvs {
		keys, err := f.Check(kv[0], kv[1])
		if err == nil {
			kept = append(kept, kv)
			continue
		}
		l := Lost{Path: path, Key: kv[0], Bytes: len(kv[1]), Keys: keys, Err: err}
		if f.SetAside == "" {
			fmt.Fprintf(s.w, "left out unreadable record %s\n", l)
			continue
		}
		fmt.Fprintf(s.w, "kept unreadable record %s in %s\n", l, f.SetAside)
		s.aside[f.SetAside] = append(s.aside[f.SetAside], kv)
	}
	n.kvs = kept
}
