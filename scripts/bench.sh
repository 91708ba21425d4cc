#!/usr/bin/env bash
# make bench: the Go micro-benchmarks, then the load generator
# (tools/ratelimitd-bench, in the tools module), which builds and starts
# ratelimitd with the default limits and BoltDB persistence, measures it
# against a DUNNO-only server speaking the same protocol over TCP and a unix
# socket (C = 1, 8, 64; K = 10,000, 100,000, 1,000,000: throughput ratio,
# p50/p99, server CPU per request from /proc), and reports the daemon's RSS
# after 1,000,000 distinct users; then the same daemon with the Redis backend
# (a redis-server it starts) at C = 64, K = 100,000, with Redis's CPU per
# message against the Redis floor of the same run (one empty EVALSHA per
# message, unpaced and paced to the daemon's messages a second), and Redis's
# memory per user after 1,000,000 users, and the same load on a 3-master
# Redis Cluster (with its own Redis floor);
# then the daemon's throughput with the event log on against off
# (refusal-heavy load) and the state file's growth per 1,000,000 events.
# Arguments are passed to the first load generator run (default:
# --rss-users 1000000 --rss-restart) and skip the Redis run.
set -euo pipefail
GO=${GO:-go}
export GO
echo "== micro-benchmarks"
micro=0
# The request path (decode + Decide + reply; allocs/req with decimals), the
# codec and engine, and the milter's freeze of a 100 KB message committed
# to the quarantine (p50-ms: target 5 ms). The store's 2M-state benchmarks
# take minutes: run them with go test -bench . ./ratestore.
(cd tools && $GO test -run '^$' -bench 'RequestPath' -benchtime 200000x -benchmem ./ratelimitd-bench) || micro=$?
$GO test -run '^$' -bench 'ReadRequest|WriteReply|ServerRoundTrip|EvaluateTwoLimits|Check' -benchmem \
	./mta/postfix ./policy ./ratelimit || micro=$?
$GO test -run '^$' -bench 'Freeze100K' -benchtime 200x ./mta/milter || micro=$?
echo
redis=0
if [ $# -eq 0 ]; then
	set -- --rss-users 1000000 --rss-restart
	redis=1
fi
echo "== load generator: (cd tools && go run ./ratelimitd-bench $*)"
(cd tools && $GO run ./ratelimitd-bench "$@")
if [ "$redis" = 1 ]; then
	echo
	echo "== Redis backend: (cd tools && go run ./ratelimitd-bench --backend redis --conns 64 --keys 100000 --rss-users 1000000)"
	(cd tools && $GO run ./ratelimitd-bench --backend redis --conns 64 --keys 100000 --rss-users 1000000)
	echo
	# The same load on a 3-master Redis Cluster the load generator starts:
	# Redis's CPU per request per master and in total, to compare with
	# the standalone figures above, and against the Redis floor on the
	# same Cluster (--no-floor skips the DUNNO floor only; the Redis
	# floor has --no-redis-floor).
	echo "== Redis Cluster: (cd tools && go run ./ratelimitd-bench --backend redis --redis-cluster 3 --conns 64 --keys 100000 --listeners tcp --no-floor)"
	(cd tools && $GO run ./ratelimitd-bench --backend redis --redis-cluster 3 --conns 64 --keys 100000 --listeners tcp --no-floor)
fi
echo
# Events: the same refusal-heavy load (K = 100 users at C = 64: most
# messages over 200/h, each refusal one event) against a daemon with the
# event log on and off, twice each, alternating; the ratio of the summed
# throughputs and of CPU per request. Then the state file's growth per
# 1,000,000 events.
echo "== events on/off: ratelimitd-bench --no-floor --listeners tcp --conns 64 --keys 100 --duration 5s --events=true|false"
evdir=$(mktemp -d)
(cd tools && $GO build -o "$evdir/bench" ./ratelimitd-bench)
$GO build -o "$evdir/ratelimitd" ./cmd/ratelimitd
for run in 1 2; do
	for ev in true false; do
		line=$("$evdir/bench" --daemon "$evdir/ratelimitd" --no-floor --listeners tcp --conns 64 --keys 100 \
			--duration 5s --rounds 1 --events="$ev" | grep '^tcp ')
		echo "events=$ev $line"
		echo "$ev $line" >>"$evdir/runs"
	done
done
awk '{ rps = $6; gsub(",", "", rps); cpu = $10; sub("µs", "", cpu)
	n[$1] += rps; c[$1] += cpu; k[$1]++ }
	END { printf "events on/off: throughput %.0f / %.0f req/s = %.3fx; CPU per request %.1f / %.1f µs = %.3fx\n",
		n["true"]/k["true"], n["false"]/k["false"], n["true"]/n["false"],
		c["true"]/k["true"], c["false"]/k["false"], c["true"]/c["false"] }' "$evdir/runs"
rm -rf "$evdir"
$GO test -run '^$' -bench 'StateFileGrowth' -benchtime 1x ./events || micro=$?
if [ "$micro" -ne 0 ]; then
	echo "bench: the micro-benchmarks failed (exit $micro), see above" >&2
	exit "$micro"
fi
