# ratelimitd make targets. Run as root on Debian: `make test` installs the
# Debian packages the integration tests need (postfix, redis-server) first.
GO      ?= go
PKGS    ?= ./...
# FUZZTIME is an execution count per target ("Nx"): a time-based -fuzztime can
# end with a spurious "context deadline exceeded" on a loaded machine. 150,000
# runs of each target (19 today) take about 5 minutes on a slow 2-core machine
# (about 10,000 runs/s), which keeps `make test` under 20 minutes there.
FUZZTIME ?= 150000x

# Installation layout (DESTDIR for staging, e.g. a package build).
PREFIX  ?= /usr/local
SBINDIR ?= $(PREFIX)/sbin
MANDIR  ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
UNITDIR ?= /etc/systemd/system
# VERSION is linked into the binary (ratelimitd --version, status); the VCS
# revision is stamped by go build itself.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all build man install uninstall deb test deps check fmt vet bench fuzz integration clean

all: build

build:
	GOFLAGS="$(GOFLAGS) -buildvcs=auto" $(GO) build -ldflags "-X github.com/ratelimitd/ratelimitd/internal/daemon.Version=$(VERSION)" -o bin/ratelimitd ./cmd/ratelimitd

# man: section-8 pages generated from the commands' help (cobra/doc).
man: build
	rm -rf bin/man
	bin/ratelimitd man bin/man

# install: the binary, its manual pages, the systemd unit and the example
# configuration (an existing /etc/ratelimitd/ratelimitd.toml is kept; the
# new example goes beside it as ratelimitd.toml.dist).
install: build man
	install -D -m 0755 bin/ratelimitd $(DESTDIR)$(SBINDIR)/ratelimitd
	install -d $(DESTDIR)$(MANDIR)/man8
	install -m 0644 bin/man/*.8 $(DESTDIR)$(MANDIR)/man8/
	install -D -m 0644 configs/ratelimitd.service $(DESTDIR)$(UNITDIR)/ratelimitd.service
	install -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/ratelimitd
	if [ -e $(DESTDIR)$(SYSCONFDIR)/ratelimitd/ratelimitd.toml ]; then \
		install -m 0644 configs/ratelimitd.toml $(DESTDIR)$(SYSCONFDIR)/ratelimitd/ratelimitd.toml.dist; \
	else \
		install -m 0644 configs/ratelimitd.toml $(DESTDIR)$(SYSCONFDIR)/ratelimitd/ratelimitd.toml; \
	fi
	install -d -m 0750 $(DESTDIR)/var/lib/ratelimitd

# uninstall removes what install put in place, except what holds data or
# local edits: /var/lib/ratelimitd (rate state, quarantine) and an edited
# /etc/ratelimitd/ratelimitd.toml (removed only while identical to the
# shipped example; the .dist copy always goes).
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/ratelimitd
	rm -f $(DESTDIR)$(MANDIR)/man8/ratelimitd.8 $(DESTDIR)$(MANDIR)/man8/ratelimitd-*.8
	rm -f $(DESTDIR)$(UNITDIR)/ratelimitd.service
	rm -f $(DESTDIR)$(SYSCONFDIR)/ratelimitd/ratelimitd.toml.dist
	if cmp -s configs/ratelimitd.toml $(DESTDIR)$(SYSCONFDIR)/ratelimitd/ratelimitd.toml; then \
		rm -f $(DESTDIR)$(SYSCONFDIR)/ratelimitd/ratelimitd.toml; \
	fi
	-rmdir $(DESTDIR)$(SYSCONFDIR)/ratelimitd 2>/dev/null
	@echo "uninstall: kept $(DESTDIR)/var/lib/ratelimitd (state) and any edited $(SYSCONFDIR)/ratelimitd/ratelimitd.toml"

# deb: the Debian package bin/ratelimitd_$(DEB_VERSION)-1_amd64.deb (nfpm, a
# Go tool dependency; packaging/build-deb.sh; docs/debian.md). DEB_VERSION
# is VERSION in Debian's syntax: v1.2.3-4-gabc -> 1.2.3+4+gabc, an
# untagged tree 0~gitREV.
DEB_VERSION ?= $(shell echo '$(VERSION)' | sed -E 's/^v([0-9])/\1/; /^[0-9]+\./!s/^/0~git/; s/-/+/g')
DEBDIR  ?= bin
deb:
	GO=$(GO) VERSION=$(VERSION) DEB_VERSION=$(DEB_VERSION) ./packaging/build-deb.sh $(DEBDIR)

# deps installs what the integration tests start for real (Debian packages).
deps:
	@./scripts/deps.sh

# test: vet, every test with the race detector in random order (the
# integration tests start a real Postfix), then a short run of each fuzz target.
# The packages of ALONE run after the others, one at a time and without the
# race detector: their tests time every answer of real daemon processes (built
# without it) under load against redis_timeout + 100 ms, as issue 22 asks;
# under -race the test's own load client was slowed several times, and other
# packages' tests running beside them on 2 cores made answers late by a second.
ALONE   ?= ./internal/daemontest
test: deps vet
	$(GO) test -race -shuffle=on -count=1 -timeout 25m $$($(GO) list $(PKGS) | grep -v -x -F "$$($(GO) list $(ALONE))")
	$(GO) test -shuffle=on -count=1 -timeout 25m -p 1 $(ALONE)
	$(MAKE) fuzz FUZZTIME=$(FUZZTIME)

vet:
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }

check: vet
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

fuzz:
	@./scripts/fuzz.sh $(FUZZTIME)

# bench: the Go micro-benchmarks, then the load generator against the real
# daemon and the protocol floor (tools/ratelimitd-bench; scripts/bench.sh),
# with the local backend and then the Redis backend. BENCHFLAGS, when set,
# replace the local run's flags (default --rss-users 1000000 --rss-restart)
# and skip the Redis run.
BENCHFLAGS ?=
bench:
	GO=$(GO) ./scripts/bench.sh $(BENCHFLAGS)

integration: deps
	$(GO) test -race -count=1 -run Integration -v ./...

clean:
	rm -rf bin
