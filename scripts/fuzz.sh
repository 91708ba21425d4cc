#!/usr/bin/env bash
# Runs every Fuzz target in the module for a bounded run each ($1: a -fuzztime,
# default 50000x executions).
set -euo pipefail
t=${1:-50000x}
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | awk '{print $2}'); do
		# A slow target caps its run with "// fuzz.sh: Nx" on the line above it.
		n=$(grep -h -B1 "^func $f(" "$dir"/*_test.go | grep -o 'fuzz.sh: [0-9]*x' | cut -d' ' -f2 || true)
		echo "fuzz $pkg $f (${n:-$t})"
		go test -run '^$' -fuzz "^$f\$" -fuzztime "${n:-$t}" "$pkg"
	done
done
