package maillog

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"time"
)

// Position is where a Follower stopped: the file (device and inode) and
// the offset just past its last complete line. The zero Position is "not
// started".
type Position struct {
	Dev, Ino uint64
	Offset   int64
}

// MarshalBinary encodes p in 24 bytes, big-endian.
func (p Position) MarshalBinary() ([]byte, error) {
	b := binary.BigEndian.AppendUint64(nil, p.Dev)
	b = binary.BigEndian.AppendUint64(b, p.Ino)
	return binary.BigEndian.AppendUint64(b, uint64(p.Offset)), nil
}

// UnmarshalBinary decodes MarshalBinary's form.
func (p *Position) UnmarshalBinary(b []byte) error {
	if len(b) != 24 || int64(binary.BigEndian.Uint64(b[16:])) < 0 {
		return errors.New("maillog: malformed log position")
	}
	*p = Position{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:]), int64(binary.BigEndian.Uint64(b[16:]))}
	return nil
}

// Follower reads a log file as it grows, like tail -F: across rotation
// by rename (the old file is read to its end, then the new one from its
// start) and by truncation (copytruncate: read again from the start), and
// after a restart from a saved Position, so no line is read twice. A line
// longer than 64 KiB is skipped. Not safe for concurrent use.
type Follower struct {
	// Path is the log, e.g. /var/log/mail.log or Postfix's maillog_file.
	Path string
	// Rotated is the name rotation gives the old file, where a restart
	// looks for the rest of a rotated log; "": Path + ".1".
	Rotated string
	// Poll is how often the log is looked at for growth and rotation;
	// 0: one second.
	Poll time.Duration
}

// Follow calls fn with each complete line appended to the log from pos on
// (without its newline) and the position just past it, until ctx is done
// (it returns ctx.Err()) or the log cannot be read. From the zero
// Position it starts at the log's end (at its start if the log is created
// after Follow was called); from a Position of a file that is
// no longer Path it reads the rest of Rotated if that is the file, then
// Path from its start. A log that does not exist yet is waited for.
func (f *Follower) Follow(ctx context.Context, pos Position, fn func(line []byte, pos Position)) error {
	poll := f.Poll
	if poll <= 0 {
		poll = time.Second
	}
	rotated := f.Rotated
	if rotated == "" {
		rotated = f.Path + ".1"
	}
	t := time.NewTicker(poll)
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
		file, pos, err = f.start(pos, rotated, fn)
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
	r := &lineReader{br: bufio.NewReaderSize(file, 64<<10), pos: pos}
	for {
		if err := r.lines(fn); err != nil {
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
			if err := r.lines(fn); err != nil {
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
			r = &lineReader{br: bufio.NewReaderSize(file, 64<<10), pos: positionOf(file, 0)}
		case err == nil && cur.Size() < r.pos.Offset:
			// Truncated (copytruncate): read it again from its start.
			if _, err := file.Seek(0, io.SeekStart); err != nil {
				return err
			}
			r = &lineReader{br: bufio.NewReaderSize(file, 64<<10), pos: positionOf(file, 0)}
		}
	}
}

// start opens the log where pos says, after reading the rest of a rotated
// file pos is in.
func (f *Follower) start(pos Position, rotated string, fn func([]byte, Position)) (*os.File, Position, error) {
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
		if old, err := os.Open(rotated); err == nil {
			if p := positionOf(old, pos.Offset); p.Dev == pos.Dev && p.Ino == pos.Ino {
				if _, err := old.Seek(pos.Offset, io.SeekStart); err == nil {
					r := &lineReader{br: bufio.NewReaderSize(old, 64<<10), pos: p}
					r.lines(fn)
					r.last(fn)
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

// lineReader splits a file into lines, keeping a partial last line until
// it is complete.
type lineReader struct {
	br      *bufio.Reader
	pos     Position
	partial []byte
	skip    bool // within a line too long to keep
}

// lines calls fn for every complete line readable now.
func (r *lineReader) lines(fn func([]byte, Position)) error {
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.pos.Offset += int64(len(chunk))
		if len(chunk) > 0 && chunk[len(chunk)-1] == '\n' {
			line := chunk[:len(chunk)-1]
			if len(r.partial) > 0 {
				line = append(r.partial, line...)
			}
			if !r.skip && len(line) <= maxLine {
				fn(bytes.TrimSuffix(line, []byte{'\r'}), r.pos)
			}
			r.partial, r.skip = r.partial[:0], false
			continue
		}
		if len(chunk) > 0 {
			if r.skip || len(r.partial)+len(chunk) > maxLine {
				r.partial, r.skip = r.partial[:0], true
			} else {
				r.partial = append(r.partial, chunk...)
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return nil
		default:
			return err
		}
	}
}

// last calls fn with a final line without a newline: the end of a rotated
// file, which grows no more.
func (r *lineReader) last(fn func([]byte, Position)) {
	if len(r.partial) > 0 && !r.skip {
		fn(r.partial, r.pos)
	}
}
