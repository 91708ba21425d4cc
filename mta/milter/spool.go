package milter

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// spool keeps one message for freezing: threshold bytes in memory, the rest
// in a file in dir, unlinked at once. Used by one goroutine.
type spool struct {
	dir       string
	threshold int64

	mem []byte
	f   *os.File // nil until the message outgrows threshold
	n   int64    // bytes written
	err error    // first failure; the spool then keeps nothing more
}

// write appends p. A failure to create or write the file is kept in s.err
// (and returned the first time), after which writes are dropped.
func (s *spool) write(p []byte) error {
	if s.err != nil {
		return nil
	}
	if s.f == nil && int64(len(s.mem))+int64(len(p)) <= s.threshold {
		s.mem = append(s.mem, p...)
		s.n += int64(len(p))
		return nil
	}
	if s.f == nil {
		f, err := os.CreateTemp(s.dir, "ratelimitd-milter-*.spool")
		if err != nil {
			return s.fail(err)
		}
		// Unlinked at once: the open file is all there is.
		os.Remove(f.Name())
		s.f = f
		if _, err := f.Write(s.mem); err != nil {
			return s.fail(err)
		}
		s.mem = nil
	}
	if _, err := s.f.Write(p); err != nil {
		return s.fail(err)
	}
	s.n += int64(len(p))
	return nil
}

func (s *spool) fail(err error) error {
	s.err = fmt.Errorf("milter: spooling the message: %w", err)
	s.close()
	return s.err
}

// reader returns the message from its first byte, streamed from the file.
func (s *spool) reader() (io.ReadSeeker, error) {
	if s.err != nil {
		return nil, s.err
	}
	if s.f == nil {
		return bytes.NewReader(s.mem), nil
	}
	return io.NewSectionReader(s.f, 0, s.n), nil
}

// close releases the memory and the file.
func (s *spool) close() {
	s.mem = nil
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}
