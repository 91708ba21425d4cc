//go:build unix

package maillog

import (
	"os"
	"syscall"
)

// positionOf returns offset in f, with f's device and inode.
func positionOf(f *os.File, offset int64) Position {
	p := Position{Offset: offset}
	if fi, err := f.Stat(); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			p.Dev, p.Ino = uint64(st.Dev), uint64(st.Ino)
		}
	}
	return p
}
