//go:build !race

package daemontest

// raceEnabled: see race_test.go.
const raceEnabled = false
