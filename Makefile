# ratelimitd make targets. Run as root on Debian: `make test` installs the
# Debian packages the integration tests need (postfix, redis-server) first.
GO      ?= go
PKGS    ?= ./...
# FUZZTIME is an execution count per target ("Nx"): a time-based -fuzztime can
# end with a spurious "context deadline exceeded" on a loaded machine.
FUZZTIME ?= 300000x

# Installation layout (DESTDIR for staging, e.g. a package build).
PREFIX  ?= /usr/local
SBINDIR ?= $(PREFIX)/sbin
MANDIR  ?= $(PREFIX)/share/man
SYSCONFDIR ?= /etc
UNITDIR ?= /etc/systemd/system
# VERSION is linked into the binary (ratelimitd --version, status); the VCS
# revision is stamped by go build itself.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

.PHONY: all build man install test deps check fmt vet bench fuzz integration clean

all: build

build:
	GOFLAGS="$(GOFLAGS) -buildvcs=auto" $(GO) build -ldflags "-X main.version=$(VERSION)" -o bin/ratelimitd ./cmd/ratelimitd

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

# deps installs what the integration tests start for real (Debian packages).
deps:
	@./scripts/deps.sh

# test: vet, every test with the race detector in random order (the
# integration tests start a real Postfix), then a short run of each fuzz target.
test: deps vet
	$(GO) test -race -shuffle=on -count=1 -timeout 25m $(PKGS)
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
# daemon and the protocol floor (cmd/ratelimitd-bench; scripts/bench.sh),
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
