// Package daemontest holds process-level tests only: two `ratelimitd
// serve` processes under policy delegation load while Redis fails (paused,
// down, Sentinel failover, Cluster master killed, reshard, start without
// Redis).
package daemontest
