#!/usr/bin/env bash
# Installs the Debian packages the tests run for real: Postfix (integration
# tests start a private instance), chromium (the console's browser tests),
# redis-server, redis-sentinel and redis-tools
# (the Redis backend's tests start standalone, Sentinel and Cluster servers),
# and the Debian packaging tools the package test uses.
# Needs root on Debian.
set -euo pipefail
need=()
command -v postfix >/dev/null 2>&1 || need+=(postfix)
command -v postsuper >/dev/null 2>&1 || need+=(postfix)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-sentinel >/dev/null 2>&1 || need+=(redis-sentinel)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v swaks >/dev/null 2>&1 || need+=(swaks)
# The console's browser tests (web) drive Debian's chromium headless.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: need root to apt-get install ${need[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The Debian package's build and checks (packaging/, make deb): lintian,
# dpkg-shlibdeps (dpkg-dev), systemd-socket-activate and systemd-analyze
# (systemd: the test passes the policy socket as ratelimitd.socket would,
# and verifies the units; nothing here runs systemd itself), and promtool
# (prometheus) for the alerting rules in docs/prometheus; without
# recommends (prometheus would pull in the node exporter and its
# collectors).
pkgneed=()
command -v lintian >/dev/null 2>&1 || pkgneed+=(lintian)
command -v dpkg-shlibdeps >/dev/null 2>&1 || pkgneed+=(dpkg-dev)
command -v promtool >/dev/null 2>&1 || pkgneed+=(prometheus)
command -v setpriv >/dev/null 2>&1 || pkgneed+=(util-linux)
command -v adduser >/dev/null 2>&1 || pkgneed+=(adduser)
command -v systemd-socket-activate >/dev/null 2>&1 || pkgneed+=(systemd)
if [ ${#pkgneed[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: need root to apt-get install ${pkgneed[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends "${pkgneed[@]}" >/dev/null ||
		{ apt-get update -qq && apt-get install -y -qq --no-install-recommends "${pkgneed[@]}" >/dev/null; }
fi
# An Exim binary for the Exim ${readsocket} test: Debian's exim4 conflicts
# with postfix, so the packages are unpacked into EXIM_DIR instead of
# installed (exim4 -bh / -bs run a test session with a private configuration).
EXIM_DIR=${RATELIMITD_EXIM_DIR:-/opt/ratelimitd-test/exim}
if [ ! -x "$EXIM_DIR/usr/sbin/exim4" ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: need root to fetch an Exim binary into $EXIM_DIR" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	dpkg -s libidn12 >/dev/null 2>&1 || apt-get install -y -qq libidn12 >/dev/null || { apt-get update -qq; apt-get install -y -qq libidn12 >/dev/null; }
	tmp=$(mktemp -d)
	chmod 755 "$tmp"
	(cd "$tmp" && apt-get download -qq exim4-daemon-light exim4-base 2>/dev/null) ||
		{ apt-get update -qq && (cd "$tmp" && apt-get download -qq exim4-daemon-light exim4-base); }
	mkdir -p "$EXIM_DIR"
	for f in "$tmp"/*.deb; do dpkg -x "$f" "$EXIM_DIR"; done
	rm -rf "$tmp"
fi
id Debian-exim >/dev/null 2>&1 || useradd --system --no-create-home Debian-exim

# The Debian postinst may start nothing here (no systemd); make sure no
# system Postfix holds the ports the tests use.
echo "deps: postfix $(postconf -h mail_version 2>/dev/null), $(redis-server --version | awk '{print $3}'), $("$EXIM_DIR/usr/sbin/exim4" -bV 2>/dev/null | sed -n 's/^Exim version \([^ ]*\).*/exim \1/p')"
