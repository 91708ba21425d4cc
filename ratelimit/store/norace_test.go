//go:build !race

package store

// raceEnabled reports a -race build, where big tests shrink.
const raceEnabled = false
