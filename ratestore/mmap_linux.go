package ratestore

import (
	"syscall"

	"go.etcd.io/bbolt"
)

// releaseMapped drops BoltDB's mapping from resident memory (madvise
// MADV_DONTNEED) inside a read transaction.
func releaseMapped(db *bbolt.DB) error {
	return db.View(func(tx *bbolt.Tx) error { return releaseMappedTx(db, tx) })
}

// releaseMappedTx is releaseMapped within open tx; its slices stay valid.
func releaseMappedTx(db *bbolt.DB, tx *bbolt.Tx) error {
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, db.Info().Data, uintptr(tx.Size()), syscall.MADV_DONTNEED)
	if errno != 0 {
		return errno
	}
	return nil
}
