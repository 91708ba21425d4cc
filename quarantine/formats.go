package quarantine

import "github.com/ratelimitd/ratelimitd/statedb"

// Formats describes the records the quarantine keeps in the state file,
// for statedb's Scan, Check, Salvage and SetAside.
func Formats() []statedb.Format {
	return nil
}
