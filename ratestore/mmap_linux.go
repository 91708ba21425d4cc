package ratestore

import (
	"syscall"

	"go.etcd.io/bbolt"
)

// releaseMapped drops BoltDB's read-only mapping from this process's
// resident memory (madvise MADV_DONTNEED; the pages stay in the page
// cache) inside a read transaction, so BoltDB does not remap meanwhile.
// BoltDB writes through the file, so no mapped page is dirty.
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
