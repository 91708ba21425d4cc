// Package metrics holds the daemon's Prometheus collectors and the counters
// `ratelimitd status` prints. Names follow Prometheus conventions
// (counters end in _total, durations in seconds). Safe for concurrent use;
// per-request counts are striped across CPUs.
package metrics
