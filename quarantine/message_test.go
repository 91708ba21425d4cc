package quarantine

import (
	"bytes"
	"errors"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/ratelimitd/ratelimitd/statedb"
)

// TestLargeMessageStoredInChunks: a message above ChunkSize is stored in
// chunks and read back whole, its SHA-256 checked (a changed chunk is
// ErrCorrupt, never handed out); deleting it frees its bytes; chunks no
// entry refers to (a crash while freezing) are removed by New.
func TestLargeMessageStoredInChunks(t *testing.T) {
	s, db, _ := newStore(t, Options{})
	msg := append(testMessage("large", ""), bytes.Repeat([]byte("0123456789abcdef\r\n"), (3*ChunkSize+ChunkSize/2)/18)...)
	id, err := freeze(s, &Entry{Key: "alice"}, msg)
	if err != nil {
		t.Fatal(err)
	}
	e, _ := s.Get(id)
	if e.Size != int64(len(msg)) || e.Subject != "large" {
		t.Fatalf("entry %+v", e)
	}
	got, err := s.Message(id)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("message read back: %d bytes, %v", len(got), err)
	}
	var ref chunkRef
	db.View(func(tx *bolt.Tx) error {
		ref, _ = parseChunkRef(tx.Bucket(bucketMessages).Get([]byte(id)))
		return nil
	})
	if ref.n != 4 {
		t.Errorf("%d chunks, want 4", ref.n)
	}
	if st, _ := s.Stats(); st.Bytes != int64(len(msg)) {
		t.Errorf("stored bytes %d, want %d", st.Bytes, len(msg))
	}

	// One changed byte in the third chunk.
	db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketChunks)
		v := bytes.Clone(b.Get(chunkKey(ref.token, 2)))
		v[10] ^= 1
		return b.Put(chunkKey(ref.token, 2), v)
	})
	if _, err := s.Message(id); !errors.Is(err, ErrCorrupt) {
		t.Errorf("changed chunk: %v, want ErrCorrupt", err)
	}
	if err := s.Delete(id); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Stats(); st.Bytes != 0 {
		t.Errorf("stored bytes after delete %d", st.Bytes)
	}

	// Orphan chunks (no entry refers to them) go at the next New.
	statedb.Update(db, func(tx *bolt.Tx, t *statedb.Tally) error {
		return t.Put(tx.Bucket(bucketChunks), chunksPath, chunkKey([8]byte{1, 2, 3}, 0), []byte("left by a crash"))
	})
	if _, err := New(db, Options{}); err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *bolt.Tx) error {
		if k, _ := tx.Bucket(bucketChunks).Cursor().First(); k != nil {
			t.Errorf("orphan chunk %x kept", k)
		}
		return nil
	})
}
