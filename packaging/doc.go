// Package packaging holds the Debian package's files (nfpm.yaml, systemd
// units, init and maintainer scripts, build-deb.sh; `make deb`) and the
// tests that build, lint, install and run it, and that check docs/grafana
// and docs/prometheus against the exported metrics. It has no Go API. The
// tests need root and the tools scripts/deps.sh installs; a missing tool
// fails a test. The package test purges only what it installed itself.
package packaging
