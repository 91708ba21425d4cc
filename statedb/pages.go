package statedb

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"slices"
)

// CheckPages walks the page tree of the BoltDB file at path without BoltDB
// (page cycles, free list and page extents, element packing) and returns
// the first problem wrapping ErrDamaged, and ErrUnreadable when it would
// hang or crash BoltDB. A missing or unreadable file is the os error.
func CheckPages(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	w := &pageWalker{f: f, size: fi.Size(), seen: map[uint64]bool{}}
	w.walk()
	switch {
	case w.first == nil:
		return nil
	case w.unsafe != nil && w.unsafe != w.first:
		return fmt.Errorf("%w: %s: %v (and %w)", ErrDamaged, path, w.first, w.unsafe)
	}
	return fmt.Errorf("%w: %s: %w", ErrDamaged, path, w.first)
}

// unsafeErr returns an error wrapping ErrUnreadable.
func unsafeErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrUnreadable, fmt.Sprintf(format, a...))
}

// BoltDB's on-disk format (go.etcd.io/bbolt internal/common), little-endian.
const (
	pageHeaderSize  = 16 // id u64, flags u16, count u16, overflow u32
	branchElemSize  = 16 // pos u32, ksize u32, pgid u64
	leafElemSize    = 16 // flags u32, pos u32, ksize u32, vsize u32
	bucketValueSize = 16 // root pgid u64, sequence u64
	branchPageFlag  = 0x01
	leafPageFlag    = 0x02
	metaPageFlag    = 0x04
	freelistFlag    = 0x10
	bucketLeafFlag  = 0x01
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	metaChecksumAt  = 56 // bytes of the meta summed (FNV-64a) before its checksum
	maxTreeDepth    = 64
)

type pageWalker struct {
	f        io.ReaderAt
	size     int64
	pageSize int64
	hwm      uint64 // pages in use (the meta's pgid)
	seen     map[uint64]bool
	// first problem found; unsafe: the first wrapping ErrUnreadable.
	first, unsafe error
}

// record notes a problem and goes on.
func (w *pageWalker) record(err error) {
	if w.first == nil {
		w.first = err
	}
	if w.unsafe == nil && errors.Is(err, ErrUnreadable) {
		w.unsafe = err
	}
}

func (w *pageWalker) walk() {
	root, freelist, err := w.meta()
	if err != nil {
		w.record(unsafeErr("%v", err)) // BoltDB cannot open it: nothing to read
		return
	}
	if err := w.freelist(freelist); err != nil {
		w.record(unsafeErr("%v", err))
	}
	if root == 0 {
		w.record(errors.New("root bucket has no page"))
		return
	}
	w.visit(root, 0)
}

// metaPage is what readMeta reads of a meta page.
type metaPage struct {
	ok                   bool // magic, version and checksum sound
	txid, root, freelist uint64
	hwm                  uint64 // pages in use
	pageSize             int64
}

// readMeta reads the meta page at offset off of f.
func readMeta(f io.ReaderAt, off int64) metaPage {
	buf := make([]byte, pageHeaderSize+metaChecksumAt+8)
	if n, _ := f.ReadAt(buf, off); n < len(buf) {
		return metaPage{}
	}
	m := buf[pageHeaderSize:]
	h := fnv.New64a()
	h.Write(m[:metaChecksumAt])
	return metaPage{
		ok: binary.LittleEndian.Uint32(m) == boltMagic && binary.LittleEndian.Uint32(m[4:]) == boltVersion &&
			h.Sum64() == binary.LittleEndian.Uint64(m[metaChecksumAt:]),
		pageSize: int64(binary.LittleEndian.Uint32(m[8:])),
		root:     binary.LittleEndian.Uint64(m[16:]),
		freelist: binary.LittleEndian.Uint64(m[32:]),
		hwm:      binary.LittleEndian.Uint64(m[40:]),
		txid:     binary.LittleEndian.Uint64(m[48:]),
	}
}

// metaPages reads both meta pages of f.
func metaPages(f io.ReaderAt) (m0, m1 metaPage) {
	m0 = readMeta(f, 0)
	off := int64(os.Getpagesize())
	if m0.ok {
		off = m0.pageSize
	}
	return m0, readMeta(f, off)
}

// meta returns the root and free list pages of the latest valid meta.
func (w *pageWalker) meta() (root, freelist uint64, err error) {
	var best metaPage
	m0, m1 := metaPages(w.f)
	for _, m := range []metaPage{m0, m1} {
		if m.ok && m.pageSize >= 1024 && m.pageSize <= 1<<20 && (!best.ok || m.txid > best.txid) {
			best = m
		}
	}
	if !best.ok {
		return 0, 0, errors.New("no valid meta page")
	}
	w.pageSize, w.hwm = best.pageSize, best.hwm
	if need := int64(w.hwm) * w.pageSize; w.hwm > uint64(w.size/w.pageSize) || need > w.size {
		return 0, 0, fmt.Errorf("truncated: %d bytes, its %d pages need %d", w.size, w.hwm, need)
	}
	return best.root, best.freelist, nil
}

// freelist checks that the free list page's ids fit in it.
func (w *pageWalker) freelist(id uint64) error {
	const noFreelist = ^uint64(0)
	if id == noFreelist {
		return nil
	}
	p, err := w.page(id)
	if err != nil {
		return fmt.Errorf("free list: %v", err)
	}
	flags, count := binary.LittleEndian.Uint16(p[8:]), uint64(binary.LittleEndian.Uint16(p[10:]))
	if flags != freelistFlag {
		return fmt.Errorf("free list: page %d is not a free list page (flags %#x)", id, flags)
	}
	start := uint64(pageHeaderSize)
	if count == 0xFFFF {
		count = binary.LittleEndian.Uint64(p[pageHeaderSize:])
		start += 8
	}
	if count > (uint64(len(p))-start)/8 {
		return fmt.Errorf("free list: page %d claims %d ids, room for %d", id, count, (uint64(len(p))-start)/8)
	}
	return nil
}

// page reads page id with its overflow pages, checking its extent.
func (w *pageWalker) page(id uint64) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, unsafeErr("page %d out of range [2, %d)", id, w.hwm)
	}
	hdr := make([]byte, pageHeaderSize)
	if _, err := w.f.ReadAt(hdr, int64(id)*w.pageSize); err != nil {
		return nil, fmt.Errorf("page %d: %v", id, err)
	}
	overflow := uint64(binary.LittleEndian.Uint32(hdr[12:]))
	if id+overflow >= w.hwm {
		return nil, unsafeErr("page %d: %d overflow pages run past page %d", id, overflow, w.hwm)
	}
	p := make([]byte, int64(overflow+1)*w.pageSize)
	if _, err := w.f.ReadAt(p, int64(id)*w.pageSize); err != nil {
		return nil, fmt.Errorf("page %d: %v", id, err)
	}
	return p, nil
}

// visit checks the page tree rooted at page id, recording its problems.
func (w *pageWalker) visit(id uint64, depth int) {
	if depth > maxTreeDepth {
		w.record(unsafeErr("page %d: tree deeper than %d", id, maxTreeDepth))
		return
	}
	if w.seen[id] {
		w.record(unsafeErr("page %d: referenced twice (a cycle or a shared page)", id))
		return
	}
	p, err := w.page(id)
	if err != nil {
		w.record(err) // BoltDB asserts a page's id and type when it reads it
		return
	}
	for i := range uint64(binary.LittleEndian.Uint32(p[12:])) + 1 {
		if w.seen[id+i] {
			w.record(unsafeErr("page %d: referenced twice (a cycle or a shared page)", id+i))
			return
		}
		w.seen[id+i] = true
	}
	w.elements(p, id, depth)
}

// elements checks page p's elements (id 0: inline) and visits their pages.
func (w *pageWalker) elements(p []byte, id uint64, depth int) {
	flags, count := binary.LittleEndian.Uint16(p[8:]), int(binary.LittleEndian.Uint16(p[10:]))
	inline := id == 0
	fail := func(unsafe bool, format string, a ...any) {
		if err := fmt.Errorf("page %d: %s", id, fmt.Sprintf(format, a...)); unsafe || inline {
			w.record(unsafeErr("%v", err))
		} else {
			w.record(err)
		}
	}
	if pageHeaderSize+count*leafElemSize > len(p) {
		// BoltDB would read elements, and children, past the page.
		fail(true, "%d elements do not fit", count)
		return
	}
	if flags == branchPageFlag || flags == leafPageFlag {
		if err := packed(p, flags == leafPageFlag, count, inline); err != nil {
			// BoltDB would silently miss the uncounted elements.
			w.record(fmt.Errorf("page %d: %v", id, err))
		}
	}
	switch {
	case flags == branchPageFlag: // BoltDB compares the flags exactly
		for i := range count {
			e := p[pageHeaderSize+i*branchElemSize:]
			if err := w.span(p, pageHeaderSize+i*branchElemSize, e[0:], e[4:], nil); err != nil {
				fail(false, "element %d: %v", i, err)
			}
			w.visit(binary.LittleEndian.Uint64(e[8:]), depth+1)
		}
	case flags == leafPageFlag:
		for i := range count {
			at := pageHeaderSize + i*leafElemSize
			e := p[at:]
			bucket := binary.LittleEndian.Uint32(e)&bucketLeafFlag != 0
			if err := w.span(p, at, e[4:], e[8:], e[12:]); err != nil {
				fail(bucket, "element %d: %v", i, err) // a bucket's root would be garbage
				continue
			}
			if !bucket {
				continue
			}
			pos, ksize := binary.LittleEndian.Uint32(e[4:]), binary.LittleEndian.Uint32(e[8:])
			vsize := binary.LittleEndian.Uint32(e[12:])
			if vsize < bucketValueSize {
				fail(true, "element %d: bucket value of %d bytes", i, vsize)
				continue
			}
			v := p[at+int(pos)+int(ksize) : at+int(pos)+int(ksize)+int(vsize)]
			if root := binary.LittleEndian.Uint64(v); root != 0 {
				w.visit(root, depth+1)
			} else if in := v[bucketValueSize:]; len(in) >= pageHeaderSize {
				if depth > maxTreeDepth {
					fail(true, "buckets nested deeper than %d", maxTreeDepth)
					continue
				}
				w.elements(in, 0, depth+1)
			} else if len(in) > 0 {
				fail(true, "element %d: inline bucket of %d bytes", i, len(in))
			}
		}
	case flags == metaPageFlag || flags == freelistFlag:
		// Tx.Check lets these through.
		fail(true, "a meta or free list page in a bucket (flags %#x)", flags)
	default:
		fail(false, "not a branch or leaf page (flags %#x)", flags) // BoltDB panics on it
	}
}

// span checks that the key and value of the element at at lie within p.
func (w *pageWalker) span(p []byte, at int, pos, ksize, vsize []byte) error {
	end := uint64(at) + uint64(binary.LittleEndian.Uint32(pos)) + uint64(binary.LittleEndian.Uint32(ksize))
	if vsize != nil {
		end += uint64(binary.LittleEndian.Uint32(vsize))
	}
	if end > uint64(len(p)) {
		return fmt.Errorf("key or value past the end of the page (%d > %d)", end, len(p))
	}
	return nil
}

// packed checks that the elements of page p lie as BoltDB writes them
// (WriteInodeToPage), each right after the previous.
func packed(p []byte, leaf bool, count int, inline bool) error {
	next := uint64(pageHeaderSize + count*leafElemSize) // branch elements are as long
	for i := range count {
		at := pageHeaderSize + i*leafElemSize
		e := p[at:]
		pos, size := e[0:], uint64(binary.LittleEndian.Uint32(e[4:]))
		if leaf {
			pos = e[4:]
			size = uint64(binary.LittleEndian.Uint32(e[8:])) + uint64(binary.LittleEndian.Uint32(e[12:]))
		}
		if got := uint64(at) + uint64(binary.LittleEndian.Uint32(pos)); got != next {
			return fmt.Errorf("element %d of %d: its data at byte %d, not %d where the elements before it end "+
				"(a damaged element count or position hides or misreads elements)", i, count, got, next)
		}
		next += size
	}
	switch {
	case inline && next != uint64(len(p)):
		return fmt.Errorf("inline bucket of %d bytes, its %d elements end at %d "+
			"(a damaged element count hides elements)", len(p), count, next)
	case !inline && count == 0 && len(p) >= pageHeaderSize+leafElemSize &&
		slices.ContainsFunc(p[pageHeaderSize:pageHeaderSize+leafElemSize], func(c byte) bool { return c != 0 }):
		return fmt.Errorf("no elements, yet a first element follows its header (a damaged element count hides elements)")
	}
	return nil
}

// MetaFallback reports a meta page of the BoltDB file at path that fails
// its checksum while the other is sound, or ""; the os error if unreadable.
func MetaFallback(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	m0, m1 := metaPages(f)
	if m0.ok == m1.ok {
		return "", nil
	}
	bad, good, page := m0, m1, 0
	if m0.ok {
		bad, good, page = m1, m0, 1
	}
	switch bad.txid {
	case good.txid + 1:
		return fmt.Sprintf("meta page %d fails its checksum; it was transaction %d's, the last: BoltDB reads transaction %d, "+
			"without the changes of the last (a write torn by a crash, whose commit never returned, or damage since; "+
			"BoltDB writes the page again at the next commit)", page, bad.txid, good.txid), nil
	case good.txid - 1:
		return fmt.Sprintf("meta page %d fails its checksum; it was transaction %d's, the one before the last (%d): "+
			"nothing is lost (BoltDB writes the page again at the next commit)", page, bad.txid, good.txid), nil
	}
	return fmt.Sprintf("meta page %d fails its checksum, and its transaction cannot be told: BoltDB reads transaction %d; "+
		"if the damaged page was the later one, the changes of that last transaction are not in what it reads", page, good.txid), nil
}
