//go:build !linux

package ratestore

import "go.etcd.io/bbolt"

// releaseMapped does nothing outside Linux.
func releaseMapped(*bbolt.DB) error { return nil }

// releaseMappedTx does nothing outside Linux.
func releaseMappedTx(*bbolt.DB, *bbolt.Tx) error { return nil }
