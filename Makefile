# ratelimitd make targets. Run as root on Debian: `make test` installs the
# Debian packages the integration tests need (postfix, redis-server) first;
# `go test ./...` runs the unit tests alone, anywhere.
GO      ?= go
PKGS    ?= ./...
# FUZZTIME is an execution count per target ("Nx"): a time-based -fuzztime can
# end with a spurious "context deadline exceeded" on a loaded machine. 50,000
# runs of each of the 23 targets take about 3 minutes on a slow 2-core
# machine (longer runs: make fuzz FUZZTIME=1000000x).
FUZZTIME ?= 50000x

# Installation layout (DESTDIR for staging, e.g. a package build).
PREFIX  ?= /usr/local
SBINDIR ?= $(PREFIX)/sbin
MANDIR  ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
UNITDIR ?= /etc/systemd/system
# VERSION is linked into the binary (ratelimitd --version, status); the VCS
# revision is stamped by go build itself.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all build man install uninstall deb test test-package deps check fmt vet bench fuzz integration clean

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
# local edits: /var/lib/ratelimitd (rate state, quarantine: held and frozen
# mail is never removed; their count is printed) and an edited
# /etc/ratelimitd/ratelimitd.toml (removed only while identical to the
# shipped example; the .dist copy always goes).
uninstall:
	@if [ -x $(DESTDIR)$(SBINDIR)/ratelimitd ] && [ -e $(DESTDIR)/var/lib/ratelimitd/ratelimitd.db ]; then \
		n=$$($(DESTDIR)$(SBINDIR)/ratelimitd quarantine list --config $(DESTDIR)$(SYSCONFDIR)/ratelimitd/ratelimitd.toml 2>/dev/null | sed -n 's/^\([0-9][0-9]*\) messages*$$/\1/p' | tail -n 1); \
		echo "uninstall: the quarantine in $(DESTDIR)/var/lib/ratelimitd holds $${n:-an unknown number of} held or frozen messages; it is kept (ratelimitd quarantine list, thaw, delete)"; \
	fi
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

# test: vet, every test (unit and integration: -tags integration; the
# integration tests start a real Postfix, Redis, Exim and chromium and fail
# when one is missing) with the race detector in random order, then a short
# run of each fuzz target. `go test ./...` alone runs the unit tests, on any
# machine and as any user. The packages of ALONE run after the others, one
# at a time and without the race detector: their tests time every answer of
# real daemon processes (built without it) under load against
# redis_timeout + 100 ms; under -race the test's own load client is slowed
# several times, and other packages' tests beside them on 2 cores make
# answers late. The Debian package test (packaging/deb_test.go, tag
# debpackage) installs this project's .deb on the host: it runs only in CI
# (CI=true, .ci/run) or with make test-package.
ALONE   ?= ./internal/daemontest
TAGS    ?= integration$(if $(filter true,$(CI)), debpackage)
test: deps vet
	$(GO) test -tags '$(TAGS)' -race -shuffle=on -count=1 -timeout 25m $$($(GO) list $(PKGS) | grep -v -x -F "$$($(GO) list $(ALONE))")
	$(GO) test -tags '$(TAGS)' -shuffle=on -count=1 -timeout 25m -p 1 $(ALONE)
	$(MAKE) fuzz FUZZTIME=$(FUZZTIME)

# test-package: build, lint, install, run and purge the Debian package on
# this machine (root; packaging/deb_test.go).
test-package: deps
	$(GO) test -tags 'integration debpackage' -count=1 -timeout 25m -run 'TestDebianPackage' -v ./packaging

# vet: the product without and with the test tags, the tools module, gofmt.
vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags 'integration debpackage' $(PKGS)
	cd tools && $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { gofmt -l .; echo "gofmt needed"; exit 1; }

check: vet
	$(GO) run honnef.co/go/tools/cmd/staticcheck@latest $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

fuzz:
	@./scripts/fuzz.sh $(FUZZTIME)

# bench: the Go micro-benchmarks, then the load generator against the real
# daemon and the protocol floor (tools/ratelimitd-bench; scripts/bench.sh),
# with the local backend and then the Redis backend (one server, then a
# 3-master Cluster), whose Redis CPU per message is set against the Redis
# floor of the same run: one empty EVALSHA per message. BENCHFLAGS, when
# set, replace the local run's flags (default --rss-users 1000000
# --rss-restart) and skip the Redis run.
BENCHFLAGS ?=
bench:
	GO=$(GO) ./scripts/bench.sh $(BENCHFLAGS)

integration: deps
	$(GO) test -tags integration -race -count=1 -run Integration -v ./...

clean:
	rm -rf bin
