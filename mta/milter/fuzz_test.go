package milter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// FuzzGuard feeds arbitrary byte streams through the framing guard and
// reads them back the way go-milter does (a 4-byte length, then the
// payload). The guard must never panic, never pass a zero-length or
// oversized packet, and pass exactly a prefix of its input made of whole
// valid packets (plus at most a truncated last one).
func FuzzGuard(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0}, false)
	f.Add(packet([]byte("O\x00\x00\x00\x06\x00\x00\x00\x21\x00\x00\x00\x00")), false)
	f.Add(append(packet([]byte("Mfrom")), 0, 0, 0, 0), true)
	f.Add(append(packet([]byte("B")), 0xff, 0xff, 0xff, 0xff), false)
	f.Add([]byte{0, 0, 1, 1, 'B'}, true)
	f.Add([]byte{0, 0}, false)
	const max = 300
	f.Fuzz(func(t *testing.T, in []byte, oneByte bool) {
		var r io.Reader = bytes.NewReader(in)
		if oneByte {
			r = iotest.OneByteReader(r)
		}
		g := newFrameReader(r, max, nil)
		var passed []byte
		for {
			var hdr [4]byte
			if _, err := io.ReadFull(g, hdr[:]); err != nil {
				checkGuardErr(t, err)
				break
			}
			passed = append(passed, hdr[:]...)
			n := binary.BigEndian.Uint32(hdr[:])
			if n == 0 || n > max {
				t.Fatalf("guard passed a packet of length %d", n)
			}
			data := make([]byte, n)
			k, err := io.ReadFull(g, data)
			passed = append(passed, data[:k]...)
			if err != nil {
				if !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("inside a packet: %v", err)
				}
				break
			}
		}
		if !bytes.HasPrefix(in, passed) {
			t.Fatalf("guard passed %q, not a prefix of its input %q", passed, in)
		}
		// Reading on after the end keeps failing.
		if n, err := g.Read(make([]byte, 8)); n != 0 || err == nil {
			t.Fatalf("read after end: %d, %v", n, err)
		}
	})
}

func checkGuardErr(t *testing.T, err error) {
	t.Helper()
	switch {
	case err == io.EOF, errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, ErrEmptyPacket), errors.Is(err, ErrPacketTooLarge):
	default:
		t.Fatalf("unexpected error %v", err)
	}
}
