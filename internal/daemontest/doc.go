// Package daemontest holds process-level tests of ratelimitd: real
// `ratelimitd serve` processes (the binary built once per test binary,
// without the race detector) against real redis-server, Sentinel and
// Redis Cluster processes (internal/redistest), driven over Postfix
// policy delegation by a load generator in the test, while Redis fails
// (paused, down, a Sentinel failover, a dead Cluster master, a reshard,
// a start without Redis). The package has no code outside its tests.
package daemontest
