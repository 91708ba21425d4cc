package ratestore

import (
	"syscall"

	"go.etcd.io/bbolt"
)

// releaseMapped tells the kernel that BoltDB's read-only shared mapping of
// the file need not stay in this process's memory (madvise
// MADV_DONTNEED): the pages stay in the page cache, and a later read
// faults them back in. After a restore has read every page this takes the
// file's size off the daemon's RSS. It runs inside a read transaction,
// which keeps BoltDB from remapping meanwhile. BoltDB writes through the
// file, never through the mapping, so no page of it is dirty.
func releaseMapped(db *bbolt.DB) error {
	return db.View(func(tx *bbolt.Tx) error { return releaseMappedTx(db, tx) })
}

// releaseMappedTx is releaseMapped within tx, a transaction of db that
// stays open: slices of the mapping it holds stay valid (their pages are
// read again from the page cache).
func releaseMappedTx(db *bbolt.DB, tx *bbolt.Tx) error {
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, db.Info().Data, uintptr(tx.Size()), syscall.MADV_DONTNEED)
	if errno != 0 {
		return errno
	}
	return nil
}
