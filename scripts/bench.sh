#!/usr/bin/env bash
# make bench: the Go micro-benchmarks, then the load generator
# (cmd/ratelimitd-bench), which builds and starts ratelimitd with the default
# limits and BoltDB persistence, measures it against a DUNNO-only server
# speaking the same protocol (C = 1, 8, 64; K = 10, 100,000), and reports
# the daemon's RSS after 1,000,000 distinct users. Arguments are passed to
# the load generator (default: --rss-users 1000000 --rss-restart). About
# 3-4 minutes on 2 cores.
set -euo pipefail
GO=${GO:-go}
export GO
echo "== micro-benchmarks"
micro=0
$GO test -run '^$' -bench . -benchmem ./ratelimit/... ./policy/... ./mta/... || micro=$?
echo
if [ $# -eq 0 ]; then
	set -- --rss-users 1000000 --rss-restart
fi
echo "== load generator: go run ./cmd/ratelimitd-bench $*"
$GO run ./cmd/ratelimitd-bench "$@"
if [ "$micro" -ne 0 ]; then
	echo "bench: the micro-benchmarks failed (exit $micro), see above" >&2
	exit "$micro"
fi
