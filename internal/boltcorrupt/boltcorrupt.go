// Package boltcorrupt damages BoltDB files the way a bad disk does, for the
// tests of the code that must refuse them without panicking.
package boltcorrupt

import (
	"encoding/binary"
	"os"
)

// BoltDB's on-disk page format (go.etcd.io/bbolt internal/common), as
// statedb.CheckPages reads it: a page header is id (8 bytes), flags (2),
// count (2), overflow (4), little-endian.
const (
	PageHeaderSize = 16   // bytes of a page header
	BranchPageFlag = 0x01 // the flags of a branch page
	LeafPageFlag   = 0x02 // the flags of a leaf page
)

// ZeroBucketPages zeroes, in the BoltDB file image b (OS-sized pages),
// every page but the two meta pages and the latest free list, whose damage
// bbolt.Open panics on. It panics on an image too short for the meta
// pages.
func ZeroBucketPages(b []byte) {
	ps := os.Getpagesize()
	// A meta page: page header (16 bytes), then magic, version, page
	// size, flags (4 bytes each), the root bucket (16), the free list's
	// page id (8), the high-water mark (8), txid (8); little-endian.
	meta := func(i int) (freelist, txid uint64) {
		m := b[i*ps+16:]
		return binary.LittleEndian.Uint64(m[32:]), binary.LittleEndian.Uint64(m[48:])
	}
	fl, tx0 := meta(0)
	if fl1, tx1 := meta(1); tx1 > tx0 {
		fl = fl1
	}
	var overflow uint64
	if at := int(fl)*ps + 12; at+4 <= len(b) {
		overflow = uint64(binary.LittleEndian.Uint32(b[at:]))
	}
	for pg := uint64(2); pg < uint64(len(b)/ps); pg++ {
		if pg < fl || pg > fl+overflow {
			clear(b[int(pg)*ps : int(pg+1)*ps])
		}
	}
}

// SelfReference makes the first branch page of the BoltDB file image b
// refer to itself as its first child, the cycle a cursor descends forever,
// and reports whether b has a branch page.
func SelfReference(b []byte) bool {
	ps := os.Getpagesize()
	for pg := 2; pg < len(b)/ps; pg++ {
		// A branch element: pos (4), ksize (4), pgid (8).
		p := b[pg*ps:]
		if binary.LittleEndian.Uint64(p) == uint64(pg) && binary.LittleEndian.Uint16(p[8:]) == BranchPageFlag {
			binary.LittleEndian.PutUint64(p[PageHeaderSize+8:], uint64(pg))
			return true
		}
	}
	return false
}
