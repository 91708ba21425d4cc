//go:build !linux

package ratestore

import "go.etcd.io/bbolt"

// releaseMappedTx does nothing outside Linux.
func releaseMappedTx(*bbolt.DB, *bbolt.Tx) error { return nil }
