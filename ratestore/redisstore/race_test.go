//go:build race

package redisstore_test

// raceEnabled: the race detector slows every request several times, so
// timing budgets get more slack (see outageLoad.check).
const raceEnabled = true
