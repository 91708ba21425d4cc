// Package packaging holds the Debian package's files (nfpm.yaml, the
// systemd units ratelimitd.service and ratelimitd.socket, the init script
// ratelimitd.init, the maintainer scripts, build-deb.sh; `make deb`) and the
// tests that build, lint, install and run that package, and that check
// the monitoring files in docs/grafana and docs/prometheus against the
// metrics the daemon exports. It has no Go API.
//
// The tests need root and Debian's dpkg, lintian, dpkg-dev, postfix,
// systemd (systemd-socket-activate, systemd-analyze; systemd need not run)
// and prometheus (promtool) packages (scripts/deps.sh installs them); a
// missing tool fails a test, it never skips one. The package test
// installs the package on the machine it runs on and purges it at the
// end: it refuses to touch a ratelimitd package, user, state directory or
// /var/spool/postfix/private/ratelimitd it did not make.
package packaging
