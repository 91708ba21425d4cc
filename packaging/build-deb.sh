#!/bin/sh
# build-deb.sh OUTDIR: builds ratelimitd_$DEB_VERSION-1_amd64.deb into
# OUTDIR (`make deb`). It stages what the package needs that is generated
# (binary, gzipped manual pages, the packaged configuration, the Debian
# changelog) in OUTDIR/stage and runs nfpm (a Go tool dependency: `go tool
# nfpm`, from the module proxy or the module cache; no other network).
# Environment: GO (go), VERSION (linked into the binary), DEB_VERSION.
set -eu
out=${1:?usage: build-deb.sh OUTDIR}
GO=${GO:-go}
: "${VERSION:?}" "${DEB_VERSION:?}"
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd)
stage=$out/stage
rm -rf "$stage"
mkdir -p "$stage/man8"

# A stripped, position-independent binary (lintian: no unstripped
# binaries; Debian builds PIE by default), linked with the C library as
# go build does by default (cgo: the system's user and group lookups).
GOFLAGS="${GOFLAGS:-} -buildvcs=auto" "$GO" build -trimpath -buildmode=pie \
	-ldflags "-s -w -X main.version=$VERSION" -o "$stage/ratelimitd" ./cmd/ratelimitd

# The C library dependency, as dh_shlibdeps would compute it
# (dpkg-shlibdeps wants a debian/control where it runs).
mkdir -p "$stage/shlibs/debian"
printf 'Source: ratelimitd\n\nPackage: ratelimitd\nArchitecture: any\n' >"$stage/shlibs/debian/control"
shlibs=$(cd "$stage/shlibs" && dpkg-shlibdeps -O "$stage/ratelimitd" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || { echo "build-deb.sh: dpkg-shlibdeps found no dependencies (apt-get install dpkg-dev)" >&2; exit 1; }
rm -rf "$stage/shlibs"

# Manual pages from the commands' own help, gzipped without a timestamp.
"$stage/ratelimitd" man "$stage/man.tmp"
for f in "$stage"/man.tmp/*.8; do
	gzip -9n -c "$f" >"$stage/man8/$(basename "$f").gz"
done
rm -rf "$stage/man.tmp"

# The configuration with the package's paths and user: state in
# /var/lib/ratelimitd (the unit's StateDirectory), the policy socket in
# Postfix's private directory, made by ratelimitd.socket under systemd; the
# init script starts the daemon as root, which makes it itself, handed to
# Postfix's group, and then runs as the user ratelimitd.
sock='policy_listen = ["unix:/var/spool/postfix/private/ratelimitd"]'
sed -e "s|^policy_listen = \\[\"127.0.0.1:10031\"\\]\$|$sock|" \
	-e 's|^#socket_group = "postfix"$|socket_group = "postfix"|' \
	-e 's|^#state_dir = "/var/lib/ratelimitd"$|state_dir = "/var/lib/ratelimitd"|' \
	-e 's|^#user = "ratelimitd"$|user = "ratelimitd"|' \
	-e 's|^#group = "ratelimitd"$|group = "ratelimitd"|' \
	-e 's|^# `make install` copies it to /etc/ratelimitd/ratelimitd.toml.$|# the Debian package installs it as /etc/ratelimitd/ratelimitd.toml.|' \
	configs/ratelimitd.toml >"$stage/ratelimitd.toml"
for want in "$sock" 'socket_group = "postfix"' 'state_dir = "/var/lib/ratelimitd"' 'user = "ratelimitd"' 'group = "ratelimitd"'; do
	grep -qxF "$want" "$stage/ratelimitd.toml" || {
		echo "build-deb.sh: configs/ratelimitd.toml changed: could not set $want" >&2
		exit 1
	}
done
"$stage/ratelimitd" config check "$stage/ratelimitd.toml" >/dev/null

# changelog.Debian.gz: one entry for this build.
date=$(date -R -d "@${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}")
printf 'ratelimitd (%s-1) unstable; urgency=medium\n\n  * Package built from the source tree (%s).\n\n -- ratelimitd maintainers <maintainers@users.noreply.a-seed-f30ff49a.example>  %s\n' \
	"$DEB_VERSION" "$VERSION" "$date" | gzip -9n >"$stage/changelog.Debian.gz"

rm -f "$out"/ratelimitd_*.deb
# nfpm expands ${VAR} in its version field only: the staged paths and the
# C library dependency are put in by sed.
sed -e "s|\${STAGE}|$stage|g" -e "s|\${SHLIBS_DEPENDS}|$shlibs|g" -e "s|\${DEB_VERSION}|$DEB_VERSION|g" packaging/nfpm.yaml >"$stage/nfpm.yaml"
"$GO" tool nfpm package --config "$stage/nfpm.yaml" --packager deb --target "$out/"
ls "$out"/ratelimitd_*.deb
