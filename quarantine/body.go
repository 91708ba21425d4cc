package quarantine

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// A frozen message is stored one of two ways. Up to ChunkSize bytes: one
// value in bucketBody under the entry's ID, written in the transaction
// that records the entry (and every message frozen before chunking
// existed, whatever its size). Larger: in ChunkSize pieces in
// bucketChunks, each written and committed in a transaction of its own
// while the message is read (bbolt keeps a value and its dirty pages in
// memory until commit, so one value of the whole message would cost
// about twice its size), and the transaction that records the entry puts
// a reference in bucketChunked. Chunks no entry refers to (a crash or a
// failure between the first chunk and the entry) are removed by New.
var (
	// bucketChunks maps upload token (8 bytes) + chunk number (4 bytes,
	// big-endian) -> up to ChunkSize message bytes.
	bucketChunks = []byte("quarantine/body-chunks")
	// bucketChunked maps ID -> upload token (8 bytes) + chunk count (4
	// bytes, big-endian) for messages stored in chunks.
	bucketChunked = []byte("quarantine/body-chunked")
)

// ChunkSize is the size of the pieces a frozen message above it is
// stored in (1 MiB). Chunks are read into one buffer per Store, inside
// the write transaction that stores them, so concurrent freezes of large
// messages share it.
const ChunkSize = 1 << 20

// chunkRef is the value of bucketChunked.
type chunkRef struct {
	token [8]byte
	n     uint32
}

func (r chunkRef) bytes() []byte {
	return binary.BigEndian.AppendUint32(r.token[:], r.n)
}

func parseChunkRef(v []byte) (chunkRef, bool) {
	var r chunkRef
	if len(v) != 12 {
		return r, false
	}
	copy(r.token[:], v)
	r.n = binary.BigEndian.Uint32(v[8:])
	return r, true
}

func chunkKey(token [8]byte, i uint32) []byte {
	return binary.BigEndian.AppendUint32(token[:], i)
}

// streamed is a message read from a reader: its first chunk (in full
// when the message is no longer), or the reference to the committed
// chunks, with its size and SHA-256.
type streamed struct {
	head    []byte // the first bytes, up to ChunkSize
	chunked bool
	ref     chunkRef
	size    int64
	sum     []byte
}

// readBody reads r to its end. A message of at most ChunkSize bytes is
// returned in head; a longer one is written to bucketChunks in committed
// transactions of one chunk each, and only its first maxHeaderScan bytes
// are kept in head (for the header fields). Each chunk is read inside its
// write transaction into the Store's one chunk buffer (bbolt runs one
// write transaction at a time, and a Put value is only read until the
// commit), so concurrent freezes share one ChunkSize buffer: r must be
// quick to read (memory, a local spool file). On error the chunks
// written are removed.
func (s *Store) readBody(r io.Reader) (*streamed, error) {
	h := sha256.New()
	st := &streamed{}
	rand.Read(st.ref.token[:])
	for {
		var n int
		var rerr error
		err := statedb.Update(s.db, func(tx *bolt.Tx, t *statedb.Tally) error {
			b := tx.Bucket(bucketChunks)
			if b == nil {
				return fmt.Errorf("quarantine: buckets missing (database not initialised by quarantine.New)")
			}
			if s.chunkBuf == nil {
				s.chunkBuf = make([]byte, ChunkSize)
			}
			buf := s.chunkBuf
			n, rerr = io.ReadFull(r, buf)
			switch {
			case errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF):
				rerr = io.EOF
			case rerr != nil:
				return nil
			}
			h.Write(buf[:n])
			st.size += int64(n)
			if st.ref.n == 0 && rerr == io.EOF {
				st.head = bytes.Clone(buf[:n]) // the whole message: stored with the entry
				return nil
			}
			if st.ref.n == 0 {
				st.head = bytes.Clone(buf[:min(n, maxHeaderScan)])
			}
			if n == 0 {
				return nil
			}
			if st.ref.n == 1<<32-1 {
				return fmt.Errorf("quarantine: message too large")
			}
			if err := t.Append(b, chunksPath, chunkKey(st.ref.token, st.ref.n), buf[:n]); err != nil {
				return err
			}
			st.ref.n++
			st.chunked = true
			return nil
		})
		if err == nil && rerr != nil && rerr != io.EOF {
			err = fmt.Errorf("quarantine: reading the message: %w", rerr)
		} else if err != nil {
			err = fmt.Errorf("quarantine: store message chunk: %w", err)
		}
		if err != nil {
			if st.chunked {
				s.dropChunks(st.ref)
			}
			return nil, err
		}
		if rerr == io.EOF {
			st.sum = h.Sum(nil)
			return st, nil
		}
	}
}

// maxHeaderScan is how much of a chunked message's start is kept to take
// Subject and Message-ID from.
const maxHeaderScan = 64 << 10

// dropChunks removes the chunks of ref (best effort: New removes what is
// left).
func (s *Store) dropChunks(ref chunkRef) {
	statedb.Update(s.db, func(tx *bolt.Tx, t *statedb.Tally) error {
		if b := tx.Bucket(bucketChunks); b != nil {
			return deleteChunks(t, b, ref)
		}
		return nil
	})
}

// deleteChunks deletes every chunk stored under ref's token.
func deleteChunks(t *statedb.Tally, b *bolt.Bucket, ref chunkRef) error {
	c := b.Cursor()
	for k, _ := c.Seek(ref.token[:]); k != nil && bytes.HasPrefix(k, ref.token[:]); k, _ = c.Seek(ref.token[:]) {
		if err := t.Delete(b, chunksPath, bytes.Clone(k)); err != nil {
			return err
		}
	}
	return nil
}

// putBody stores st for entry id within the transaction that records it.
func (b buckets) putBody(id string, st *streamed) error {
	if st.chunked {
		if b.chunked == nil {
			return fmt.Errorf("quarantine: buckets missing (database not initialised by quarantine.New)")
		}
		return b.t.Put(b.chunked, chunkedPath, []byte(id), st.ref.bytes())
	}
	msg := st.head
	if msg == nil {
		msg = []byte{} // a nil value would read back as "no content"
	}
	return b.t.Put(b.body, bodyPath, []byte(id), msg)
}

// readMessage copies the stored message of id out of the transaction, or
// returns nil when it has none.
func (b buckets) readMessage(id string) ([]byte, error) {
	if b.body != nil {
		if v := b.body.Get([]byte(id)); v != nil {
			return append([]byte{}, v...), nil
		}
	}
	if b.chunked == nil || b.chunks == nil {
		return nil, nil
	}
	ref, ok := parseChunkRef(b.chunked.Get([]byte(id)))
	if !ok {
		return nil, nil
	}
	var msg []byte
	for i := range ref.n {
		v := b.chunks.Get(chunkKey(ref.token, i))
		if v == nil {
			return nil, fmt.Errorf("%w: message %s lacks chunk %d of %d", ErrCorrupt, id, i, ref.n)
		}
		msg = append(msg, v...)
	}
	if msg == nil {
		msg = []byte{}
	}
	return msg, nil
}

// chunkedSize returns the bytes stored in the chunks of id (0 when it
// has none).
func (b buckets) chunkedSize(id string) int64 {
	if b.chunked == nil || b.chunks == nil {
		return 0
	}
	ref, ok := parseChunkRef(b.chunked.Get([]byte(id)))
	if !ok {
		return 0
	}
	var n int64
	for i := range ref.n {
		n += int64(len(b.chunks.Get(chunkKey(ref.token, i))))
	}
	return n
}

// dropChunked removes the chunks of id and its reference, returning the
// bytes freed.
func (b buckets) dropChunked(id string) (int64, error) {
	if b.chunked == nil {
		return 0, nil
	}
	ref, ok := parseChunkRef(b.chunked.Get([]byte(id)))
	if !ok {
		return 0, nil
	}
	n := b.chunkedSize(id)
	if err := deleteChunks(b.t, b.chunks, ref); err != nil {
		return 0, err
	}
	return n, b.t.Delete(b.chunked, chunkedPath, []byte(id))
}

// sweepChunks removes chunks no entry refers to and returns the bytes of
// those that remain (for the running total).
func sweepChunks(tx *bolt.Tx, t *statedb.Tally) (int64, error) {
	chunked, chunks := tx.Bucket(bucketChunked), tx.Bucket(bucketChunks)
	live := map[[8]byte]bool{}
	if err := chunked.ForEach(func(_, v []byte) error {
		if ref, ok := parseChunkRef(v); ok {
			live[ref.token] = true
		}
		return nil
	}); err != nil {
		return 0, err
	}
	var total int64
	var orphans [][]byte
	if err := chunks.ForEach(func(k, v []byte) error {
		var tok [8]byte
		copy(tok[:], k)
		if len(k) == 12 && live[tok] {
			total += int64(len(v))
		} else {
			orphans = append(orphans, bytes.Clone(k))
		}
		return nil
	}); err != nil {
		return 0, err
	}
	for _, k := range orphans {
		if err := t.Delete(chunks, chunksPath, k); err != nil {
			return 0, err
		}
	}
	return total, nil
}

// hexSum is the entry's Hash of a SHA-256 sum.
func hexSum(sum []byte) string { return hex.EncodeToString(sum) }
