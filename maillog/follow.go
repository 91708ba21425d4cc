package maillog

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"time"
)

// Position is where a Follower stopped: the file (device and inode) and
// the offset past its last complete line; zero: not started; Offset -1:
// no log yet, one created later is read whole.
type Position struct {
	Dev, Ino uint64
	Offset   int64
}

// MarshalBinary encodes p in 24 bytes, big-endian.
func (p Position) MarshalBinary() ([]byte, error) { return binary.Append(nil, binary.BigEndian, p) }

// UnmarshalBinary decodes MarshalBinary's form.
func (p *Position) UnmarshalBinary(b []byte) error {
	var q Position
	if n, err := binary.Decode(b, binary.BigEndian, &q); err != nil || n != len(b) || q.Offset < -1 {
		return errors.New("maillog: malformed log position")
	}
	*p = q
	return nil
}

// Follower reads a log file as it grows, like tail -F: across rotation by
// rename (the old file to its end, then the new one) and by truncation
// (copytruncate), and after a restart from a saved Position, so no line is
// read twice; a restart looks for the rest of a rotated log in Path.1. A
// line longer than 64 KiB is skipped. Not safe for concurrent use.
type Follower struct {
	Path string        // the log, e.g. /var/log/mail.log
	Poll time.Duration // how often the log is looked at; 0: one second
}

// Follow calls fn with each complete line appended to the log from pos on
// (without its newline) and the position past it, until ctx is done (it
// returns ctx.Err()) or the log cannot be read. From the zero Position it
// starts at the log's end (its start if the log is created later); from a
// Position in Path.1 it reads the rest of that first. A missing log is
// waited for.
func (f *Follower) Follow(ctx context.Context, pos Position, fn func(line []byte, pos Position)) error {
	t := time.NewTicker(cmp.Or(max(f.Poll, 0), time.Second))
	defer t.Stop()
	wait := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	var file *os.File
	for file == nil {
		var err error
		file, pos, err = f.start(pos, fn)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if file == nil {
			if pos == (Position{}) {
				pos.Offset = -1 // a log created after the start is read whole
			}
			if err := wait(); err != nil {
				return err
			}
		}
	}
	defer func() { file.Close() }()
	each := skipLong(fn)
	r := newLineReader(file, pos, false)
	for {
		if err := r.lines(each); err != nil {
			return err
		}
		if err := wait(); err != nil {
			return err
		}
		cur, err := file.Stat()
		if err != nil {
			return err
		}
		st, err := os.Stat(f.Path)
		switch {
		case err != nil && !errors.Is(err, os.ErrNotExist):
			return err
		case err == nil && !os.SameFile(cur, st):
			// Rotated by rename: finish the old file, then the new one.
			if err := r.lines(each); err != nil {
				return err
			}
			next, err := os.Open(f.Path)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) {
					continue
				}
				return err
			}
			file.Close()
			file = next
			r = newLineReader(file, positionOf(file, 0), false)
		case err == nil && cur.Size() < r.pos.Offset:
			// Truncated (copytruncate): read it again from its start.
			if _, err := file.Seek(0, io.SeekStart); err != nil {
				return err
			}
			r = newLineReader(file, positionOf(file, 0), false)
		}
	}
}

// End returns the position at the log's end now, or Offset -1 when there
// is no log yet (one created later is read whole): following from it reads
// every line appended after End returns.
func (f *Follower) End() (Position, error) {
	file, err := os.Open(f.Path)
	if errors.Is(err, os.ErrNotExist) {
		return Position{Offset: -1}, nil
	} else if err != nil {
		return Position{}, err
	}
	defer file.Close()
	fi, err := file.Stat()
	if err != nil {
		return Position{}, err
	}
	return positionOf(file, fi.Size()), nil
}

// start opens the log where pos says, after reading the rest of the
// rotated file (Path.1) pos is in.
func (f *Follower) start(pos Position, fn func([]byte, Position)) (*os.File, Position, error) {
	file, err := os.Open(f.Path)
	if err != nil {
		return nil, pos, err
	}
	here := positionOf(file, 0)
	fi, err := file.Stat()
	if err != nil {
		file.Close()
		return nil, pos, err
	}
	switch {
	case pos == Position{}:
		here.Offset = fi.Size()
	case pos == Position{Offset: -1}:
	case pos.Dev == here.Dev && pos.Ino == here.Ino:
		if pos.Offset <= fi.Size() {
			here.Offset = pos.Offset
		}
	default:
		if old, err := os.Open(f.Path + ".1"); err == nil {
			if p := positionOf(old, pos.Offset); p.Dev == pos.Dev && p.Ino == pos.Ino {
				if _, err := old.Seek(pos.Offset, io.SeekStart); err == nil {
					newLineReader(old, p, true).lines(skipLong(fn))
				}
			}
			old.Close()
		}
	}
	if _, err := file.Seek(here.Offset, io.SeekStart); err != nil {
		file.Close()
		return nil, pos, err
	}
	return file, here, nil
}

// skipLong is lineReader.lines' callback giving fn every line but the long ones.
func skipLong(fn func([]byte, Position)) func([]byte, bool, Position) bool {
	return func(line []byte, long bool, p Position) bool {
		if !long {
			fn(line, p)
		}
		return true
	}
}

// lineReader splits a file into lines, keeping a partial last line until
// it is complete; in a whole file (one that grows no more) the partial
// line at the end is the last.
type lineReader struct {
	br      *bufio.Reader
	pos     Position
	partial []byte
	long    bool // within a line longer than maxLine
	whole   bool
}

func newLineReader(r io.Reader, pos Position, whole bool) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64<<10), pos: pos, whole: whole}
}

// lines calls fn with every line readable now, without its end, and the
// position past it, until fn returns false; long marks a line longer than
// maxLine, whose text is not kept.
func (r *lineReader) lines(fn func(line []byte, long bool, pos Position) bool) error {
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.pos.Offset += int64(len(chunk))
		eof := errors.Is(err, io.EOF)
		if n := len(chunk); n > 0 && chunk[n-1] == '\n' || eof && r.whole && (len(r.partial)+n > 0 || r.long) {
			line := bytes.TrimRight(append(r.partial, chunk...), "\r\n")
			long := r.long || len(line) > maxLine
			r.partial, r.long = line[:0], false
			if !fn(line, long, r.pos) {
				return nil
			}
		} else if len(r.partial)+n > maxLine {
			r.partial, r.long = r.partial[:0], true
		} else if !r.long {
			r.partial = append(r.partial, chunk...)
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case eof:
			return nil
		default:
			return err
		}
	}
}
