#!/usr/bin/env bash
# Installs the Debian packages the tests run for real: Postfix (integration
# tests start a private instance) and redis-server. Needs root on Debian.
set -euo pipefail
need=()
command -v postfix >/dev/null 2>&1 || need+=(postfix)
command -v postsuper >/dev/null 2>&1 || need+=(postfix)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v swaks >/dev/null 2>&1 || need+=(swaks)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: need root to apt-get install ${need[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The Debian postinst may start nothing here (no systemd); make sure no
# system Postfix holds the ports the tests use.
echo "deps: postfix $(postconf -h mail_version 2>/dev/null), $(redis-server --version | awk '{print $3}')"
