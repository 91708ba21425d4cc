# ratelimitd make targets. Run as root on Debian: `make test` installs the
# Debian packages the integration tests need (postfix, redis-server) first.
GO      ?= go
PKGS    ?= ./...
# FUZZTIME is an execution count per target ("Nx"): a time-based -fuzztime can
# end with a spurious "context deadline exceeded" on a loaded machine.
FUZZTIME ?= 300000x

.PHONY: all build test deps check fmt vet bench fuzz integration clean

all: build

build:
	$(GO) build -o bin/ratelimitd ./cmd/ratelimitd

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
# daemon and the protocol floor (cmd/ratelimitd-bench; scripts/bench.sh).
BENCHFLAGS ?= --rss-users 1000000 --rss-restart
bench:
	GO=$(GO) ./scripts/bench.sh $(BENCHFLAGS)

integration: deps
	$(GO) test -race -count=1 -run Integration -v ./...

clean:
	rm -rf bin
