#!/usr/bin/env bash
# make bench: the Go micro-benchmarks, then the load generator
# (cmd/ratelimitd-bench), which builds and starts ratelimitd with the default
# limits and BoltDB persistence, measures it against a DUNNO-only server
# speaking the same protocol over TCP and a unix socket (C = 1, 8, 64;
# K = 10,000, 100,000, 1,000,000: throughput ratio, p50/p99, server CPU per
# request from /proc), and reports the daemon's RSS after 1,000,000 distinct
# users; then the same daemon with the Redis backend (a redis-server it
# starts) at C = 64, K = 100,000, and Redis's memory per user after
# 1,000,000 users. Arguments are passed to the first load generator run
# (default: --rss-users 1000000 --rss-restart) and skip the Redis run.
set -euo pipefail
GO=${GO:-go}
export GO
echo "== micro-benchmarks"
micro=0
# The request path (decode + Decide + reply; allocs/req with decimals), the
# codec and engine, and the milter's freeze of a 100 KB message committed
# to the quarantine (p50-ms: target 5 ms). The store's 2M-state benchmarks
# take minutes: run them with go test -bench . ./ratestore.
$GO test -run '^$' -bench 'RequestPath' -benchtime 200000x -benchmem ./cmd/ratelimitd-bench || micro=$?
$GO test -run '^$' -bench 'ReadRequest|WriteReply|ServerRoundTrip|EvaluateTwoLimits|Check' -benchmem \
	./mta/postfix ./policy ./ratelimit || micro=$?
$GO test -run '^$' -bench 'Freeze100K' -benchtime 200x ./mta/milter || micro=$?
echo
redis=0
if [ $# -eq 0 ]; then
	set -- --rss-users 1000000 --rss-restart
	redis=1
fi
echo "== load generator: go run ./cmd/ratelimitd-bench $*"
$GO run ./cmd/ratelimitd-bench "$@"
if [ "$redis" = 1 ]; then
	echo
	echo "== Redis backend: go run ./cmd/ratelimitd-bench --backend redis --conns 64 --keys 100000 --rss-users 1000000"
	$GO run ./cmd/ratelimitd-bench --backend redis --conns 64 --keys 100000 --rss-users 1000000
fi
if [ "$micro" -ne 0 ]; then
	echo "bench: the micro-benchmarks failed (exit $micro), see above" >&2
	exit "$micro"
fi
