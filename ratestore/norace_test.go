//go:build !race

package ratestore

// raceEnabled reports a -race build, where big tests shrink.
const raceEnabled = false
