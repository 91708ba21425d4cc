package milter

import (
	"encoding/binary"
	"fmt"
	"io"
)

// MaxPacketSize is the largest packet payload accepted, in bytes: go-milter's
// own limit, above Postfix's header_size_limit (102400).
const MaxPacketSize = 1 << 20

// frameHooks lets a frameReader consult its connection; nil for fuzzing.
type frameHooks interface {
	beforeHeader() error // before waiting for a packet; an error ends the stream
	afterHeader()        // a valid length header was read
	// command gets every packet's command byte and up to 12 data bytes
	// that followed it in the same read (enough for SMFIC_OPTNEG).
	command(code byte, data []byte)
}

// frameReader passes the packet stream from r through, checking every
// packet's 4-byte length first: 0 or above max ends it (sticky
// ErrEmptyPacket, ErrPacketTooLarge). Not safe for concurrent use.
type frameReader struct {
	r     io.Reader
	max   uint32
	hooks frameHooks

	hdr    [4]byte
	hdrOff int    // bytes of hdr already returned; 4 when none are pending
	size   uint32 // payload length of the current packet
	left   uint32 // payload bytes of the current packet not yet returned
	err    error
}

func newFrameReader(r io.Reader, max uint32, hooks frameHooks) *frameReader {
	return &frameReader{r: r, max: max, hooks: hooks, hdrOff: len(frameReader{}.hdr)}
}

// Read implements io.Reader.
func (f *frameReader) Read(p []byte) (int, error) {
	if f.err != nil {
		return 0, f.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if f.hdrOff < len(f.hdr) {
		n := copy(p, f.hdr[f.hdrOff:])
		f.hdrOff += n
		return n, nil
	}
	if f.left == 0 {
		if err := f.readHeader(); err != nil {
			f.err = err
			return 0, err
		}
		n := copy(p, f.hdr[:])
		f.hdrOff = n
		return n, nil
	}
	if uint32(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.r.Read(p)
	if n > 0 {
		if f.left == f.size && f.hooks != nil {
			f.hooks.command(p[0], p[1:min(n, 13)])
		}
		f.left -= uint32(n)
	}
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF // inside a packet
		}
		f.err = err
	}
	return n, err
}

// readHeader reads and checks the next length header.
func (f *frameReader) readHeader() error {
	if f.hooks != nil {
		if err := f.hooks.beforeHeader(); err != nil {
			return err
		}
	}
	if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
		return err // io.EOF between packets, io.ErrUnexpectedEOF inside the header
	}
	size := binary.BigEndian.Uint32(f.hdr[:])
	switch {
	case size == 0:
		return ErrEmptyPacket
	case size > f.max:
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrPacketTooLarge, size, f.max)
	}
	f.size, f.left = size, size
	if f.hooks != nil {
		f.hooks.afterHeader()
	}
	return nil
}
