package ratestore

import (
	"syscall"

	"go.etcd.io/bbolt"
)

// releaseMappedTx drops BoltDB's mapping from resident memory (madvise
// MADV_DONTNEED) within open tx; its slices stay valid.
func releaseMappedTx(db *bbolt.DB, tx *bbolt.Tx) error {
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, db.Info().Data, uintptr(tx.Size()), syscall.MADV_DONTNEED)
	if errno != 0 {
		return errno
	}
	return nil
}
