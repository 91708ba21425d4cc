// Package metrics holds the daemon's Prometheus collectors and the plain
// counters `ratelimitd status` prints: requests by protocol_state and
// action, decision latency, non-pass decisions by limit, faults and bad
// input by kind, the connection cap, the rate state's flush health and key
// pressure, and the Redis backend's outages.
//
// Metric names follow Prometheus conventions (https://prometheus.io/docs/practices/naming/):
// counters end in _total, durations are in seconds, timestamps are Unix
// seconds. Everything here is safe for concurrent use; the per-request
// counts are striped so that CPUs answering requests at once seldom share a
// cache line.
package metrics
