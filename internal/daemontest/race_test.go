//go:build race

package daemontest

// raceEnabled: the test client (not the daemons, built without -race)
// runs under the race detector, which slows its side of every request;
// timing budgets get more slack (see latencyBudget).
const raceEnabled = true
