#!/usr/bin/env bash
# Runs every Fuzz target in the module for a bounded run each ($1: a -fuzztime,
# default 300000x executions).
set -euo pipefail
t=${1:-300000x}
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | awk '{print $2}'); do
		echo "fuzz $pkg $f ($t)"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "$t" "$pkg"
	done
done
