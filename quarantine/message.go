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

// A frozen message is stored in chunks under a random token, each
// committed alone but the last, written with the entry.
var (
	bucketChunks   = []byte("quarantine/chunks")   // token (8 bytes) + number (4, big-endian) -> bytes
	bucketMessages = []byte("quarantine/messages") // ID -> token + chunk count (4 bytes, big-endian)
)

const (
	// ChunkSize is a message chunk's size (bytes); freezes share one buffer.
	ChunkSize = 1 << 20
	// maxHeaderScan is the start of a message kept for HeaderInfo.
	maxHeaderScan = 64 << 10
)

// chunkRef is the value of bucketMessages.
type chunkRef struct {
	token [8]byte
	n     uint32
}

// parseChunkRef reads a chunkRef, or a chunk key of the same layout.
func parseChunkRef(v []byte) (r chunkRef, ok bool) {
	if ok = len(v) == 12; ok {
		copy(r.token[:], v)
		r.n = binary.BigEndian.Uint32(v[8:])
	}
	return r, ok
}

func chunkKey(token [8]byte, i uint32) []byte { return binary.BigEndian.AppendUint32(token[:], i) }

// streamed is a message read by readBody.
type streamed struct {
	ref        chunkRef
	last, head []byte
	size       int64
	sum        string
}

// readBody reads r (a quick local file) inside write transactions,
// committing every full chunk; on error they are removed.
func (s *Store) readBody(r io.Reader) (*streamed, error) {
	h := sha256.New()
	st := &streamed{}
	rand.Read(st.ref.token[:])
	for done := false; !done; {
		var rerr error
		err := s.write("store message chunk", func(b buckets) error {
			if s.chunkBuf == nil {
				s.chunkBuf = make([]byte, ChunkSize)
			}
			n, err := io.ReadFull(r, s.chunkBuf)
			buf := s.chunkBuf[:n]
			if done = errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF); !done && err != nil {
				rerr = err
				return nil
			}
			h.Write(buf)
			st.size += int64(n)
			if st.head == nil {
				st.head = bytes.Clone(buf[:min(n, maxHeaderScan)])
			}
			if done {
				st.last = bytes.Clone(buf)
				return nil
			}
			if st.ref.n == 1<<32-2 {
				return errors.New("quarantine: message too large")
			}
			if err := b.t.Append(b.chunks, chunksPath, chunkKey(st.ref.token, st.ref.n), buf); err != nil {
				return err
			}
			st.ref.n++
			return nil
		})
		if rerr != nil {
			err = fmt.Errorf("quarantine: reading the message: %w", rerr)
		}
		if err != nil {
			s.dropChunks(st.ref)
			return nil, err
		}
	}
	st.sum = hex.EncodeToString(h.Sum(nil))
	return st, nil
}

// dropChunks removes ref's committed chunks (best effort).
func (s *Store) dropChunks(ref chunkRef) {
	if ref.n == 0 {
		return
	}
	s.write("drop chunks", func(b buckets) error {
		_, err := deleteChunks(b.t, b.chunks, ref)
		return err
	})
}

// deleteChunks deletes the chunks of ref and returns their bytes.
func deleteChunks(t *statedb.Tally, b *bolt.Bucket, ref chunkRef) (int64, error) {
	var n int64
	for i := range ref.n {
		k := chunkKey(ref.token, i)
		if v := b.Get(k); v != nil {
			n += int64(len(v))
			if err := t.Delete(b, chunksPath, k); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// putBody stores st's last chunk and the reference for entry id.
func (b buckets) putBody(id string, st *streamed) error {
	ref := st.ref
	if err := b.t.Put(b.chunks, chunksPath, chunkKey(ref.token, ref.n), st.last); err != nil {
		return err
	}
	return b.t.Put(b.messages, messagesPath, []byte(id), binary.BigEndian.AppendUint32(ref.token[:], ref.n+1))
}

// readMessage copies id's stored message out (nil if none). Errors: ErrCorrupt.
func (b buckets) readMessage(id string) ([]byte, error) {
	if b.messages == nil || b.chunks == nil {
		return nil, nil
	}
	ref, ok := parseChunkRef(b.messages.Get([]byte(id)))
	if !ok {
		return nil, nil
	}
	msg := []byte{}
	for i := range ref.n {
		v := b.chunks.Get(chunkKey(ref.token, i))
		if v == nil {
			return nil, fmt.Errorf("%w: message %s lacks chunk %d of %d", ErrCorrupt, id, i, ref.n)
		}
		msg = append(msg, v...)
	}
	return msg, nil
}

// dropBody removes id's stored message and returns the bytes freed.
func (b buckets) dropBody(id string) (int64, error) {
	ref, ok := parseChunkRef(b.messages.Get([]byte(id)))
	if !ok {
		return 0, nil
	}
	n, err := deleteChunks(b.t, b.chunks, ref)
	if err != nil {
		return 0, err
	}
	if err := b.t.Delete(b.messages, messagesPath, []byte(id)); err != nil {
		return 0, err
	}
	return n, putBytes(b.t, b.info, getBytes(b.info)-n)
}

// sweepChunks removes unreferenced chunks; it returns the others' bytes.
func sweepChunks(tx *bolt.Tx, t *statedb.Tally) (int64, error) {
	live := map[[8]byte]uint32{}
	if err := tx.Bucket(bucketMessages).ForEach(func(_, v []byte) error {
		if ref, ok := parseChunkRef(v); ok {
			live[ref.token] = ref.n
		}
		return nil
	}); err != nil {
		return 0, err
	}
	var total int64
	var orphans [][]byte
	chunks := tx.Bucket(bucketChunks)
	if err := chunks.ForEach(func(k, v []byte) error {
		if c, ok := parseChunkRef(k); ok && c.n < live[c.token] { // a chunk key: token, number
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

// checkMessage returns ErrCorrupt unless msg matches e's SHA-256 and size.
func checkMessage(e *Entry, msg []byte) error {
	sum := sha256.Sum256(msg)
	if hex.EncodeToString(sum[:]) != e.Hash || int64(len(msg)) != e.Size {
		return fmt.Errorf("%w: message %s (%d bytes) does not match its entry's SHA-256 and size (%d bytes)", ErrCorrupt, e.ID, len(msg), e.Size)
	}
	return nil
}

// CheckMessages checks frozen messages' SHA-256 and size for `ratelimitd
// state check`, reports to w and returns the damaged.
func CheckMessages(w io.Writer, db *bolt.DB) (bad []string, err error) {
	checked, aside := 0, 0
	err = db.View(func(tx *bolt.Tx) error {
		b := bucketsOf(tx)
		if !b.ok() {
			return nil
		}
		return b.messages.ForEach(func(k, _ []byte) error {
			e, err := b.get(string(k))
			switch {
			case errors.Is(err, ErrNotFound):
				aside++
				return nil
			case err != nil:
				return nil // reported by the scan of the records
			}
			checked++
			msg, err := b.readMessage(e.ID)
			if err == nil {
				err = checkMessage(&e, msg)
			}
			if err != nil {
				p := fmt.Sprintf("frozen message %s: %v: a thaw refuses it", k, err)
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
